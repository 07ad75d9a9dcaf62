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

// quotaBoundWorld is one or two busy pools where most projects run at
// their quota and queue far more than it: the settled benchmark world in
// small, where a finish or a submit changes one project's decisions and
// the others wait on their own quota (searching their own jobs for
// victims where preemption is on). Borrowing, preemption, fair share,
// gangs, priorities, job-count quotas, a running cap and timeouts (so
// that reservations have estimates) are drawn at random. It is settled:
// passes applied until one starts and preempts nothing.
func quotaBoundWorld(r *rand.Rand) (*Harness, []string) {
	h := New(nil)
	var projects []string
	for k := range 1 + r.IntN(2) {
		pw := Pool(fmt.Sprintf("pool%d", k))
		if r.IntN(4) > 0 {
			pw.Borrowing()
		}
		if r.IntN(4) > 0 {
			pw.Preemption()
		}
		if r.IntN(6) == 0 {
			pw.MaxRunning(20 + r.IntN(60))
		}
		for i := range 6 + r.IntN(20) {
			pw.Node(fmt.Sprintf("p%d-n%02d", k, i), float64(32+r.IntN(32)), domain.ByteSize(256+r.IntN(256))<<30, []int{4, 8, 8}[r.IntN(3)])
		}
		pool := pw.Obj()
		h.Snap.Pools = append(h.Snap.Pools, pool)
		np := 3 + r.IntN(8)
		for i := range np {
			name := fmt.Sprintf("p%d", i)
			if !slices.Contains(projects, name) {
				projects = append(projects, name)
				h.Snap.Projects = append(h.Snap.Projects, domain.Project{Name: name, Shares: float64(1 + r.IntN(3))})
			}
			if r.IntN(6) > 0 {
				q := Quota(name, pool.Name).GPUs(2 + r.IntN(10)).Borrow(r.IntN(8)).MaxPriority(domain.Priorities()[1+r.IntN(3)])
				if r.IntN(5) == 0 {
					q.Jobs(2 + r.IntN(6))
				}
				h.Snap.Quotas = append(h.Snap.Quotas, q.Obj())
			}
			if r.IntN(3) > 0 {
				h.Snap.Usage = append(h.Snap.Usage, scheduler.Usage{Project: name, Pool: pool.Name, Value: r.Float64() * 5})
			}
		}
		for range 100 + r.IntN(300) {
			h.Submit(quotaBoundJob(r, int64(len(h.Snap.Pending)+1+k*100_000), pool.Name, projects[r.IntN(np)], T0.Add(time.Duration(r.IntN(3600))*time.Second)))
		}
	}
	if r.IntN(4) == 0 {
		h.Config.MaxPreemptionsPerCycle = 1 + r.IntN(3)
	}
	h.Snap.Now = T0.Add(2 * time.Hour)
	for range 30 {
		p := scheduler.Schedule(h.Snap, h.Config)
		h.Apply(p)
		h.Advance(0)
		sortSnap(&h.Snap)
		if len(p.Start)+len(p.Preempt) == 0 {
			break
		}
	}
	return h, projects
}

func quotaBoundJob(r *rand.Rand, id int64, pool, project string, at time.Time) scheduler.Pending {
	gpus := []int{1, 1, 2, 4, 8}[r.IntN(5)]
	j := Job(id).Pool(pool).Project(project).GPUs(gpus).CPUs(float64(2 * gpus)).Memory(domain.ByteSize(16*gpus) << 30).
		Priority(domain.Priorities()[r.IntN(4)]).Submitted(at)
	if gpus == 8 && r.IntN(4) == 0 {
		j.Nodes(2)
	}
	if r.IntN(2) == 0 {
		j.Preemptible()
	}
	if r.IntN(2) == 0 {
		j.Timeout(time.Duration(1+r.IntN(12)) * time.Hour)
	}
	return j.Obj()
}

func sortSnap(s *scheduler.Snapshot) {
	slices.SortFunc(s.Pending, func(a, b scheduler.Pending) int { return cmp.Compare(a.JobID, b.JobID) })
	slices.SortFunc(s.Running, func(a, b scheduler.Allocation) int { return cmp.Compare(a.JobID, b.JobID) })
}

