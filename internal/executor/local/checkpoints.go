package local

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"trainyard/internal/artifacts"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/logs"
)

// The shim is the attempt's in-job agent for checkpoints too: before the
// job starts it picks the checkpoint to resume from, checking its digest;
// while the job runs, and once more when it ends, it registers each
// checkpoint the job completes, with its digest. It writes what it found to
// files in the attempt directory, which the executor turns into events
// (Started's Resumed, Checkpointed), so a reattached executor reports them
// too.
const (
	// checkpointsFile holds one JSON checkpointRecord per line, appended
	// by the shim for each checkpoint it found complete.
	checkpointsFile = "checkpoints.jsonl"
	// resumeFile is the shim's resumeRecord, written before the job
	// starts.
	resumeFile = "resume.json"
)

// checkpointScan is how often the shim looks for checkpoints the job
// completed while it runs. A scan reads the checkpoint directory and its
// entries' metadata; only a new or changed complete checkpoint is read
// whole (for its digest).
const checkpointScan = 3 * time.Second

// checkpointRecord is one line of checkpointsFile.
type checkpointRecord struct {
	Name     string    `json:"name"`
	Location string    `json:"location"`
	Size     int64     `json:"size"`
	Files    int       `json:"files"`
	ModTime  time.Time `json:"mtime"`
	SHA256   string    `json:"sha256"`
}

// resumeRecord is resumeFile: the checkpoint the attempt was handed
// (empty: none) and why the ones preferred to it were skipped.
type resumeRecord struct {
	Name string `json:"name,omitempty"`
	Note string `json:"note,omitempty"`
}

// checkpointOutputs opens the job's outputs for the agent's checkpoint
// work, or returns nil when the attempt has no checkpoint directory. The
// outputs directory is the server's; everything below it is the job's, and
// read without following a link (artifacts.Dir).
func (s *shim) checkpointOutputs() executor.Outputs {
	dir := s.rec.CheckpointDir
	if dir == "" || filepath.Base(dir) != executor.CheckpointsDir {
		return nil
	}
	d, err := artifacts.OpenDir(filepath.Dir(dir))
	if err != nil {
		return nil
	}
	return &outputs{d: d}
}

// seenCheckpoint is what the agent last knew of a complete checkpoint.
type seenCheckpoint struct {
	mod    time.Time
	size   int64
	files  int
	sha256 string
}

// checkpointWatch registers the checkpoints an attempt completes.
type checkpointWatch struct {
	s    *shim
	o    executor.Outputs
	seen map[string]seenCheckpoint
	f    *os.File // checkpointsFile, opened on the first record
}

// newCheckpointWatch starts from what the server already has registered
// (the launch's Resume list): those are not read again unless they change.
func (s *shim) newCheckpointWatch(o executor.Outputs) *checkpointWatch {
	w := &checkpointWatch{s: s, o: o, seen: map[string]seenCheckpoint{}}
	if len(s.rec.Resume) == 0 {
		return w // nothing registered: no listing to compare with
	}
	known := map[string]string{}
	for _, r := range s.rec.Resume {
		known[r.Name] = r.SHA256
	}
	list, _ := o.Checkpoints(context.Background())
	for _, c := range list {
		if sha, ok := known[c.Name]; ok && c.Complete && sha != "" {
			w.seen[c.Name] = seenCheckpoint{mod: c.ModTime, size: c.Size, files: c.Files, sha256: sha}
		}
	}
	return w
}

// chooseResume hands the attempt the first checkpoint of the launch's
// Resume list that is still complete and whose digest matches the one
// registered: TRAINYARD_RESUME_FROM in the job's environment (empty when
// none is), noted in the log and in resumeFile.
func (s *shim) chooseResume(w *checkpointWatch) {
	var o executor.Outputs
	if w != nil {
		o = w.o
	}
	got, ok, skipped := executor.PickResume(context.Background(), o, s.rec.Resume)
	r := resumeRecord{Note: strings.Join(skipped, "; ")}
	if ok {
		r.Name = got.Name
		w.seen[got.Name] = seenCheckpoint{mod: got.ModTime, size: got.Size, files: got.Files, sha256: got.SHA256}
	}
	for _, n := range skipped {
		s.log.system("not resuming from checkpoint %s", n)
	}
	from := ""
	if r.Name != "" {
		from = filepath.Join(s.rec.CheckpointDir, r.Name)
		s.log.system("resuming from checkpoint %s (digest verified)", r.Name)
	} else if len(s.rec.Resume) > 0 {
		s.log.system("no checkpoint to resume from is intact; starting afresh")
	}
	if len(s.rec.Resume) > 0 {
		s.rec.Env = setEnv(s.rec.Env, []string{"TRAINYARD_RESUME_FROM=" + from})
		if b, err := json.Marshal(r); err == nil {
			_ = writeFileAtomic(filepath.Join(s.dir, resumeFile), b, 0o600)
		}
	}
}

// scan registers every complete checkpoint that is new, or changed since
// the last scan with a new digest. A checkpoint that changes or vanishes
// while it is read is left for the next scan.
func (w *checkpointWatch) scan() {
	list, err := w.o.Checkpoints(context.Background())
	if err != nil {
		return
	}
	for _, c := range list {
		if !c.Complete {
			continue
		}
		prev, ok := w.seen[c.Name]
		if ok && prev.mod.Equal(c.ModTime) && prev.size == c.Size && prev.files == c.Files {
			continue
		}
		got, err := w.o.Digest(context.Background(), c.Name)
		if err != nil {
			continue
		}
		w.seen[c.Name] = seenCheckpoint{mod: got.ModTime, size: got.Size, files: got.Files, sha256: got.SHA256}
		if ok && prev.sha256 == got.SHA256 {
			continue // touched, not changed
		}
		w.record(got)
	}
}

