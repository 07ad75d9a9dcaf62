package scheduler_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/scheduler"
	. "trainyard/internal/scheduler/schedtest"
)

// randomWorld builds a random pool set, quotas and workload from a seed.
func randomWorld(r *rand.Rand, preemption bool) *Harness {
	var pools []domain.Pool
	var quotas []domain.Quota
	projects := []string{"a", "b", "c", "d"}
	for p := range 1 + r.IntN(2) {
		pw := Pool(fmt.Sprintf("p%d", p))
		for range 1 + r.IntN(6) {
			pw.Node(fmt.Sprintf("n%d", len(pw.Pool.Nodes)), float64(4+r.IntN(60)), domain.ByteSize(8+r.IntN(120))<<30, r.IntN(9))
		}
		if r.IntN(2) == 0 {
			pw.Borrowing()
		}
		if preemption && r.IntN(3) > 0 {
			pw.Preemption()
		}
		if r.IntN(4) == 0 {
			pw.MaxRunning(1 + r.IntN(6))
		}
		pool := pw.Obj()
		pools = append(pools, pool)
		for _, pr := range projects {
			if r.IntN(4) == 0 {
				continue // no quota here
			}
			q := Quota(pr, pool.Name).GPUs(r.IntN(12)).Borrow(r.IntN(8)).MaxPriority(domain.Priorities()[r.IntN(4)])
			if r.IntN(3) == 0 {
				q.Jobs(1 + r.IntN(4))
			}
			if r.IntN(3) == 0 {
				q.CPUs(float64(8 + r.IntN(64)))
			}
			quotas = append(quotas, q.Obj())
		}
	}
	h := New(pools, quotas...)
	for _, pr := range projects {
		if r.IntN(2) == 0 {
			h.Snap.Usage = append(h.Snap.Usage, scheduler.Usage{Project: pr, Pool: pools[r.IntN(len(pools))].Name, Value: r.Float64() * 3})
		}
		h.Snap.Projects = append(h.Snap.Projects, domain.Project{Name: pr, Shares: float64(1 + r.IntN(3))})
	}
	return h
}

func randomJobs(r *rand.Rand, h *Harness, next *int64, n int) {
	for range n {
		*next++
		pool := h.Snap.Pools[r.IntN(len(h.Snap.Pools))].Name
		j := Job(*next).Pool(pool).Project([]string{"a", "b", "c", "d"}[r.IntN(4)]).GPUs(r.IntN(5)).CPUs(float64(1 + r.IntN(16))).
			Memory(domain.ByteSize(1+r.IntN(32)) << 30).Priority(domain.Priorities()[r.IntN(4)]).
			Submitted(T0.Add(time.Duration(r.IntN(100)) * time.Second))
		if r.IntN(4) == 0 {
			j.Nodes(2 + r.IntN(2))
		}
		if r.IntN(2) == 0 {
			j.Preemptible()
		}
		if r.IntN(3) > 0 {
			j.Timeout(time.Duration(1+r.IntN(120)) * time.Minute)
		}
		if r.IntN(10) == 0 {
			j.NotBefore(h.Snap.Now.Add(time.Duration(r.IntN(60)) * time.Second))
		}
		h.Submit(j.Obj())
	}
}

func shuffled(r *rand.Rand, s scheduler.Snapshot) scheduler.Snapshot {
	c := s
	c.Pools = shuffle(r, s.Pools)
	for i := range c.Pools {
		c.Pools[i].Nodes = shuffle(r, c.Pools[i].Nodes)
	}
	c.Quotas = shuffle(r, s.Quotas)
	c.Projects = shuffle(r, s.Projects)
	c.Usage = shuffle(r, s.Usage)
	c.Pending = shuffle(r, s.Pending)
	c.Running = shuffle(r, s.Running)
	return c
}

func shuffle[T any](r *rand.Rand, s []T) []T {
	c := append([]T(nil), s...)
	r.Shuffle(len(c), func(i, j int) { c[i], c[j] = c[j], c[i] })
	return c
}

func planBytes(t *testing.T, p scheduler.Plan) string {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatalf("marshal plan: %v", err)
	}
	return string(b)
}

