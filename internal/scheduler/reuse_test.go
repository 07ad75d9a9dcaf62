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

// crowdedPools is several crowded worlds (crowdedWorld) side by side,
// each in its own pool, sharing projects and the preemption budget.
func crowdedPools(r *rand.Rand, n int) (*Harness, []string) {
	h := New(nil)
	var projects []string
	for k := range n {
		w := crowdedWorld(r)
		name := fmt.Sprintf("pool%d", k)
		pool := w.Snap.Pools[0]
		pool.Name = name
		h.Snap.Pools = append(h.Snap.Pools, pool)
		for _, q := range w.Snap.Quotas {
			q.Pool = name
			h.Snap.Quotas = append(h.Snap.Quotas, q)
		}
		for _, u := range w.Snap.Usage {
			u.Pool = name
			h.Snap.Usage = append(h.Snap.Usage, u)
		}
		for _, p := range w.Snap.Projects {
			if !slices.Contains(projects, p.Name) {
				projects = append(projects, p.Name)
				h.Snap.Projects = append(h.Snap.Projects, p)
			}
		}
		for _, j := range w.Snap.Pending {
			j.Pool = name
			j.JobID += int64(k) * 100_000
			h.Submit(j)
		}
		if k == 0 {
			h.Config = w.Config
		}
	}
	slices.SortFunc(h.Snap.Pending, func(a, b scheduler.Pending) int { return cmp.Compare(a.JobID, b.JobID) })
	return h, projects
}

// TestReuseMatchesSchedule runs told passes with ReadOnlyPlans over
// several crowded pools, each change touching one pool or all (finishes,
// quotas, shares, usage, the clock), handing plans back as the control
// loop does (the waiting list of the plan before the last) or the last
// plan itself (whose storage the next plan is written over while pools'
// entries are taken from it), and checks every plan against the pure
// Schedule's byte for byte. It checks that pools are reused, so that the
// test covers it.
func TestReuseMatchesSchedule(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 10
	}
	for _, lag := range []bool{true, false} {
		var reused, replayed, passes int64
		for seed := range uint64(seeds) {
			r := rand.New(rand.NewPCG(seed, 131))
			h, projects := crowdedPools(r, 2+r.IntN(3))
			next := int64(1_000_000)
			hint := hinted{readOnly: true, lag: lag}
			for step := range 40 {
				what := "none"
				for range r.IntN(3) {
					what = mutateQueue(r, h, &next, projects)
				}
				if r.IntN(3) == 0 {
					h.Snap.Now = h.Snap.Now.Add(time.Duration(r.IntN(90)) * time.Second)
					what += ", tick"
				}
				slices.SortFunc(h.Snap.Pending, func(a, b scheduler.Pending) int { return cmp.Compare(a.JobID, b.JobID) })
				want := scheduler.Schedule(h.Snap, h.Config)
				if got, ok := hint.schedule(h.Snap, h.Config); !ok || planBytes(t, got) != planBytes(t, want) {
					t.Fatalf("lag %v seed %d step %d (after %s): told plan differs:\n--- want\n%s--- got\n%s", lag, seed, step, what, Format(h.Snap, want), Format(h.Snap, got))
				}
				if r.IntN(4) == 0 {
					h.Apply(want)
				}
				passes++
			}
			reused, replayed = reused+hint.inc.Reused(), replayed+hint.inc.Replayed()
		}
		// Handed the last plan back, a pass replays when it can.
		t.Logf("lag %v: %d pools reused in %d passes (%d replayed)", lag, reused, passes, replayed)
		if reused < passes/4 {
			t.Errorf("lag %v: %d pools reused in %d passes; the test should exercise reuse more", lag, reused, passes)
		}
	}
}

// A submit to one pool walks that pool only: the others' entries come
// from the last plan.
func TestSubmitWalksItsPoolOnly(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	h, _ := crowdedPools(r, 3)
	hint := hinted{readOnly: true, lag: true}
	check := func(what string) {
		t.Helper()
		want := scheduler.Schedule(h.Snap, h.Config)
		if got, _ := hint.schedule(h.Snap, h.Config); planBytes(t, got) != planBytes(t, want) {
			t.Fatalf("after %s: told plan differs:\n--- want\n%s--- got\n%s", what, Format(h.Snap, want), Format(h.Snap, got))
		}
	}
	check("the first pass")
	for i := range 4 {
		before := hint.inc.Reused()
		h.Submit(Job(int64(2_000_000 + i)).Pool("pool1").Project("p0").GPUs(1).CPUs(1).Memory(1 << 30).
			Priority(domain.PriorityUrgent).Submitted(h.Snap.Now).Obj())
		check("a submit to pool1")
		if got := hint.inc.Reused() - before; got != 2 {
			t.Errorf("submit %d: %d pools reused, want the 2 others", i, got)
		}
	}
}

// Pools share the pass's preemption budget: a pool whose inputs did not
// change decides again when the pools before it leave it a different
// budget.
func TestReuseFollowsTheBudget(t *testing.T) {
	var pools []domain.Pool
	h := New(nil)
	for _, name := range []string{"a", "b"} {
		pools = append(pools, Pool(name).Preemption().Node(name+"0", 64, 256<<30, 8).Obj())
		h.Run(Job(int64(name[0])).Pool(name).Project("x").GPUs(8).Priority(domain.PriorityLow).Preemptible().
			Running(T0, On(name+"0", Span(0, 8)...)))
		h.Submit(Job(int64(name[0]) + 100).Pool(name).Project("y").GPUs(8).Priority(domain.PriorityUrgent).Submitted(T0).Obj())
	}
	h.Snap.Pools = pools
	h.Snap.Now = T0.Add(time.Hour)
	h.Config.MaxPreemptionsPerCycle = 1
	hint := hinted{readOnly: true, lag: true}
	for step, what := range []string{"the first pass", "pool a's job cancelled"} {
		if step == 1 {
			h.Snap.Pending = slices.DeleteFunc(slices.Clone(h.Snap.Pending), func(p scheduler.Pending) bool { return p.Pool == "a" })
		}
		want := scheduler.Schedule(h.Snap, h.Config)
		if len(want.Preempt) != 1 || want.Preempt[0].JobID != int64('a'+step) {
			t.Fatalf("after %s: the budget should go to pool %c's job: %s", what, 'a'+step, Format(h.Snap, want))
		}
		if got, _ := hint.schedule(h.Snap, h.Config); planBytes(t, got) != planBytes(t, want) {
			t.Fatalf("after %s: told plan differs:\n--- want\n%s--- got\n%s", what, Format(h.Snap, want), Format(h.Snap, got))
		}
	}
}