// record appends one checkpoint to checkpointsFile and tells the executor.
func (w *checkpointWatch) record(c executor.Checkpoint) {
	if w.f == nil {
		f, err := os.OpenFile(filepath.Join(w.s.dir, checkpointsFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			w.s.log.system("cannot record checkpoint %s: %v", c.Name, err)
			return
		}
		w.f = f
	}
	b, err := json.Marshal(checkpointRecord{Name: c.Name, Location: c.Location, Size: c.Size, Files: c.Files, ModTime: c.ModTime.UTC(), SHA256: c.SHA256})
	if err != nil {
		return
	}
	if _, err := w.f.Write(append(b, '\n')); err != nil {
		w.s.log.system("cannot record checkpoint %s: %v", c.Name, err)
		return
	}
	w.s.log.system("checkpoint %s complete: %s in %d file(s), sha256 %s", c.Name, logs.HumanSize(c.Size), c.Files, c.SHA256[:min(12, len(c.SHA256))])
	w.s.notify("checkpoint")
}

// run scans every checkpointScan until stop is closed, or less often when
// a scan takes long (nextScan).
func (w *checkpointWatch) run(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTimer(checkpointScan)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			start := time.Now()
			w.scan()
			t.Reset(nextScan(time.Since(start)))
		case <-stop:
			return
		}
	}
}

// nextScan is the wait before the next scan after one that took took: a
// job that fills its checkpoint directory with entries (or huge
// checkpoints) makes the supervisor, whose CPU is not the job's, spend at
// most about 5% of a core on it.
func nextScan(took time.Duration) time.Duration {
	return max(checkpointScan, 20*took)
}

// close ends the watch: the last scan, then the file is closed.
func (w *checkpointWatch) close() {
	w.scan()
	if w.f != nil {
		_ = w.f.Close()
	}
}

// reportCheckpoints reads the checkpoints the attempt's shim recorded
// since the last read and reports them as Checkpointed events. A
// reattaching executor reads from the start; the consumer keeps what it
// has. Calls for one attempt are serialized.
func (e *Executor) reportCheckpoints(a *attempt) {
	a.pointsMu.Lock()
	defer a.pointsMu.Unlock()
	f, err := logs.OpenFile(filepath.Join(a.dir, checkpointsFile))
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			e.log.Warn("read checkpoint records", "attempt", a.ref.String(), "err", err)
		}
		return
	}
	defer f.Close()
	evs, n := readCheckpoints(f, a.ckptOff, a.ref)
	a.ckptOff += n
	for _, ev := range evs {
		e.emit(ev)
	}
}

// readCheckpoints parses the complete checkpoint records from off on as
// Checkpointed events of ref, and returns them with the bytes consumed.
func readCheckpoints(f *os.File, off int64, ref executor.Ref) (evs []executor.Event, n int64) {
	br := bufio.NewReader(io.NewSectionReader(f, off, 1<<40))
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			return evs, n // the end, or a line still being written
		}
		n += int64(len(line))
		var r checkpointRecord
		if json.Unmarshal(line, &r) != nil || r.Name == "" {
			continue
		}
		c := executor.Checkpoint{Name: r.Name, Location: r.Location, Complete: true, Size: r.Size, Files: r.Files, ModTime: r.ModTime, SHA256: r.SHA256}
		evs = append(evs, executor.Event{Ref: ref, Kind: executor.Checkpointed, At: r.ModTime, Checkpoint: &c})
	}
}

// checkCheckpoints reports a reattached shim's new checkpoint records when
// the file changed since seen, and returns the modification time it read
// at.
func (e *Executor) checkCheckpoints(a *attempt, seen time.Time) time.Time {
	st, err := os.Stat(filepath.Join(a.dir, checkpointsFile))
	if err != nil || !st.ModTime().After(seen) {
		return seen
	}
	e.reportCheckpoints(a)
	return st.ModTime()
}

// readResume returns what the shim recorded of the attempt's resume.
func readResume(dir string) resumeRecord {
	var r resumeRecord
	f, err := logs.OpenFile(filepath.Join(dir, resumeFile))
	if err != nil {
		return r
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err == nil {
		_ = json.Unmarshal(b, &r)
	}
	return r
}

// sealOutputs records the job's outputs in r when an attempt that ran has
// ended (executor.Seal, never through a link: artifacts.Dir); they travel
// in the exit record, not a file of their own (creating a file is one of
// the costlier steps of an attempt's end).
func (s *shim) sealOutputs(r *exitRecord) {
	dir := s.rec.OutputDir
	if dir == "" || !r.started() {
		return
	}
	d, err := artifacts.OpenDir(dir)
	if err != nil {
		s.log.system("cannot record the job's outputs in %s: %v", dir, err)
		return
	}
	o := &outputs{d: d}
	defer o.Close()
	sealed, err := executor.Seal(context.Background(), o, r.State == domain.AttemptSucceeded)
	if err != nil {
		s.log.system("cannot record the job's outputs in %s: %v", dir, err)
		return
	}
	r.Outputs = &sealed
	var size int64
	for _, f := range sealed.Files {
		size += f.Size
	}
	note := ""
	if sealed.ReadOnly {
		note = ", now read-only"
	}
	s.log.system("outputs recorded: %d file(s), %s%s", len(sealed.Files), logs.HumanSize(size), note)
}

// reportOutputs reports what the shim recorded of the job's outputs, if
// it did.
func (e *Executor) reportOutputs(a *attempt, r *exitRecord) {
	if r.Outputs != nil {
		e.emit(executor.Event{Ref: a.ref, Kind: executor.OutputsSealed, At: r.FinishedAt, Outputs: r.Outputs})
	}
}
