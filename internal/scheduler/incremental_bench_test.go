package scheduler_test

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/scheduler"
	"trainyard/internal/scheduler/incremental"
	. "trainyard/internal/scheduler/schedtest"
)

// settled runs the benchmark world until a pass changes nothing: every
// plan applied, every preempted job stopped and requeued, the pending list
// in id order as a store lists it. It returns the settled snapshot and how
// many passes that took. Running jobs are in id order too.
func settled(n int) (scheduler.Snapshot, int) {
	h := New(nil)
	h.Snap = benchSnapshot(n)
	for round := 1; ; round++ {
		p := scheduler.Schedule(h.Snap, scheduler.Config{})
		h.Apply(p)
		h.Advance(0) // preempted jobs stop and return to the queue
		slices.SortFunc(h.Snap.Pending, func(a, b scheduler.Pending) int { return cmp.Compare(a.JobID, b.JobID) })
		slices.SortFunc(h.Snap.Running, func(a, b scheduler.Allocation) int { return cmp.Compare(a.JobID, b.JobID) })
		if len(p.Start)+len(p.Preempt) == 0 || round == 100 {
			return h.Snap, round
		}
	}
}

// BenchmarkIncremental is a pass through incremental.Scheduler after one submit or
// one finish. Each iteration alternates between a base snapshot and the
// changed one, so every pass sees one change.
//
// "settled" is the benchmark world after its queue settled: passes have
// been applied until one starts and preempts nothing, which is what a
// cluster looks like between events. "storm" is the world two passes
// after a cold start, where every pass still chooses a full budget of 64
// victims (a preemption storm), so each pass changes state 60-odd times.
func BenchmarkIncremental(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		h := New(nil)
		h.Snap = benchSnapshot(n)
		h.Apply(scheduler.Schedule(h.Snap, scheduler.Config{}))
		h.Apply(scheduler.Schedule(h.Snap, scheduler.Config{}))
		storm := h.Snap
		calm, _ := settled(n)
		for _, w := range []struct {
			name string
			s    scheduler.Snapshot
		}{{"settled", calm}, {"storm", storm}} {
			base := w.s
			submit := base
			// One more job of an existing project, submitted now.
			submit.Pending = append(slices.Clone(submit.Pending), Job(1<<40).Pool("big").Project("proj-007").GPUs(2).Submitted(base.Now).Obj())
			finish := base
			finish.Running = finish.Running[1:]
			for _, c := range []struct {
				name    string
				s       scheduler.Snapshot
				changed []int64 // the pending jobs the change touches
			}{{"submit", submit, []int64{1 << 40}}, {"finish", finish, []int64{base.Running[0].JobID}}} {
				// "-told" calls it as the control loop does: told which jobs
				// changed, the pass does not compare the others. "-clock"
				// also moves the clock 10 ms a pass, as a control loop's
				// passes each run at their own time.
				for _, mode := range []string{"", "-told", "-told-clock"} {
					told, clock := mode != "", mode == "-told-clock"
					name := fmt.Sprintf("%s/pending=%d/%s%s", w.name, n, c.name, mode)
					b.Run(name, func(b *testing.B) {
						var inc incremental.Scheduler
						inc.Recycle(inc.Schedule(base, scheduler.Config{}))
						runtime.GC() // the setup's garbage is not the passes' to collect
						done := cpuPerOp(b)
						for i := 0; b.Loop(); i++ {
							s := base
							if i%2 == 0 {
								s = c.s
							}
							if clock {
								s.Now = s.Now.Add(time.Duration(i+1) * 10 * time.Millisecond)
							}
							var p scheduler.Plan
							if told {
								p = inc.ScheduleChanged(s, scheduler.Config{}, c.changed)
							} else {
								p = inc.Schedule(s, scheduler.Config{})
							}
							inc.Recycle(p) // as the control loop does once a pass is applied
						}
						done()
						b.ReportMetric(float64(inc.Patched())/float64(b.N), "patched/op")
					})
				}
			}
		}
	}
}

// BenchmarkIncrementalPlaces is a told pass after a submit that starts
// (which a replay cannot edit in), in the settled benchmark world: to
// its pool ("same-pool", a small job that fits beside the reservations)
// or to a second, idle pool of 8 nodes ("other-pool"), whose pass need
// not walk the 100,000 queued jobs of pool big. Plans are handed back as
// the control loop does: read only (ReadOnlyPlans), and the waiting list
// of the plan before the last one recycled.
func BenchmarkIncrementalPlaces(b *testing.B) {
	n := 100_000
	calm, _ := settled(n)
	pw := Pool("idle")
	for i := range 8 {
		pw.Node(fmt.Sprintf("idle-%d", i), 64, 512<<30, 8)
	}
	two := calm
	two.Pools = append(slices.Clone(calm.Pools), pw.Obj())
	for _, c := range []struct {
		name string
		base scheduler.Snapshot
		pool string
	}{{"same-pool", calm, "big"}, {"other-pool", two, "idle"}} {
		base := c.base
		submit := base
		j := Job(1 << 40).Pool(c.pool).Project("proj-007").CPUs(1).Memory(1 << 30).Priority(domain.PriorityUrgent).Submitted(base.Now).Obj()
		submit.Pending = append(slices.Clone(base.Pending), j)
		if p := scheduler.Schedule(submit, scheduler.Config{}); !slices.ContainsFunc(p.Start, func(pl scheduler.Placement) bool { return pl.JobID == j.JobID }) {
			b.Fatalf("%s: the submitted job does not start", c.name)
		}
		b.Run(fmt.Sprintf("settled/pending=%d/%s/submit-places-told", n, c.name), func(b *testing.B) {
			inc := incremental.Scheduler{ReadOnlyPlans: true}
			last := inc.Schedule(base, scheduler.Config{})
			var spent []scheduler.Waiting
			runtime.GC() // the setup's garbage is not the passes' to collect
			done := cpuPerOp(b)
			for i := 0; b.Loop(); i++ {
				s := base
				if i%2 == 0 {
					s = submit
				}
				inc.Recycle(scheduler.Plan{Waiting: spent})
				p := inc.ScheduleChanged(s, scheduler.Config{}, []int64{j.JobID})
				spent, last = last.Waiting, p
			}
			done()
			b.ReportMetric(float64(inc.Reused())/float64(b.N), "pools-reused/op")
			b.ReportMetric(float64(inc.Patched())/float64(b.N), "patched/op")
		})
	}
}
