package scheduler_test

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/scheduler"
	. "trainyard/internal/scheduler/schedtest"
)

// mutate applies one random small change to the harness's snapshot: a
// submit, finish, cancel, priority change, quota change, usage change or
// time advance.
func mutate(r *rand.Rand, h *Harness, next *int64) string {
	s := &h.Snap
	switch r.IntN(9) {
	case 0, 1:
		randomJobs(r, h, next, 1+r.IntN(3))
		return "submit"
	case 2:
		if len(s.Running) > 0 {
			h.Finish(s.Running[r.IntN(len(s.Running))].JobID)
		}
		return "finish"
	case 3:
		if len(s.Pending) > 0 {
			i := r.IntN(len(s.Pending))
			s.Pending = slices.Delete(slices.Clone(s.Pending), i, i+1)
		}
		return "cancel"
	case 4:
		if len(s.Pending) > 0 {
			s.Pending = slices.Clone(s.Pending)
			s.Pending[r.IntN(len(s.Pending))].Priority = domain.Priorities()[r.IntN(4)]
		}
		return "priority"
	case 5:
		if len(s.Quotas) > 0 {
			s.Quotas = slices.Clone(s.Quotas)
			q := &s.Quotas[r.IntN(len(s.Quotas))]
			q.Guaranteed.GPUs = r.IntN(12)
			q.Borrow.GPUs = r.IntN(8)
		}
		return "quota"
	case 6:
		s.Usage = append(slices.Clone(s.Usage), scheduler.Usage{Project: []string{"a", "b", "c", "d"}[r.IntN(4)],
			Pool: s.Pools[r.IntN(len(s.Pools))].Name, Value: r.Float64()})
		return "usage"
	case 7:
		h.Advance(time.Duration(r.IntN(40)) * time.Minute)
		return "advance"
	default:
		if len(s.Pending) > 0 {
			s.Pending = slices.Clone(s.Pending)
			s.Pending[r.IntN(len(s.Pending))].Resources.GPUs = r.IntN(5)
		}
		return "resources"
	}
}

// TestIncrementalMatchesSchedule runs random sequences of small changes
// through one Incremental and checks every plan against the pure Schedule
// of the same snapshot, byte for byte.
func TestIncrementalMatchesSchedule(t *testing.T) {
	iterations := 300
	if testing.Short() {
		iterations = 40
	}
	for seed := range uint64(iterations) {
		r := rand.New(rand.NewPCG(seed, 11))
		h := randomWorld(r, true)
		var next int64
		randomJobs(r, h, &next, r.IntN(30))
		var inc scheduler.Incremental
		for step := range 30 {
			what := "none"
			for range r.IntN(3) {
				what = mutate(r, h, &next)
			}
			// Stores list jobs by id; sometimes they do not.
			if r.IntN(8) > 0 {
				h.Snap.Pending = slices.Clone(h.Snap.Pending)
				slices.SortFunc(h.Snap.Pending, func(a, b scheduler.Pending) int { return cmp.Compare(a.JobID, b.JobID) })
			}
			want := scheduler.Schedule(h.Snap, h.Config)
			got := inc.Schedule(h.Snap, h.Config)
			if planBytes(t, got) != planBytes(t, want) {
				t.Fatalf("seed %d step %d (after %s): incremental plan differs:\n--- want\n%s--- got\n%s", seed, step, what, Format(want), Format(got))
			}
			if r.IntN(2) == 0 {
				h.Apply(want)
			}
		}
	}
}
