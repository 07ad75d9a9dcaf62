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
	"trainyard/internal/scheduler/incremental"
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
	if r.IntN(3) == 0 {
		h.Config.MaxPreemptionsPerCycle = 1 + r.IntN(3) // budgets run out mid-pass
	}
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
				t.Fatalf("seed %d round %d: the memo changed the plan:\n--- without\n%s--- with\n%s", seed, round, Format(h.Snap, want), Format(h.Snap, got))
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

// TestIncrementalMatchesScheduleCrowded runs crowded worlds through one
// Incremental over many small changes — finishes, submits, cancels, stops
// completing, quota and time changes, plans applied or not — and checks
// every plan against Schedule's, byte for byte. Decisions kept between
// passes must never outlive what they were decided on.
func TestIncrementalMatchesScheduleCrowded(t *testing.T) {
	iterations := 60
	if testing.Short() {
		iterations = 12
	}
	for seed := range uint64(iterations) {
		r := rand.New(rand.NewPCG(seed, 5))
		h := crowdedWorld(r)
		projects := make([]string, 0, len(h.Snap.Projects))
		for _, p := range h.Snap.Projects {
			projects = append(projects, p.Name)
		}
		next := int64(1_000_000)
		var inc incremental.Scheduler
		var hint hinted
		for step := range 40 {
			what := "none"
			switch r.IntN(8) {
			case 0, 1:
				if n := len(h.Snap.Running); n > 0 {
					h.Finish(h.Snap.Running[r.IntN(n)].JobID)
					what = "finish"
				}
			case 2:
				next++
				j := Job(next).Pool("big").Project(projects[r.IntN(len(projects))]).GPUs([]int{0, 1, 2, 4, 8}[r.IntN(5)]).
					CPUs(4).Memory(16 << 30).Priority(domain.Priorities()[r.IntN(4)]).Submitted(h.Snap.Now)
				if r.IntN(2) == 0 {
					j.Preemptible()
				}
				h.Submit(j.Obj())
				what = "submit"
			case 3:
				if n := len(h.Snap.Pending); n > 0 {
					i := r.IntN(n)
					h.Snap.Pending = slices.Delete(slices.Clone(h.Snap.Pending), i, i+1)
					what = "cancel"
				}
			case 4:
				if n := len(h.Snap.Running); n > 0 && r.IntN(2) == 0 {
					// A running job's priority changes (an admin raised it).
					h.Snap.Running = slices.Clone(h.Snap.Running)
					h.Snap.Running[r.IntN(n)].Priority = domain.Priorities()[r.IntN(4)]
					what = "reprioritize"
					break
				}
				h.Advance(0) // stopping jobs stop and are requeued
				what = "stops"
			case 5:
				if len(h.Snap.Quotas) > 0 && r.IntN(3) == 0 {
					h.Snap.Quotas = slices.Clone(h.Snap.Quotas)
					q := &h.Snap.Quotas[r.IntN(len(h.Snap.Quotas))]
					q.Guaranteed.GPUs = r.IntN(24)
					what = "quota"
				} else {
					h.Advance(time.Duration(r.IntN(30)) * time.Minute)
					what = "advance"
				}
			}
			slices.SortFunc(h.Snap.Pending, func(a, b scheduler.Pending) int { return cmp.Compare(a.JobID, b.JobID) })
			want := scheduler.Schedule(h.Snap, h.Config)
			got := inc.Schedule(h.Snap, h.Config)
			if planBytes(t, got) != planBytes(t, want) {
				t.Fatalf("seed %d step %d (after %s): incremental plan differs:\n--- want\n%s--- got\n%s", seed, step, what, Format(h.Snap, want), Format(h.Snap, got))
			}
			if got, ok := hint.schedule(h.Snap, h.Config); !ok || planBytes(t, got) != planBytes(t, want) {
				t.Fatalf("seed %d step %d (after %s): plan with changed ids differs:\n--- want\n%s--- got\n%s", seed, step, what, Format(h.Snap, want), Format(h.Snap, got))
			}
			if r.IntN(4) > 0 {
				h.Apply(want)
			}
		}
	}
}

