package scheduler_test

import (
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/scheduler"
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
