package scheduler_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/scheduler"
	. "trainyard/internal/scheduler/schedtest"
)

// crowdedWorld is a pool with many queued jobs of few classes, so that the
// decision memo serves most of them and pool state changes between them.
func crowdedWorld(r *rand.Rand) *Harness {
	pw := Pool("big")
	if r.IntN(3) > 0 {
		pw.Borrowing()
	}
	if r.IntN(3) > 0 {
		pw.Preemption()
	}
	if r.IntN(4) == 0 {
		pw.MaxRunning(4 + r.IntN(40))
	}
	for i := range 4 + r.IntN(24) {
		pw.Node(fmt.Sprintf("n%02d", i), float64(16+r.IntN(64)), domain.ByteSize(64+r.IntN(448))<<30, []int{0, 4, 8, 8}[r.IntN(4)])
	}
	pool := pw.Obj()
	var quotas []domain.Quota
	projects := make([]string, 2+r.IntN(8))
	for i := range projects {
		projects[i] = fmt.Sprintf("p%d", i)
		if r.IntN(5) == 0 {
			continue
		}
		q := Quota(projects[i], pool.Name).GPUs(r.IntN(24)).Borrow(r.IntN(16)).MaxPriority(domain.Priorities()[1+r.IntN(3)])
		if r.IntN(3) == 0 {
			q.Jobs(1 + r.IntN(8))
		}
		quotas = append(quotas, q.Obj())
	}
	h := New([]domain.Pool{pool}, quotas...)
	for _, p := range projects {
		h.Snap.Projects = append(h.Snap.Projects, domain.Project{Name: p, Shares: float64(1 + r.IntN(3))})
		if r.IntN(2) == 0 {
			h.Snap.Usage = append(h.Snap.Usage, scheduler.Usage{Project: p, Pool: pool.Name, Value: r.Float64() * 5})
		}
	}
	var next int64
	for range 50 + r.IntN(400) {
		next++
		gpus := []int{0, 1, 1, 2, 4, 8}[r.IntN(6)]
		j := Job(next).Pool(pool.Name).Project(projects[r.IntN(len(projects))]).GPUs(gpus).CPUs(float64(2 + 2*gpus)).
			Memory(domain.ByteSize(8+8*gpus) << 30).Priority(domain.Priorities()[r.IntN(4)]).
			Submitted(T0.Add(time.Duration(r.IntN(3600)) * time.Second))
		if gpus == 8 && r.IntN(3) == 0 {
			j.Nodes(2 + r.IntN(2))
		}
		if r.IntN(2) == 0 {
			j.Preemptible()
		}
		if r.IntN(3) > 0 {
			j.Timeout(time.Duration(1+r.IntN(24)) * time.Hour)
		}
		if r.IntN(20) == 0 {
			j.NotBefore(h.Snap.Now.Add(time.Duration(r.IntN(600)) * time.Second))
		}
		h.Submit(j.Obj())
	}
	return h
}

// TestMemoNeverChangesADecision schedules crowded worlds over several
// rounds (each plan applied, some jobs finished, time advanced) with the
// class memo on and off: the plans must be byte-identical.
func TestMemoNeverChangesADecision(t *testing.T) {
	iterations := 150
	if testing.Short() {
		iterations = 25
	}
	defer scheduler.SetMemo(true)
	for seed := range uint64(iterations) {
		r := rand.New(rand.NewPCG(seed, 99))
		h := crowdedWorld(r)
		for round := range 5 {
			scheduler.SetMemo(false)
			want := scheduler.Schedule(h.Snap, h.Config)
			scheduler.SetMemo(true)
			got := scheduler.Schedule(h.Snap, h.Config)
			if planBytes(t, got) != planBytes(t, want) {
				t.Fatalf("seed %d round %d: the memo changed the plan:\n--- without\n%s--- with\n%s", seed, round, Format(want), Format(got))
			}
			h.Apply(want)
			for _, a := range h.Snap.Running {
				if r.IntN(3) == 0 {
					h.Finish(a.JobID)
				}
			}
			h.Advance(time.Duration(r.IntN(120)) * time.Minute)
		}
	}
}
