package scheduler_test

import (
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/scheduler"
	"trainyard/internal/scheduler/incremental"
	"trainyard/internal/scheduler/schedtest"
)

// A higher-priority job whose project's quota is full preempts the project's
// own preemptible lower-priority job (the only victim that frees the quota);
// then, while the victim stops, it waits for it instead of preempting again.
func TestPreemptOwnLowerPriorityWhenQuotaIsFull(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pool := domain.Pool{Name: "gpu", Executor: "local", Preemption: true,
		Nodes: []domain.Node{{Name: "n1", CPUs: 4, Memory: 16 << 30, GPUs: []int{0, 1}}}}
	quota := domain.Quota{Project: "vision", Pool: "gpu", Guaranteed: domain.Limits{GPUs: 1}, MaxPriority: domain.PriorityUrgent}
	r := domain.Resources{GPUs: 1, CPUs: 1, Memory: 1 << 30, Nodes: 1}
	running := func(id int64, prio domain.Priority, preemptible, stopping bool) scheduler.Allocation {
		return scheduler.Allocation{JobID: id, Project: "vision", Pool: "gpu", Priority: prio, Resources: r,
			Nodes: []scheduler.NodeAlloc{{Node: "n1", GPUs: []int{0}}}, StartedAt: now.Add(-time.Hour),
			Timeout: 72 * time.Hour, Preemptible: preemptible, Stopping: stopping}
	}
	snap := func(a scheduler.Allocation, prio domain.Priority) scheduler.Snapshot {
		return scheduler.Snapshot{Now: now, Pools: []domain.Pool{pool}, Quotas: []domain.Quota{quota},
			Running: []scheduler.Allocation{a},
			Pending: []scheduler.Pending{{JobID: 2, Project: "vision", Pool: "gpu", Priority: prio, SubmittedAt: now, Resources: r, Timeout: time.Hour}}}
	}
	cases := map[string]struct {
		snap        scheduler.Snapshot
		wantVictims int
		wantReason  domain.Reason
	}{
		"preempts own lower-priority work": {snap(running(1, domain.PriorityLow, true, false), domain.PriorityHigh), 1, domain.ReasonWaitingForCapacity},
		"not a non-preemptible job":        {snap(running(1, domain.PriorityLow, false, false), domain.PriorityHigh), 0, domain.ReasonQuotaExceeded},
		"not equal priority":               {snap(running(1, domain.PriorityHigh, true, false), domain.PriorityHigh), 0, domain.ReasonQuotaExceeded},
		"waits while the victim stops":     {snap(running(1, domain.PriorityLow, true, true), domain.PriorityHigh), 0, domain.ReasonWaitingForCapacity},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := scheduler.Schedule(tc.snap, scheduler.Config{})
			if len(p.Preempt) != tc.wantVictims || len(p.Start) != 0 {
				t.Fatalf("plan %+v: want %d victim(s) and no start", p, tc.wantVictims)
			}
			if len(p.Waiting) != 1 || p.Waiting[0].Reason != tc.wantReason {
				t.Fatalf("waiting %+v, want reason %s", p.Waiting, tc.wantReason)
			}
		})
	}
}

// A told pass carries a quota decision that rests on the project's own
// stoppable jobs being too few to free its quota only while they are the
// same: when a running job becomes preemptible, its use unchanged, the
// search runs again and finds victims, as Schedule does.
func TestOwnVictimBoundIsCheckedAgain(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	gpus := make([]int, 16)
	for i := range gpus {
		gpus[i] = i
	}
	pool := domain.Pool{Name: "gpu", Executor: "local", Preemption: true,
		Nodes: []domain.Node{{Name: "n1", CPUs: 64, Memory: 256 << 30, GPUs: gpus}}}
	quota := domain.Quota{Project: "vision", Pool: "gpu", Guaranteed: domain.Limits{GPUs: 8}, MaxPriority: domain.PriorityUrgent}
	running := func(id int64, prio domain.Priority, gpus []int, preemptible bool) scheduler.Allocation {
		return scheduler.Allocation{JobID: id, Project: "vision", Pool: "gpu", Priority: prio,
			Resources: domain.Resources{GPUs: len(gpus), CPUs: 1, Memory: 1 << 30, Nodes: 1},
			Nodes:     []scheduler.NodeAlloc{{Node: "n1", GPUs: gpus}}, StartedAt: now.Add(-time.Hour),
			Timeout: 72 * time.Hour, Preemptible: preemptible}
	}
	pending := func(id int64, gpus int, at time.Time) scheduler.Pending {
		return scheduler.Pending{JobID: id, Project: "vision", Pool: "gpu", Priority: domain.PriorityHigh, SubmittedAt: at,
			Resources: domain.Resources{GPUs: gpus, CPUs: 1, Memory: 1 << 30, Nodes: 1}, Timeout: time.Hour}
	}
	// The quota is full. Job 4 is too large for the project's
	// low-priority jobs to make room for and holds the quota; job 5 needs
	// jobs 2 and 3 both stopped.
	snap := func(preemptible bool) scheduler.Snapshot {
		return scheduler.Snapshot{Now: now, Pools: []domain.Pool{pool}, Quotas: []domain.Quota{quota},
			Running: []scheduler.Allocation{running(1, domain.PriorityHigh, []int{0, 1, 2, 3, 4, 5}, false),
				running(2, domain.PriorityLow, []int{6}, true), running(3, domain.PriorityLow, []int{7}, preemptible)},
			Pending: []scheduler.Pending{pending(4, 4, now.Add(-time.Minute)), pending(5, 2, now)}}
	}
	var inc incremental.Scheduler
	for i, preemptible := range []bool{false, false, true, false, true} {
		s := snap(preemptible)
		var p scheduler.Plan
		if i == 0 {
			p = inc.Schedule(s, scheduler.Config{})
		} else {
			p = inc.ScheduleChanged(s, scheduler.Config{}, []int64{3})
		}
		want := scheduler.Schedule(s, scheduler.Config{})
		if got, w := schedtest.Format(s, p), schedtest.Format(s, want); got != w {
			t.Fatalf("pass %d: incremental plan\n%s\nwant\n%s", i, got, w)
		}
		if victims := len(want.Preempt); (victims > 0) != preemptible {
			t.Fatalf("pass %d: %d victim(s) with job 3 preemptible=%v:\n%s", i, victims, preemptible, schedtest.Format(s, want))
		}
		inc.Recycle(p)
	}
}
