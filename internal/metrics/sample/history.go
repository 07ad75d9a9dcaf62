package sample

import (
	"math"
	"time"
)

// History: besides the latest sample, a Sampler keeps the last readings of
// each attempt in a ring of fixed size, for charts of an attempt's CPU,
// memory and GPU use. Its memory is bounded per attempt, and the attempts
// it keeps are the running ones plus at most HistoryEnded that ended
// within HistoryGrace, so a round's cost follows the running attempts,
// never every job there ever was.
//
// Memory per attempt: a reading is 24 bytes (time in Unix nanoseconds, CPU
// seconds, RSS bytes) plus 4 bytes (a float32) per recorded GPU, of which
// at most maxHistoryGPUs are kept. At the default 360 readings that is
// 360 × 24 = 8,640 bytes without GPUs and at most 360 × (24 + 16 × 4) =
// 31,680 bytes (about 31 KiB) with them, plus about 150 bytes of ring
// header and map entry (and the allocator's rounding up). A ring grows to
// that size only as readings come, by doubling, never past it.

const (
	// DefaultHistoryLen is how many readings of each attempt History
	// keeps when Config.HistoryLen is zero: 90 minutes at DefaultInterval.
	DefaultHistoryLen = 360
	// DefaultHistoryGrace is how long an ended attempt's readings are kept
	// when Config.HistoryGrace is zero.
	DefaultHistoryGrace = 15 * time.Minute
	// DefaultHistoryEnded is how many ended attempts' readings are kept at
	// most when Config.HistoryEnded is zero.
	DefaultHistoryEnded = 64
	// maxHistoryGPUs is how many of an attempt's GPUs the history records
	// (the first ones assigned); the latest sample has them all.
	maxHistoryGPUs = 16
)

// Reading is one past measurement of an attempt, as History returns it.
type Reading struct {
	At time.Time
	// CPUSeconds, RSSBytes: as in Sample.
	CPUSeconds float64
	RSSBytes   int64
	// MemoryLimit is the attempt's memory request in bytes (0: none).
	MemoryLimit int64
	// GPUs holds the utilisation of each recorded GPU, in the order the
	// attempt was assigned them; NaN when it was not read that round.
	GPUs []GPUUtil
}

// GPUUtil is one GPU's utilisation in a Reading.
type GPUUtil struct {
	Index       int
	Utilization float64 // percent, as GPUStat
}

// reading is one ring entry: 24 bytes.
type reading struct {
	at  int64 // Unix nanoseconds
	cpu float64
	rss int64
}

// ring is the history of one attempt.
type ring struct {
	gpus  []int     // the GPU indices recorded, at most maxHistoryGPUs
	limit int64     // the attempt's memory request
	rs    []reading // grows to the ring's size; once full, rs[next] is the oldest
	util  []float32 // len(gpus) values per reading, at the same positions as rs
	next  int
	round uint64    // the last round that found the attempt running
	ended time.Time // when a round first found it gone; zero while it runs
}

// add records smp, dropping the oldest reading when the ring is full.
func (r *ring) add(smp *Sample, size int) {
	rd := reading{at: smp.At.UnixNano(), cpu: smp.CPUSeconds, rss: smp.RSSBytes}
	if n := len(r.rs); n > 0 {
		// The newest is just before the oldest: rs[n-1] until the ring is full.
		if last := r.rs[(r.next+n-1)%n]; rd.at <= last.at {
			return // a concurrent round's older reading: keep the order
		}
	}
	r.limit = smp.MemoryLimit
	g := len(r.gpus)
	i := len(r.rs)
	if i < size {
		if i == cap(r.rs) { // grow by doubling, never past size
			n := min(max(2*i, 8), size)
			r.rs = append(make([]reading, 0, n), r.rs...)
			r.util = append(make([]float32, 0, n*g), r.util...)
		}
		r.rs = append(r.rs, rd)
		r.util = r.util[:len(r.util)+g] // within the capacity grown with rs's
	} else {
		i = r.next
		r.rs[i] = rd
		r.next = (r.next + 1) % size
	}
	u := r.util[i*g : (i+1)*g]
	for j, idx := range r.gpus {
		u[j] = float32(math.NaN())
		for _, st := range smp.GPUs {
			if st.Index == idx {
				u[j] = float32(st.Utilization)
			}
		}
	}
}

// readings returns the ring's readings, oldest first.
func (r *ring) readings() []Reading {
	out := make([]Reading, 0, len(r.rs))
	g := len(r.gpus)
	for k := range r.rs {
		i := (r.next + k) % len(r.rs)
		rd := r.rs[i]
		x := Reading{At: time.Unix(0, rd.at), CPUSeconds: rd.cpu, RSSBytes: rd.rss, MemoryLimit: r.limit}
		if g > 0 {
			x.GPUs = make([]GPUUtil, g)
			for j, idx := range r.gpus {
				x.GPUs[j] = GPUUtil{Index: idx, Utilization: float64(r.util[i*g+j])}
			}
		}
		out = append(out, x)
	}
	return out
}

// recordHistory adds a round's samples to the rings, marks those of
// attempts no longer running as ended, and drops the ended ones past
// HistoryGrace or beyond HistoryEnded (the longest ended first). It costs
// one step per running attempt and per ended attempt kept. Called with
// s.mu held.
func (s *Sampler) recordHistory(out []Sample, now time.Time) {
	if s.cfg.HistoryLen <= 0 {
		return
	}
	if s.hist == nil {
		s.hist = make(map[attemptKey]*ring)
	}
	s.round++
	for i := range out {
		smp := &out[i]
		k := attemptKey{smp.JobID, smp.Attempt}
		r := s.hist[k]
		if r == nil {
			if !smp.OK {
				continue // nothing read yet: no ring until there is
			}
			r = &ring{gpus: firstGPUs(smp.Target.GPUs, maxHistoryGPUs)}
			s.hist[k] = r
		}
		r.round, r.ended = s.round, time.Time{}
		if smp.OK {
			r.add(smp, s.cfg.HistoryLen)
		}
	}
	ended := 0
	for k, r := range s.hist {
		if r.round == s.round {
			continue
		}
		if r.ended.IsZero() {
			r.ended = now
		}
		if now.Sub(r.ended) >= s.cfg.HistoryGrace {
			delete(s.hist, k)
			continue
		}
		ended++
	}
	for ; ended > s.cfg.HistoryEnded; ended-- {
		var oldest attemptKey
		var at time.Time
		for k, r := range s.hist {
			if r.round != s.round && (at.IsZero() || r.ended.Before(at)) {
				oldest, at = k, r.ended
			}
		}
		delete(s.hist, oldest)
	}
}

// firstGPUs returns a copy of the first n of xs at most.
func firstGPUs(xs []int, n int) []int {
	if len(xs) == 0 {
		return nil
	}
	return append([]int(nil), xs[:min(len(xs), n)]...)
}

// attemptKey names one attempt.
type attemptKey struct {
	job     int64
	attempt int
}

// History returns the readings kept of one attempt, oldest first: those of
// its last HistoryLen rounds in which it could be read, while it runs and
// for HistoryGrace after it ended. Nil when none are kept.
func (s *Sampler) History(jobID int64, attempt int) []Reading {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.hist[attemptKey{jobID, attempt}]
	if r == nil || len(r.rs) == 0 {
		return nil
	}
	return r.readings()
}