// TestProperties runs random multi-round worlds and checks, for every plan:
// the invariants of schedtest.Check (no node, GPU, quota or pool cap
// over-allocated, no partial gang, every job decided once, eligible
// victims); a byte-identical plan for shuffled input slices; and the same
// plan for the same snapshot, also from a pass whose working memory
// (scheduler.Scratch) served every earlier pass of the test.
func TestProperties(t *testing.T) {
	iterations := 400
	if testing.Short() {
		iterations = 50
	}
	var sc scheduler.Scratch
	for seed := range uint64(iterations) {
		r := rand.New(rand.NewPCG(seed, 42))
		h := randomWorld(r, true)
		var next int64
		for round := range 6 {
			randomJobs(r, h, &next, r.IntN(12))
			want := scheduler.Schedule(h.Snap, h.Config)
			for range 3 {
				got := scheduler.Schedule(shuffled(r, h.Snap), h.Config)
				if planBytes(t, got) != planBytes(t, want) {
					t.Fatalf("seed %d round %d: shuffled input gives another plan:\n--- want\n%s--- got\n%s", seed, round, Format(h.Snap, want), Format(h.Snap, got))
				}
			}
			if got := scheduler.ScheduleIn(shuffled(r, h.Snap), h.Config, &sc); planBytes(t, got) != planBytes(t, want) {
				t.Fatalf("seed %d round %d: a pass in kept memory gives another plan:\n--- want\n%s--- got\n%s", seed, round, Format(h.Snap, want), Format(h.Snap, got))
			}
			if what := scheduler.ScratchHolds(&sc); what != "" {
				t.Fatalf("seed %d round %d: after the pass its kept memory still holds %s", seed, round, what)
			}
			plan, err := h.Schedule()
			if err != nil {
				t.Fatalf("seed %d round %d: %v\n%s", seed, round, err, Format(h.Snap, plan))
			}
			if planBytes(t, plan) != planBytes(t, want) {
				t.Fatalf("seed %d round %d: same snapshot, different plan", seed, round)
			}
			// Finish a few jobs and let time pass.
			for _, a := range h.Snap.Running {
				if r.IntN(4) == 0 {
					h.Finish(a.JobID)
				}
			}
			h.Advance(time.Duration(r.IntN(90)) * time.Minute)
		}
	}
}

// TestEmptyPassChangesNothing: once a plan is applied, a pass with no other
// change starts nothing (pools without preemption: with it, a reclaimed or
// preempted job's beneficiaries legitimately change the next pass).
func TestEmptyPassChangesNothing(t *testing.T) {
	iterations := 400
	if testing.Short() {
		iterations = 50
	}
	for seed := range uint64(iterations) {
		r := rand.New(rand.NewPCG(seed, 7))
		h := randomWorld(r, false)
		var next int64
		for round := range 4 {
			randomJobs(r, h, &next, r.IntN(12))
			prev := h.Snap
			if _, err := h.Schedule(); err != nil {
				t.Fatalf("seed %d round %d: %v", seed, round, err)
			}
			snap := h.Snap
			again, err := h.Schedule()
			if err != nil {
				t.Fatalf("seed %d round %d: %v", seed, round, err)
			}
			if len(again.Start) > 0 || len(again.Preempt) > 0 {
				t.Fatalf("seed %d round %d: an extra pass changed something:\n%s\nprevious:\n%s", seed, round, Format(snap, again), Format(prev, h.Plans[len(h.Plans)-2]))
			}
			h.Advance(time.Duration(r.IntN(90)) * time.Minute)
		}
	}
}

// TestPlansAreFixedPoints: stability as a property. Across a run no job is
// ever preempted twice for the same beneficiary (the livelock a borrowing
// job once caused). And after a plan is applied, a second pass over the
// resulting state with nothing new preempts nothing (with a budget that
// never runs out) — in all but a rare world: one found is a lower-priority
// job placed in a pass that makes an older job of its project borrowed,
// which a higher-priority job of another project, decided earlier in that
// pass, then preempts in the next. Such worlds are logged; more than 1 in
// 100 fails the test (the rate before this property was kept was far
// higher).
func TestPlansAreFixedPoints(t *testing.T) {
	iterations := 400
	if testing.Short() {
		iterations = 100
	}
	var unstable []uint64
	for seed := range uint64(iterations) {
		r := rand.New(rand.NewPCG(seed, 13))
		h := randomWorld(r, true)
		h.Config.MaxPreemptionsPerCycle = 1 << 20
		var next int64
		pairs := map[[2]int64]int{}
		noted := false
		for round := range 8 {
			randomJobs(r, h, &next, r.IntN(12))
			snap := h.Snap
			plan, err := h.Schedule()
			if err != nil {
				t.Fatalf("seed %d round %d: %v", seed, round, err)
			}
			for _, p := range plan.Preempt {
				k := [2]int64{p.JobID, p.For}
				if pairs[k]++; pairs[k] > 1 {
					t.Fatalf("seed %d round %d: job %d preempted again for job %d\n%s", seed, round, p.JobID, p.For, Format(snap, plan))
				}
			}
			snap = h.Snap
			again, err := h.Schedule()
			if err != nil {
				t.Fatalf("seed %d round %d: %v", seed, round, err)
			}
			if len(again.Preempt) > 0 && !noted {
				noted = true
				unstable = append(unstable, seed)
				t.Logf("seed %d round %d: a pass with nothing new preempted:\n%s", seed, round, Format(snap, again))
			}
			for _, p := range again.Preempt {
				pairs[[2]int64{p.JobID, p.For}]++
			}
			for _, a := range h.Snap.Running {
				if r.IntN(5) == 0 && !a.Stopping {
					h.Finish(a.JobID)
				}
			}
			h.Advance(time.Duration(r.IntN(30)) * time.Minute)
		}
	}
	if len(unstable)*100 > iterations {
		t.Errorf("%d of %d worlds had a plan that was not a fixed point (seeds %v); at most 1 in 100 may", len(unstable), iterations, unstable)
	}
}
