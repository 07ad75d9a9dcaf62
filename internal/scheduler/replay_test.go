package scheduler_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/scheduler"
	. "trainyard/internal/scheduler/schedtest"
)

// mutateQueue applies one change to a crowded world, weighted towards the
// changes a told pass may replay (submits, cancels, priority and request
// changes of pending jobs), with the others mixed in: finishes, quota,
// share and usage changes, preemptions taking effect, time moving (retry
// backoffs and timeouts expiring, or not).
func mutateQueue(r *rand.Rand, h *Harness, next *int64, projects []string) string {
	s := &h.Snap
	switch r.IntN(16) {
	case 0, 1, 2, 3, 4:
		for range 1 + r.IntN(3) {
			*next++
			gpus := []int{0, 1, 1, 2, 4, 8}[r.IntN(6)]
			// Submitted now (the end of its project's run) or earlier (inside it).
			at := s.Now
			if r.IntN(2) == 0 {
				at = T0.Add(time.Duration(r.IntN(3600)) * time.Second)
			}
			j := Job(*next).Pool(anyPool(r, s)).Project(projects[r.IntN(len(projects))]).GPUs(gpus).CPUs(float64(2 + 2*gpus)).
				Memory(domain.ByteSize(8+8*gpus) << 30).Priority(domain.Priorities()[r.IntN(4)]).Submitted(at)
			if gpus == 8 && r.IntN(3) == 0 {
				j.Nodes(2 + r.IntN(2)) // a gang
			}
			if r.IntN(2) == 0 {
				j.Preemptible()
			}
			if r.IntN(3) == 0 {
				j.Timeout(time.Duration(1+r.IntN(24)) * time.Hour)
			}
			if r.IntN(10) == 0 {
				j.NotBefore(s.Now.Add(time.Duration(r.IntN(600)) * time.Second))
			}
			h.Submit(j.Obj())
		}
		return "submit"
	case 5, 6, 7:
		for range 1 + r.IntN(2) {
			if n := len(s.Pending); n > 0 {
				i := r.IntN(n)
				s.Pending = slices.Delete(slices.Clone(s.Pending), i, i+1)
			}
		}
		return "cancel"
	case 8:
		if n := len(s.Pending); n > 0 {
			s.Pending = slices.Clone(s.Pending)
			s.Pending[r.IntN(n)].Priority = domain.Priorities()[r.IntN(4)]
		}
		return "priority"
	case 9:
		if n := len(s.Pending); n > 0 {
			s.Pending = slices.Clone(s.Pending)
			s.Pending[r.IntN(n)].Resources.GPUs = []int{0, 1, 2, 4}[r.IntN(4)]
		}
		return "resources"
	case 10:
		if n := len(s.Running); n > 0 {
			h.Finish(s.Running[r.IntN(n)].JobID)
		}
		return "finish"
	case 11:
		if len(s.Quotas) > 0 {
			s.Quotas = slices.Clone(s.Quotas)
			q := &s.Quotas[r.IntN(len(s.Quotas))]
			q.Guaranteed.GPUs = r.IntN(24)
		}
		return "quota"
	case 12:
		switch r.IntN(2) {
		case 0:
			s.Projects = slices.Clone(s.Projects)
			s.Projects[r.IntN(len(s.Projects))].Shares = float64(1 + r.IntN(4))
			return "shares"
		default:
			s.Usage = append(slices.Clone(s.Usage), scheduler.Usage{Project: projects[r.IntN(len(projects))], Pool: anyPool(r, s), Value: r.Float64()})
			return "usage"
		}
	case 13:
		h.Advance(0) // preempted jobs stop and are requeued
		return "stops"
	case 14:
		h.Advance(time.Duration(1+r.IntN(10)) * time.Minute) // backoffs expire
		return "advance"
	case 15:
		// The clock alone: nothing stops, jobs past their timeout go on.
		s.Now = s.Now.Add(time.Duration(r.IntN(900)) * time.Second)
		// Sometimes to the very end of a running job's timeout, or just
		// before or after it, where estimates change.
		if n := len(s.Running); n > 0 && r.IntN(2) == 0 {
			a := s.Running[r.IntN(n)]
			if end := a.StartedAt.Add(a.Timeout); a.Timeout > 0 && end.After(s.Now) {
				s.Now = end.Add(time.Duration(r.IntN(3)-1) * time.Nanosecond)
			}
		}
		return "tick"
	}
	return "none"
}

