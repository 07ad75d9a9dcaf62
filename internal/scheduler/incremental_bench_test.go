package scheduler_test

import (
	"fmt"
	"slices"
	"testing"

	"trainyard/internal/scheduler"
	. "trainyard/internal/scheduler/schedtest"
)

// BenchmarkIncremental is a pass through Incremental on a steady state
// after one submit or one finish: each iteration alternates between the
// steady snapshot and the changed one, so every pass sees one change.
func BenchmarkIncremental(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		h := &Harness{Snap: benchSnapshot(n)}
		h.Apply(scheduler.Schedule(h.Snap, scheduler.Config{}))
		h.Apply(scheduler.Schedule(h.Snap, scheduler.Config{}))
		steady := h.Snap
		submit := h.Snap
		submit.Pending = append(slices.Clone(submit.Pending), Job(1<<40).Pool("big").Project("proj-007").GPUs(2).Obj())
		finish := h.Snap
		finish.Running = finish.Running[1:]
		for _, c := range []struct {
			name string
			s    scheduler.Snapshot
		}{{"submit", submit}, {"finish", finish}} {
			b.Run(fmt.Sprintf("pending=%d/%s", n, c.name), func(b *testing.B) {
				var inc scheduler.Incremental
				inc.Schedule(steady, scheduler.Config{})
				i := 0
				for b.Loop() {
					if i%2 == 0 {
						inc.Schedule(c.s, scheduler.Config{})
					} else {
						inc.Schedule(steady, scheduler.Config{})
					}
					i++
				}
			})
		}
	}
}
