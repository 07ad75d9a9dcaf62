package scheduler_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/scheduler"
	"trainyard/internal/scheduler/incremental"
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
// through one incremental.Scheduler and checks every plan against the pure Schedule
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
		var inc incremental.Scheduler
		var hint hinted
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
				t.Fatalf("seed %d step %d (after %s): incremental plan differs:\n--- want\n%s--- got\n%s", seed, step, what, Format(h.Snap, want), Format(h.Snap, got))
			}
			hint.drop = r.IntN(5) == 0
			if got, ok := hint.schedule(h.Snap, h.Config); ok && planBytes(t, got) != planBytes(t, want) {
				t.Fatalf("seed %d step %d (after %s): plan with changed ids differs:\n--- want\n%s--- got\n%s", seed, step, what, Format(h.Snap, want), Format(h.Snap, got))
			}
			if r.IntN(2) == 0 {
				h.Apply(want)
			}
		}
	}
}

// mutateMix applies one change drawn from a mix that stresses what
// incremental.Scheduler keeps between passes: many finishes, many submits, pool and
// quota edits, or time advancing across backoffs, timeouts and stops.
func mutateMix(r *rand.Rand, h *Harness, next *int64, mix string) string {
	s := &h.Snap
	switch mix {
	case "finish-heavy":
		if r.IntN(4) > 0 && len(s.Running) > 0 {
			for range 1 + r.IntN(3) {
				if len(s.Running) > 0 {
					h.Finish(s.Running[r.IntN(len(s.Running))].JobID)
				}
			}
			return "finish"
		}
	case "submit-heavy":
		if r.IntN(4) > 0 {
			randomJobs(r, h, next, 1+r.IntN(6))
			return "submit"
		}
	case "pool-edits":
		switch r.IntN(5) {
		case 0:
			s.Pools = slices.Clone(s.Pools)
			p := &s.Pools[r.IntN(len(s.Pools))]
			p.Nodes = slices.Clone(p.Nodes)
			if len(p.Nodes) > 1 && r.IntN(2) == 0 {
				i := r.IntN(len(p.Nodes))
				p.Nodes = slices.Delete(p.Nodes, i, i+1)
				return "node removed"
			}
			p.Nodes = append(p.Nodes, domain.Node{Name: fmt.Sprintf("x%d", *next), CPUs: float64(8 + r.IntN(56)),
				Memory: domain.ByteSize(16+r.IntN(100)) << 30, GPUs: []int{0, 1, 2, 3}[:r.IntN(5)]})
			*next++
			return "node added"
		case 1:
			s.Pools = slices.Clone(s.Pools)
			p := &s.Pools[r.IntN(len(s.Pools))]
			p.MaxRunning = r.IntN(6)
			p.Preemption = r.IntN(2) == 0
			p.Borrowing = r.IntN(2) == 0
			return "pool rules"
		case 2:
			s.Projects = slices.Clone(s.Projects)
			if len(s.Projects) > 0 {
				s.Projects[r.IntN(len(s.Projects))].Shares = float64(1 + r.IntN(4))
			}
			return "shares"
		case 3:
			if len(s.Quotas) > 0 {
				s.Quotas = slices.Clone(s.Quotas)
				q := &s.Quotas[r.IntN(len(s.Quotas))]
				q.Guaranteed.Jobs = r.IntN(4)
				q.MaxPriority = domain.Priorities()[r.IntN(4)]
			}
			return "quota rules"
		}
	case "time":
		switch r.IntN(3) {
		case 0:
			if len(s.Pending) > 0 {
				s.Pending = slices.Clone(s.Pending)
				s.Pending[r.IntN(len(s.Pending))].NotBefore = s.Now.Add(time.Duration(r.IntN(30)) * time.Minute)
			}
			return "backoff"
		case 1:
			h.Advance(time.Duration(1+r.IntN(90)) * time.Minute)
			return "advance"
		}
	}
	return mutate(r, h, next)
}

