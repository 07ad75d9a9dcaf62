package incremental_test

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/scheduler"
	"trainyard/internal/scheduler/incremental"
	. "trainyard/internal/scheduler/schedtest"
)

// ownedWorld is a pool whose plan starts jobs, preempts one and leaves
// most of the queue waiting, so that every part of a plan has entries.
func ownedWorld() scheduler.Snapshot {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	s := scheduler.Snapshot{Now: now,
		Pools:  []domain.Pool{Pool("gpu").Nodes(2, 8).Borrowing().Preemption().Obj()},
		Quotas: []domain.Quota{Quota("vision", "gpu").GPUs(8).Obj()},
		Running: []scheduler.Allocation{
			Job(1).Project("nlp").Pool("gpu").GPUs(8).Priority(domain.PriorityLow).Preemptible().Running(now.Add(-time.Hour), On("gpu-0", Span(0, 8)...)),
		},
	}
	for id := int64(10); id < 40; id++ {
		j := Job(id).Project("vision").Pool("gpu").GPUs(4).Submitted(now.Add(time.Duration(id) * time.Second))
		if id%3 == 0 {
			j = j.Project("nlp").Preemptible()
		}
		s.Pending = append(s.Pending, j.Obj())
	}
	return s
}

// clonePlan copies a plan down to its GPU lists.
func clonePlan(p scheduler.Plan) scheduler.Plan {
	c := scheduler.Plan{Start: slices.Clone(p.Start), Preempt: slices.Clone(p.Preempt), Waiting: slices.Clone(p.Waiting)}
	for i := range c.Start {
		c.Start[i].Nodes = slices.Clone(c.Start[i].Nodes)
		for k := range c.Start[i].Nodes {
			c.Start[i].Nodes[k].GPUs = slices.Clone(c.Start[i].Nodes[k].GPUs)
		}
	}
	return c
}

// scribble overwrites everything a plan holds, and appends to each of its
// lists within their capacity.
func scribble(p scheduler.Plan) {
	for i := range p.Start {
		for k := range p.Start[i].Nodes {
			p.Start[i].Nodes[k].Node = "scribbled"
			for g := range p.Start[i].Nodes[k].GPUs {
				p.Start[i].Nodes[k].GPUs[g] = -1
			}
			_ = append(p.Start[i].Nodes[k].GPUs, -1)
		}
		p.Start[i] = scheduler.Placement{JobID: -1, Nodes: p.Start[i].Nodes}
	}
	for i := range p.Preempt {
		p.Preempt[i] = scheduler.Preemption{JobID: -1, Message: "scribbled"}
	}
	for i := range p.Waiting {
		p.Waiting[i] = scheduler.Waiting{JobID: -1, Message: "scribbled"}
	}
	_ = append(p.Start, scheduler.Placement{JobID: -2})
	_ = append(p.Preempt, scheduler.Preemption{JobID: -2})
	_ = append(p.Waiting, scheduler.Waiting{JobID: -2})
}

// A plan is the caller's: changing it does not change the next pass, and
// the next pass does not change it — unless the caller hands it back with
// Recycle, after which only the next pass's plan counts.
func TestPlansAreTheCallers(t *testing.T) {
	s := ownedWorld()
	next := s
	next.Pending = append(slices.Clone(s.Pending), Job(100).Project("vision").Pool("gpu").GPUs(2).Submitted(s.Now).Obj())
	want, wantNext := scheduler.Schedule(s, scheduler.Config{}), scheduler.Schedule(next, scheduler.Config{})
	if len(want.Start) == 0 || len(want.Preempt) == 0 || len(want.Waiting) == 0 {
		t.Fatalf("the world should start, preempt and leave jobs waiting: %s", Format(s, want))
	}
	passes := map[string]func(in *incremental.Scheduler, s scheduler.Snapshot, changed []int64) scheduler.Plan{
		"compared": func(in *incremental.Scheduler, s scheduler.Snapshot, _ []int64) scheduler.Plan {
			return in.Schedule(s, scheduler.Config{})
		},
		"told": func(in *incremental.Scheduler, s scheduler.Snapshot, changed []int64) scheduler.Plan {
			return in.ScheduleChanged(s, scheduler.Config{}, changed)
		},
		// The caller promises not to change plans: the next pass reads
		// the last one, but still writes none.
		"read-only": func(in *incremental.Scheduler, s scheduler.Snapshot, changed []int64) scheduler.Plan {
			in.ReadOnlyPlans = true
			return in.ScheduleChanged(s, scheduler.Config{}, changed)
		},
	}
	for name, pass := range passes {
		t.Run(name+"/changing a plan does not change the next pass", func(t *testing.T) {
			if name == "read-only" {
				t.Skip("the caller promised not to")
			}
			var in incremental.Scheduler
			first := pass(&in, s, nil)
			scribble(first)
			if got := pass(&in, s, nil); !reflect.DeepEqual(got, want) {
				t.Errorf("after the last plan was changed, the same snapshot gives\n%s\nwant\n%s", Format(s, got), Format(s, want))
			}
			if got := pass(&in, next, []int64{100}); !reflect.DeepEqual(got, wantNext) {
				t.Errorf("after the last plan was changed, a submit gives\n%s\nwant\n%s", Format(next, got), Format(next, wantNext))
			}
		})
		t.Run(name+"/the next pass does not change a plan", func(t *testing.T) {
			var in incremental.Scheduler
			first := pass(&in, s, nil)
			kept := clonePlan(first)
			for _, later := range []scheduler.Snapshot{next, s, s} {
				pass(&in, later, []int64{100})
				if !reflect.DeepEqual(first, kept) {
					t.Fatalf("a later pass changed a returned plan:\n%s\nwas\n%s", Format(s, first), Format(s, kept))
				}
			}
		})
		t.Run(name+"/a recycled plan's storage serves the next pass", func(t *testing.T) {
			var in incremental.Scheduler
			first := pass(&in, s, nil)
			in.Recycle(first)
			if got := pass(&in, next, []int64{100}); !reflect.DeepEqual(got, wantNext) {
				t.Errorf("after Recycle, a submit gives\n%s\nwant\n%s", Format(next, got), Format(next, wantNext))
			}
		})
	}
}