// TestKeptDecisionNeedsTheSameBudget: a quota decision made after the
// preemption budget ran out must not be reused by a pass that has budget
// left, where the project may preempt its own lower-priority work.
func TestKeptDecisionNeedsTheSameBudget(t *testing.T) {
	pool := Pool("p").Preemption().Node("n0", 32, 256<<30, 4).Node("n1", 32, 256<<30, 4).Obj()
	h := New([]domain.Pool{pool},
		Quota("vision", "p").GPUs(4).MaxPriority(High).Obj(),
		Quota("speech", "p").GPUs(4).MaxPriority(Urgent).Obj())
	h.Config.MaxPreemptionsPerCycle = 1
	h.Run(Job(1).Pool("p").Project("vision").GPUs(4).Priority(Normal).Preemptible().Running(T0, On("n0", Span(0, 4)...)),
		Job(2).Pool("p").Project("other").GPUs(4).Priority(Low).Preemptible().Running(T0, On("n1", Span(0, 4)...)))
	h.Submit(Job(3).Pool("p").Project("speech").GPUs(4).Priority(Urgent).Obj(),
		Job(4).Pool("p").Project("vision").GPUs(4).Priority(High).Obj())
	var inc incremental.Scheduler
	for pass := range 2 {
		want := scheduler.Schedule(h.Snap, h.Config)
		got := inc.Schedule(h.Snap, h.Config)
		if planBytes(t, got) != planBytes(t, want) {
			t.Fatalf("pass %d: incremental plan differs:\n--- want\n%s--- got\n%s", pass, Format(h.Snap, want), Format(h.Snap, got))
		}
		if pass == 1 && !slices.Equal(Victims(want), []int64{1}) {
			t.Fatalf("pass %d: want job 4 to preempt its project's job 1 once budget is left:\n%s", pass, Format(h.Snap, want))
		}
		h.Apply(want)
	}
}

// TestOwnVictimSearchSeesOthersStopping: a project's failed search for its
// own victims is not reused after another project's victim starts stopping
// on the same node, since the stopping capacity the beneficiary does not
// reserve counts as room.
func TestOwnVictimSearchSeesOthersStopping(t *testing.T) {
	pool := Pool("p").Borrowing().Preemption().Node("n0", 64, 512<<30, 8).Node("n1", 64, 512<<30, 8).Obj()
	h := New([]domain.Pool{pool},
		Quota("vision", "p").GPUs(4).MaxPriority(High).Obj(),
		Quota("speech", "p").GPUs(8).MaxPriority(High).Obj(),
		Quota("other", "p").GPUs(6).Borrow(10).MaxPriority(High).Obj()) // job 2 is borrowed
	job := func(id int64, project string, gpus int, prio domain.Priority) *JobWrapper {
		return Job(id).Pool("p").Project(project).GPUs(gpus).CPUs(float64(4 * gpus)).Memory(domain.ByteSize(32*gpus) << 30).Priority(prio)
	}
	h.Run(job(1, "vision", 2, Low).Preemptible().Running(T0, On("n0", Span(0, 2)...)),
		job(2, "other", 6, Low).Preemptible().Running(T0, On("n0", Span(2, 6)...)),
		job(3, "speech", 2, Normal).Running(T0, On("n1", Span(0, 2)...)),
		job(4, "other", 6, Normal).Running(T0, On("n1", Span(2, 6)...)))
	// Equal shares: vision's and speech's jobs are visited by submit time.
	h.Submit(job(10, "vision", 4, High).Submitted(T0.Add(time.Second)).Obj(),
		job(11, "speech", 4, High).Submitted(T0.Add(2*time.Second)).Obj(),
		job(12, "vision", 4, High).Submitted(T0.Add(3*time.Second)).Obj())
	defer scheduler.SetMemo(true)
	scheduler.SetMemo(false)
	want := scheduler.Schedule(h.Snap, h.Config)
	scheduler.SetMemo(true)
	got := scheduler.Schedule(h.Snap, h.Config)
	if planBytes(t, got) != planBytes(t, want) {
		t.Fatalf("the memo changed the plan:\n--- without\n%s--- with\n%s", Format(h.Snap, want), Format(h.Snap, got))
	}
	if v := SortedIDs(Victims(want)); !slices.Equal(v, []int64{1, 2}) {
		t.Fatalf("victims %v, want 2 (for job 11) and then 1 (for job 12, once job 2's stop leaves room):\n%s", v, Format(h.Snap, want))
	}
}