// TestIncrementalMatchesScheduleMixes is TestIncrementalMatchesSchedule
// with change mixes weighted towards one kind of change each, applying
// every plan (so stopping and preempted jobs accumulate).
func TestIncrementalMatchesScheduleMixes(t *testing.T) {
	seeds := 80
	if testing.Short() {
		seeds = 12
	}
	for _, mix := range []string{"finish-heavy", "submit-heavy", "pool-edits", "time"} {
		t.Run(mix, func(t *testing.T) {
			for seed := range uint64(seeds) {
				r := rand.New(rand.NewPCG(seed, 23))
				h := randomWorld(r, true)
				var next int64 = 1 << 20
				randomJobs(r, h, &next, 10+r.IntN(40))
				var inc incremental.Scheduler
				for step := range 40 {
					what := "none"
					for range r.IntN(3) {
						what = mutateMix(r, h, &next, mix)
					}
					h.Snap.Pending = slices.Clone(h.Snap.Pending)
					slices.SortFunc(h.Snap.Pending, func(a, b scheduler.Pending) int { return cmp.Compare(a.JobID, b.JobID) })
					want := scheduler.Schedule(h.Snap, h.Config)
					got := inc.Schedule(h.Snap, h.Config)
					if planBytes(t, got) != planBytes(t, want) {
						t.Fatalf("seed %d step %d (after %s): incremental plan differs:\n--- want\n%s--- got\n%s", seed, step, what, Format(h.Snap, want), Format(h.Snap, got))
					}
					if r.IntN(5) > 0 {
						h.Apply(want)
					}
				}
			}
		})
	}
}

// TestIncrementalMatchesScheduleLargeDeltas runs a few thousand pending
// jobs through one incremental.Scheduler with changes of every size: one job, a few
// (edited in place), more than 64 (merged in one sweep) and more than the
// rebuild threshold, plus passes whose pending list is out of id order.
// Each plan is compared with the pure Schedule's before the next call,
// since the next call reuses its storage.
func TestIncrementalMatchesScheduleLargeDeltas(t *testing.T) {
	seeds := 6
	if testing.Short() {
		seeds = 2
	}
	for seed := range uint64(seeds) {
		r := rand.New(rand.NewPCG(seed, 41))
		h := randomWorld(r, true)
		var next int64 = 1 << 24
		randomJobs(r, h, &next, 2000+r.IntN(3000))
		var inc incremental.Scheduler
		for step := range 24 {
			size := []int{1, 3, 40, 150, 700, 5000}[r.IntN(6)]
			s := &h.Snap
			var what string
			switch r.IntN(4) {
			case 0:
				randomJobs(r, h, &next, size)
				what = fmt.Sprintf("submit %d", size)
			case 1:
				s.Pending = slices.Clone(s.Pending)
				for range min(size, len(s.Pending)) {
					i := r.IntN(len(s.Pending))
					s.Pending = slices.Delete(s.Pending, i, i+1)
				}
				what = fmt.Sprintf("cancel %d", size)
			case 2:
				s.Pending = slices.Clone(s.Pending)
				for range min(size, len(s.Pending)) {
					pd := &s.Pending[r.IntN(len(s.Pending))]
					pd.Priority = domain.Priorities()[r.IntN(4)]
					pd.Resources.GPUs = r.IntN(5)
				}
				what = fmt.Sprintf("change %d", size)
			default:
				for range min(size, len(s.Running)) {
					h.Finish(s.Running[r.IntN(len(s.Running))].JobID)
				}
				what = fmt.Sprintf("finish %d", size)
			}
			s.Pending = slices.Clone(s.Pending)
			slices.SortFunc(s.Pending, func(a, b scheduler.Pending) int { return cmp.Compare(a.JobID, b.JobID) })
			if step%7 == 6 && len(s.Pending) > 1 {
				s.Pending[0], s.Pending[1] = s.Pending[1], s.Pending[0]
				what += ", out of order"
			}
			want := scheduler.Schedule(h.Snap, h.Config)
			got := inc.Schedule(h.Snap, h.Config)
			if planBytes(t, got) != planBytes(t, want) {
				t.Fatalf("seed %d step %d (after %s): incremental plan differs", seed, step, what)
			}
			if r.IntN(3) > 0 {
				h.Apply(want)
			}
		}
	}
}