// anyPool picks one of the snapshot's pools (the first, of one, drawing
// nothing).
func anyPool(r *rand.Rand, s *scheduler.Snapshot) string {
	if len(s.Pools) == 1 {
		return s.Pools[0].Name
	}
	return s.Pools[r.IntN(len(s.Pools))].Name
}

// TestReplayMatchesSchedule runs told passes, each handed the last plan
// back as the control loop does, over crowded worlds changed mostly by
// submits and cancels at the same time, so that passes are replayed from
// the last walk's log, and checks every plan against the pure Schedule's
// byte for byte. It also checks that replays happen, so that the test
// covers them.
func TestReplayMatchesSchedule(t *testing.T) {
	seeds := 60
	if testing.Short() {
		seeds = 12
	}
	var n int64
	for seed := range uint64(seeds) {
		r := rand.New(rand.NewPCG(seed, 97))
		h := crowdedWorld(r)
		projects := make([]string, 0, len(h.Snap.Projects))
		for _, p := range h.Snap.Projects {
			projects = append(projects, p.Name)
		}
		next := int64(1_000_000)
		var hint hinted
		hint.readOnly = seed%2 == 1 // passes that do not replay reuse the pool when it did not change
		for step := range 60 {
			what := "none"
			for range 1 + r.IntN(2) {
				what = mutateQueue(r, h, &next, projects)
			}
			if r.IntN(2) == 0 {
				// A control loop's passes run at a new time each.
				h.Snap.Now = h.Snap.Now.Add(time.Duration(r.IntN(90)) * time.Second)
				what += ", tick"
			}
			slices.SortFunc(h.Snap.Pending, func(a, b scheduler.Pending) int { return cmp.Compare(a.JobID, b.JobID) })
			want := scheduler.Schedule(h.Snap, h.Config)
			if got, ok := hint.schedule(h.Snap, h.Config); !ok || planBytes(t, got) != planBytes(t, want) {
				t.Fatalf("seed %d step %d (after %s): told plan differs:\n--- want\n%s--- got\n%s", seed, step, what, Format(h.Snap, want), Format(h.Snap, got))
			}
			if r.IntN(6) == 0 {
				h.Apply(want) // starts, preemptions
			}
		}
		n += hint.inc.Replayed()
	}
	t.Logf("%d of %d passes replayed", n, seeds*60)
	if n < int64(seeds)*5 {
		t.Errorf("%d passes replayed over %d seeds; the test should exercise replay more", n, seeds)
	}
}

// TestReplayLargeQueue replays submits and cancels on the benchmark world
// (1,000 nodes, 100 projects) once its queue settled, where most classes'
// decisions hold across long stretches of the queue.
func TestReplayLargeQueue(t *testing.T) {
	n := 5_000
	if testing.Short() {
		n = 1_000
	}
	base, _ := settled(n)
	h := New(nil)
	h.Snap = base
	r := rand.New(rand.NewPCG(3, 4))
	var hint hinted
	next := int64(1 << 40)
	for step := range 40 {
		what := "submit"
		switch r.IntN(4) {
		case 0, 1:
			next++
			j := Job(next).Pool("big").Project(fmt.Sprintf("proj-%03d", r.IntN(100))).GPUs([]int{1, 2, 4, 8}[r.IntN(4)]).
				Priority(domain.Priorities()[r.IntN(4)]).Submitted(T0.Add(time.Duration(r.IntN(36000)) * time.Second))
			if r.IntN(2) == 0 {
				j.Preemptible()
			}
			h.Submit(j.Obj())
		case 2:
			i := r.IntN(len(h.Snap.Pending))
			h.Snap.Pending = slices.Delete(slices.Clone(h.Snap.Pending), i, i+1)
			what = "cancel"
		default:
			h.Snap.Pending = slices.Clone(h.Snap.Pending)
			h.Snap.Pending[r.IntN(len(h.Snap.Pending))].Priority = domain.Priorities()[r.IntN(4)]
			what = "priority"
		}
		slices.SortFunc(h.Snap.Pending, func(a, b scheduler.Pending) int { return cmp.Compare(a.JobID, b.JobID) })
		want := scheduler.Schedule(h.Snap, h.Config)
		if got, ok := hint.schedule(h.Snap, h.Config); !ok || planBytes(t, got) != planBytes(t, want) {
			t.Fatalf("step %d (after %s): told plan differs", step, what)
		}
	}
	got := hint.inc.Replayed()
	t.Logf("%d of 40 passes replayed", got)
	if got < 10 {
		t.Errorf("%d of 40 passes replayed; want most", got)
	}
}