// TestPatchMatchesSchedule runs told passes over settled quota-bound
// worlds changed mostly by finishes and submits (and cancels, priority
// changes, plans taking effect, quota changes and the clock), handing
// plans back in each of the ways callers do, and checks every plan
// against the pure Schedule's byte for byte. It checks that pools are
// patched, and replayed after a patch, so that the test covers both.
func TestPatchMatchesSchedule(t *testing.T) {
	seeds := 30
	if testing.Short() || raceEnabled {
		seeds = 8
	}
	for _, mode := range []string{"last", "read-only", "read-only-lag"} {
		var patched, replayed, passes int64
		for seed := range uint64(seeds) {
			r := rand.New(rand.NewPCG(seed, 977))
			h, projects := quotaBoundWorld(r)
			next := int64(1_000_000)
			hint := hinted{readOnly: mode != "last", lag: mode == "read-only-lag"}
			var last scheduler.Plan
			for step := range 40 {
				what := patchMutation(r, h, &next, projects, last)
				sortSnap(&h.Snap)
				want := scheduler.Schedule(h.Snap, h.Config)
				if got, ok := hint.schedule(h.Snap, h.Config); !ok || planBytes(t, got) != planBytes(t, want) {
					t.Fatalf("%s seed %d step %d (after %s): told plan differs:\n--- want\n%s--- got\n%s", mode, seed, step, what, Format(h.Snap, want), Format(h.Snap, got))
				}
				last = want
				passes++
			}
			patched, replayed = patched+hint.inc.Patched(), replayed+hint.inc.Replayed()
		}
		t.Logf("%s: %d pools patched, %d passes replayed, in %d passes", mode, patched, replayed, passes)
		if patched < passes/4 {
			t.Errorf("%s: %d pools patched in %d passes; the test should exercise patches more", mode, patched, passes)
		}
		if mode != "read-only-lag" && replayed < passes/20 { // a replay edits the last plan, handed back
			t.Errorf("%s: %d passes replayed in %d; the test should exercise replays after patches more", mode, replayed, passes)
		}
	}
}

// patchMutation applies one change, weighted towards those a patch
// handles: finishes and submits.
func patchMutation(r *rand.Rand, h *Harness, next *int64, projects []string, last scheduler.Plan) string {
	s := &h.Snap
	switch r.IntN(12) {
	case 0, 1, 2, 3:
		if n := len(s.Running); n > 0 {
			h.Finish(s.Running[r.IntN(n)].JobID)
		}
		return "finish"
	case 4, 5, 6:
		for range 1 + r.IntN(2) {
			*next++
			at := s.Now
			if r.IntN(2) == 0 {
				at = T0.Add(time.Duration(r.IntN(3600)) * time.Second)
			}
			h.Submit(quotaBoundJob(r, *next, anyPool(r, s), projects[r.IntN(len(projects))], at))
		}
		return "submit"
	case 7:
		if n := len(s.Pending); n > 0 {
			i := r.IntN(n)
			s.Pending = slices.Delete(slices.Clone(s.Pending), i, i+1)
		}
		return "cancel"
	case 8:
		if n := len(s.Pending); n > 0 {
			s.Pending = slices.Clone(s.Pending)
			s.Pending[r.IntN(n)].Priority = domain.Priorities()[r.IntN(4)]
		}
		return "priority"
	case 9:
		h.Apply(last) // the last plan's starts and preemptions take effect
		if r.IntN(2) == 0 {
			h.Advance(0)
		}
		return "apply"
	case 10:
		s.Now = s.Now.Add(time.Duration(r.IntN(600)) * time.Second)
		return "tick"
	default:
		if len(s.Quotas) > 0 {
			s.Quotas = slices.Clone(s.Quotas)
			s.Quotas[r.IntN(len(s.Quotas))].Guaranteed.GPUs = 1 + r.IntN(12)
		}
		return "quota"
	}
}

