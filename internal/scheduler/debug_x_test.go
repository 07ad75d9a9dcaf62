package scheduler_test

import (
	"fmt"
	"slices"
	"testing"

	"trainyard/internal/scheduler"
	. "trainyard/internal/scheduler/schedtest"
)

func TestDebugSteady(t *testing.T) {
	n := 100000
	h := &Harness{Snap: benchSnapshot(n)}
	h.Apply(scheduler.Schedule(h.Snap, scheduler.Config{}))
	h.Apply(scheduler.Schedule(h.Snap, scheduler.Config{}))
	steady := h.Snap
	submit := h.Snap
	submit.Pending = append(slices.Clone(submit.Pending), Job(1<<40).Pool("big").Project("proj-007").GPUs(2).Obj())
	finish := h.Snap
	finish.Running = finish.Running[1:]
	for _, s := range []scheduler.Snapshot{steady, submit, finish} {
		p := scheduler.Schedule(s, scheduler.Config{})
		reasons := map[string]int{}
		for _, w := range p.Waiting {
			reasons[string(w.Reason)]++
		}
		stop := 0
		for _, r := range s.Running { if r.Stopping { stop++ } }
		fmt.Println("starts", len(p.Start), "preempt", len(p.Preempt), "waiting", len(p.Waiting), reasons, "running", len(s.Running), "stopping", stop)
		for _, st := range p.Start { fmt.Println("  start", st.JobID, st.Nodes) }
		msgs := map[string]int{}
		for _, w := range p.Waiting { msgs[w.Message]++ }
		fmt.Println("  distinct msgs", len(msgs))
	}
}