// hinted runs its own incremental.Scheduler through ScheduleChanged with the exact
// ids of the pending jobs that changed since the last snapshot it saw, as
// a control loop that keeps its view of the queue would. Snapshots whose
// pending list is not in id order are skipped (the method requires it).
type hinted struct {
	inc     incremental.Scheduler
	prev    []scheduler.Pending
	prevRun []scheduler.Allocation
	seen    bool
	// drop, when set, leaves out one added or removed job from the hint,
	// which ScheduleChanged must notice (by count) and recover from.
	drop bool
	// last is the plan returned last, handed back (Recycle) at the next
	// pass: the caller must be done with it.
	last scheduler.Plan
	// readOnly sets ReadOnlyPlans. lag hands back, instead of the last
	// plan, the waiting list of the one before (older), as the control
	// loop does, whose queue view reads the last plan's until the next.
	readOnly, lag bool
	older         scheduler.Plan
}

func (h *hinted) schedule(s scheduler.Snapshot, cfg scheduler.Config) (scheduler.Plan, bool) {
	if !slices.IsSortedFunc(s.Pending, func(a, b scheduler.Pending) int { return cmp.Compare(a.JobID, b.JobID) }) {
		return scheduler.Plan{}, false
	}
	h.inc.ReadOnlyPlans = h.readOnly
	if h.lag {
		h.inc.Recycle(scheduler.Plan{Waiting: h.older.Waiting})
		h.older = h.last
	} else {
		h.inc.Recycle(h.last)
	}
	h.last = scheduler.Plan{}
	var p scheduler.Plan
	if !h.seen {
		p = h.inc.Schedule(s, cfg)
	} else {
		changed, addRemove := changedIDs(h.prev, s.Pending)
		if h.drop && len(addRemove) > 0 {
			changed = slices.DeleteFunc(changed, func(id int64) bool { return id == addRemove[0] })
		}
		changed = append(changed, changedRunning(h.prevRun, s.Running)...)
		p = h.inc.ScheduleChanged(s, cfg, changed)
	}
	h.prev, h.seen = slices.Clone(s.Pending), true
	h.prevRun = cloneRunning(s.Running)
	h.last = p
	return p, true
}

// changedRunning lists the ids of running jobs that appear, disappear or
// differ between two running lists (in any order).
func changedRunning(a, b []scheduler.Allocation) []int64 {
	byID := map[int64]scheduler.Allocation{}
	for _, x := range a {
		byID[x.JobID] = x
	}
	var out []int64
	for _, y := range b {
		x, ok := byID[y.JobID]
		if !ok || !reflect.DeepEqual(x, y) {
			out = append(out, y.JobID)
		}
		delete(byID, y.JobID)
	}
	for id := range byID {
		out = append(out, id)
	}
	return out
}

func cloneRunning(rs []scheduler.Allocation) []scheduler.Allocation {
	out := slices.Clone(rs)
	for i := range out {
		out[i].Nodes = slices.Clone(out[i].Nodes)
		for k := range out[i].Nodes {
			out[i].Nodes[k].GPUs = slices.Clone(out[i].Nodes[k].GPUs)
		}
	}
	return out
}

// changedIDs lists the ids that differ between two id-ordered pending
// lists, and separately those added or removed.
func changedIDs(a, b []scheduler.Pending) (changed, addRemove []int64) {
	i, k := 0, 0
	for i < len(a) || k < len(b) {
		switch {
		case k == len(b) || i < len(a) && a[i].JobID < b[k].JobID:
			changed, addRemove = append(changed, a[i].JobID), append(addRemove, a[i].JobID)
			i++
		case i == len(a) || b[k].JobID < a[i].JobID:
			changed, addRemove = append(changed, b[k].JobID), append(addRemove, b[k].JobID)
			k++
		default:
			if a[i] != b[k] {
				changed = append(changed, a[i].JobID)
			}
			i++
			k++
		}
	}
	return changed, addRemove
}
