package sqlite

import (
	"bytes"
	"encoding/binary"
	"math"
	"time"
	"unsafe"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// A cached detail keeps its job, attempts and events as one byte slice
// (detailBlob), not as the structs a read gives: the collector need not
// trace a slice of bytes, where a hundred thousand entries of structs
// held millions of pointers it marked in every cycle; and a list page
// reads each job's fields from a few adjacent cache lines. Decoding
// copies no text: the strings it gives point into the slice, which is
// never written once made. TestDetailBlobRoundTrip holds the encoding to
// every field of the three types.

// detailBlob is the encoding of a detail: its job (all but Spec and
// SpecJSON), the times of its attempts (what pricing a list page reads),
// its attempts, then its events.
type detailBlob struct {
	b        []byte
	times    int32 // where the attempts' times start
	attempts int32 // where the attempts start
}

func encodeDetail(d *store.JobDetail) detailBlob {
	var w blobWriter
	w.job(&d.Job)
	times := len(w.b)
	w.int(int64(len(d.Attempts)))
	for i := range d.Attempts {
		a := &d.Attempts[i]
		w.int(int64(a.Number))
		w.time(a.StartedAt)
		w.time(a.FinishedAt)
	}
	at := len(w.b)
	w.count(len(d.Attempts), d.Attempts == nil)
	for i := range d.Attempts {
		w.attempt(&d.Attempts[i])
	}
	w.count(len(d.Events), d.Events == nil)
	for i := range d.Events {
		w.event(&d.Events[i])
	}
	return detailBlob{b: bytes.Clone(w.b), times: int32(times), attempts: int32(at)} // no spare capacity held
}

// job sets j's fields from the blob, leaving Spec and SpecJSON as they
// are; with code false it leaves Code nil (list rows carry none).
func (x detailBlob) job(j *domain.Job, code bool) {
	r := blobReader{b: x.b}
	r.job(j, code)
}

// details decodes the attempts and the events.
func (x detailBlob) details() ([]domain.Attempt, []domain.Event) {
	r := blobReader{b: x.b, off: int(x.attempts)}
	var atts []domain.Attempt
	if n, isNil := r.count(); !isNil {
		atts = make([]domain.Attempt, n)
		for i := range atts {
			r.attempt(&atts[i])
		}
	}
	var evs []domain.Event
	if n, isNil := r.count(); !isNil {
		evs = make([]domain.Event, n)
		for i := range evs {
			r.event(&evs[i])
		}
	}
	return atts, evs
}

// appendAttemptTimes appends the times of the attempts that started, as
// job id's.
func (x detailBlob) appendAttemptTimes(times []store.AttemptTime, id int64) []store.AttemptTime {
	r := blobReader{b: x.b, off: int(x.times)}
	for range r.int() {
		number, started, finished := int(r.int()), r.time(), r.time()
		if !started.IsZero() {
			times = append(times, store.AttemptTime{JobID: id, Attempt: number, StartedAt: started, FinishedAt: finished})
		}
	}
	return times
}

type blobWriter struct{ b []byte }

func (w *blobWriter) int(v int64) { w.b = binary.AppendVarint(w.b, v) }
func (w *blobWriter) str(s string) {
	w.int(int64(len(s)))
	w.b = append(w.b, s...)
}
func (w *blobWriter) bool(v bool) {
	if v {
		w.b = append(w.b, 1)
	} else {
		w.b = append(w.b, 0)
	}
}
func (w *blobWriter) float(f float64) {
	w.b = binary.LittleEndian.AppendUint64(w.b, math.Float64bits(f))
}

// time writes t as its Unix nanoseconds, as the database keeps it (a read
// makes it time.Unix(0, n).UTC()); zero is NULL. The nanoseconds take
// eight bytes as they are: a varint of today's would take nine, and
// decoding one costs a loop.
func (w *blobWriter) time(t time.Time) {
	if t.IsZero() {
		w.bool(false)
		return
	}
	w.bool(true)
	w.b = binary.LittleEndian.AppendUint64(w.b, uint64(t.UnixNano()))
}

// count writes a slice's length, telling nil from empty.
func (w *blobWriter) count(n int, isNil bool) {
	if isNil {
		w.int(-1)
		return
	}
	w.int(int64(n))
}

func (w *blobWriter) job(j *domain.Job) {
	w.int(j.ID)
	w.str(j.Name)
	w.str(j.Project)
	w.str(j.Pool)
	w.str(string(j.State))
	w.str(string(j.Reason))
	w.str(j.Message)
	w.str(string(j.Priority))
	w.str(j.Submitter)
	w.time(j.SubmittedAt)
	w.time(j.UpdatedAt)
	w.time(j.StartedAt)
	w.time(j.FinishedAt)
	w.int(int64(j.Resources.GPUs))
	w.float(j.Resources.CPUs)
	w.int(int64(j.Resources.Memory))
	w.int(int64(j.Resources.Nodes))
	w.str(j.SpecHash)
	w.str(j.OutputDir)
	w.int(int64(j.Attempts))
	w.time(j.NextAttempt)
	w.bool(j.CancelRequested)
	w.bool(j.PreemptRequested)
	w.int(int64(j.Preemptions))
	w.str(j.IdempotencyKey)
	w.int(int64(j.Timeout))
	w.bool(j.Preemptible)
	w.bool(j.Code != nil)
	if c := j.Code; c != nil {
		w.str(c.SHA256)
		w.str(c.Commit)
		w.bool(c.Dirty)
	}
	w.int(j.RerunOf)
}

func (w *blobWriter) attempt(a *domain.Attempt) {
	w.int(a.JobID)
	w.int(int64(a.Number))
	w.str(string(a.State))
	w.str(string(a.Reason))
	w.str(a.Message)
	w.bool(a.ExitCode != nil)
	if a.ExitCode != nil {
		w.int(int64(*a.ExitCode))
	}
	w.str(a.Node)
	w.count(len(a.GPUs), a.GPUs == nil)
	for _, g := range a.GPUs {
		w.int(int64(g))
	}
	w.time(a.CreatedAt)
	w.time(a.StartedAt)
	w.time(a.FinishedAt)
	w.float(a.Usage.CPUSeconds)
	w.int(int64(a.Usage.MaxRSS))
	w.float(a.Usage.GPUSeconds)
	w.bool(a.Borrowed)
}

func (w *blobWriter) event(e *domain.Event) {
	w.int(e.ID)
	w.int(e.JobID)
	w.int(int64(e.Attempt))
	w.time(e.At)
	w.str(string(e.From))
	w.str(string(e.To))
	w.str(e.Actor)
	w.str(string(e.Reason))
	w.str(e.Message)
}

// blobReader reads what blobWriter wrote; the bytes are the cache's own,
// so it checks nothing.
type blobReader struct {
	b   []byte
	off int
}

func (r *blobReader) int() int64 {
	if c := r.b[r.off]; c < 0x80 { // most: lengths, counts, small numbers
		r.off++
		return int64(c>>1) ^ -int64(c&1)
	}
	v, n := binary.Varint(r.b[r.off:])
	r.off += n
	return v
}

func (r *blobReader) str() string {
	n := int(r.int())
	if n == 0 {
		return ""
	}
	s := unsafe.String(&r.b[r.off], n)
	r.off += n
	return s
}

func (r *blobReader) bool() bool {
	v := r.b[r.off] != 0
	r.off++
	return v
}

func (r *blobReader) float() float64 {
	v := math.Float64frombits(binary.LittleEndian.Uint64(r.b[r.off:]))
	r.off += 8
	return v
}

func (r *blobReader) time() time.Time {
	if !r.bool() {
		return time.Time{}
	}
	n := int64(binary.LittleEndian.Uint64(r.b[r.off:]))
	r.off += 8
	return time.Unix(0, n).UTC()
}

func (r *blobReader) count() (n int, isNil bool) {
	v := r.int()
	return max(int(v), 0), v < 0
}

func (r *blobReader) job(j *domain.Job, code bool) {
	j.ID = r.int()
	j.Name = r.str()
	j.Project = r.str()
	j.Pool = r.str()
	j.State = domain.JobState(r.str())
	j.Reason = domain.Reason(r.str())
	j.Message = r.str()
	j.Priority = domain.Priority(r.str())
	j.Submitter = r.str()
	j.SubmittedAt = r.time()
	j.UpdatedAt = r.time()
	j.StartedAt = r.time()
	j.FinishedAt = r.time()
	j.Resources.GPUs = int(r.int())
	j.Resources.CPUs = r.float()
	j.Resources.Memory = domain.ByteSize(r.int())
	j.Resources.Nodes = int(r.int())
	j.SpecHash = r.str()
	j.OutputDir = r.str()
	j.Attempts = int(r.int())
	j.NextAttempt = r.time()
	j.CancelRequested = r.bool()
	j.PreemptRequested = r.bool()
	j.Preemptions = int(r.int())
	j.IdempotencyKey = r.str()
	j.Timeout = domain.Duration(r.int())
	j.Preemptible = r.bool()
	j.Code = nil
	if r.bool() {
		c := domain.CodeRef{SHA256: r.str(), Commit: r.str(), Dirty: r.bool()}
		if code {
			j.Code = &c
		}
	}
	j.RerunOf = r.int()
}

func (r *blobReader) attempt(a *domain.Attempt) {
	a.JobID = r.int()
	a.Number = int(r.int())
	a.State = domain.AttemptState(r.str())
	a.Reason = domain.Reason(r.str())
	a.Message = r.str()
	a.ExitCode = nil
	if r.bool() {
		code := int(r.int())
		a.ExitCode = &code
	}
	a.Node = r.str()
	a.GPUs = nil
	if n, isNil := r.count(); !isNil {
		a.GPUs = make([]int, n)
		for i := range a.GPUs {
			a.GPUs[i] = int(r.int())
		}
	}
	a.CreatedAt = r.time()
	a.StartedAt = r.time()
	a.FinishedAt = r.time()
	a.Usage.CPUSeconds = r.float()
	a.Usage.MaxRSS = domain.ByteSize(r.int())
	a.Usage.GPUSeconds = r.float()
	a.Borrowed = r.bool()
}

func (r *blobReader) event(e *domain.Event) {
	e.ID = r.int()
	e.JobID = r.int()
	e.Attempt = int(r.int())
	e.At = r.time()
	e.From = domain.JobState(r.str())
	e.To = domain.JobState(r.str())
	e.Actor = r.str()
	e.Reason = domain.Reason(r.str())
	e.Message = r.str()
}