// patchCase runs a told pass on h's snapshot, then one after change, and
// checks both against Schedule; it returns the second plan Schedule made
// and whether the second pass was patched.
func patchCase(t *testing.T, h *Harness, change func()) scheduler.Plan {
	t.Helper()
	hint := hinted{}
	for step := range 2 {
		if step == 1 {
			change()
		}
		sortSnap(&h.Snap)
		want := scheduler.Schedule(h.Snap, h.Config)
		if got, _ := hint.schedule(h.Snap, h.Config); planBytes(t, got) != planBytes(t, want) {
			t.Fatalf("pass %d: told plan differs:\n--- want\n%s--- got\n%s", step, Format(h.Snap, want), Format(h.Snap, got))
		}
		if step == 1 {
			return want
		}
	}
	return scheduler.Plan{}
}

// A finish frees room on a node where another project's search for its
// own victims failed: that project is decided again (and preempts).
func TestPatchSeesSearchesItFrees(t *testing.T) {
	h := New([]domain.Pool{Pool("p").Preemption().Node("n0", 64, 512<<30, 8).Obj()},
		Quota("a", "p").GPUs(8).MaxPriority(Urgent).Obj(), Quota("b", "p").GPUs(8).Obj())
	h.Snap.Now = T0.Add(time.Hour)
	h.Run(Job(1).Pool("p").Project("a").GPUs(4).Priority(Low).Preemptible().Running(T0, On("n0", Span(0, 4)...)),
		Job(2).Pool("p").Project("b").GPUs(4).Running(T0, On("n0", Span(4, 4)...)))
	h.Submit(Job(3).Pool("p").Project("a").GPUs(6).Priority(Urgent).Submitted(T0).Obj())
	want := patchCase(t, h, func() { h.Finish(2) })
	if len(want.Preempt) != 1 {
		t.Fatalf("job 3 should preempt job 1 once job 2 is gone: %s", Format(h.Snap, want))
	}
}

// A start makes another of its project's jobs borrowed, on a node where
// another project's search for its own victims failed: that project is
// decided again (and may now reclaim it).
func TestPatchSeesJobsChangingSides(t *testing.T) {
	h := New([]domain.Pool{Pool("p").Preemption().Borrowing().Node("n0", 64, 512<<30, 8).Node("n1", 64, 512<<30, 8).Obj()},
		Quota("b", "p").GPUs(4).Borrow(8).MaxPriority(Urgent).Obj(), Quota("c", "p").GPUs(8).MaxPriority(Urgent).Obj())
	h.Snap.Now = T0.Add(time.Hour)
	h.Run(Job(1).Pool("p").Project("b").GPUs(4).Preemptible().Running(T0, On("n0", Span(0, 4)...)),
		Job(2).Pool("p").Project("c").GPUs(4).Priority(Low).Preemptible().Running(T0, On("n0", Span(4, 4)...)))
	h.Submit(Job(3).Pool("p").Project("c").GPUs(8).Priority(Urgent).Submitted(T0).Obj())
	want := patchCase(t, h, func() {
		h.Run(Job(4).Pool("p").Project("b").GPUs(4).Priority(High).Running(h.Snap.Now, On("n1", Span(0, 4)...)))
	})
	if len(want.Preempt) != 2 {
		t.Fatalf("job 3 should preempt jobs 1 and 2 once job 1 is borrowed: %s", Format(h.Snap, want))
	}
}

// A start that reaches the pool's running cap changes the decisions of
// other projects' jobs after it: they are told of the cap.
func TestPatchSeesTheRunningCap(t *testing.T) {
	h := New([]domain.Pool{Pool("p").MaxRunning(2).Node("n0", 64, 512<<30, 8).Obj()},
		Quota("d", "p").GPUs(8).Obj(), Quota("e", "p").GPUs(8).MaxPriority(Urgent).Obj(), Quota("f", "p").GPUs(0).Obj())
	h.Snap.Now = T0.Add(time.Hour)
	h.Run(Job(1).Pool("p").Project("d").GPUs(1).Running(T0, On("n0", 0)))
	h.Submit(Job(3).Pool("p").Project("f").GPUs(1).Priority(Low).Submitted(T0).Obj())
	want := patchCase(t, h, func() {
		h.Submit(Job(4).Pool("p").Project("e").GPUs(1).Priority(Urgent).Submitted(T0).Obj())
	})
	w, _ := WaitingFor(want, 3)
	if len(want.Start) != 1 || w.Reason != domain.ReasonWaitingForCapacity {
		t.Fatalf("job 4 should start and job 3 wait for the cap: %s", Format(h.Snap, want))
	}
}
