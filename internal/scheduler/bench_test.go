package scheduler_test

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/scheduler"
	. "trainyard/internal/scheduler/schedtest"
)

// benchSnapshot is one pool of 1,000 nodes × 8 GPUs with borrowing and
// preemption on, 100 projects with quotas, about 60% of the GPUs busy with
// running jobs, and n pending jobs of mixed shapes and priorities.
func benchSnapshot(n int) scheduler.Snapshot {
	r := rand.New(rand.NewPCG(1, 2))
	pw := Pool("big").Borrowing().Preemption()
	for i := range 1000 {
		pw.Node(fmt.Sprintf("node-%04d", i), 64, 512<<30, 8)
	}
	s := scheduler.Snapshot{Now: T0.Add(10 * time.Hour), Pools: []domain.Pool{pw.Obj()}}
	for p := range 100 {
		name := fmt.Sprintf("proj-%03d", p)
		s.Quotas = append(s.Quotas, Quota(name, "big").GPUs(48).Borrow(40).MaxPriority(Urgent).Obj())
		s.Projects = append(s.Projects, domain.Project{Name: name, Shares: float64(1 + p%3)})
		s.Usage = append(s.Usage, scheduler.Usage{Project: name, Pool: "big", Value: r.Float64() * 10})
	}
	id := int64(0)
	for node := range 600 {
		for g := 0; g < 8; {
			gpus := []int{1, 2, 4}[r.IntN(3)]
			gpus = min(gpus, 8-g)
			id++
			j := Job(id).Pool("big").Project(fmt.Sprintf("proj-%03d", r.IntN(100))).GPUs(gpus).CPUs(float64(4 * gpus)).
				Memory(domain.ByteSize(32*gpus) << 30).Priority(domain.Priorities()[r.IntN(3)]).Timeout(time.Duration(1+r.IntN(48)) * time.Hour)
			if r.IntN(2) == 0 {
				j.Preemptible()
			}
			a := j.Running(T0.Add(time.Duration(r.IntN(600))*time.Minute), On(fmt.Sprintf("node-%04d", node), Span(g, gpus)...))
			s.Running = append(s.Running, a)
			g += gpus
		}
	}
	for range n {
		id++
		gpus := []int{1, 1, 2, 4, 8}[r.IntN(5)]
		j := Job(id).Pool("big").Project(fmt.Sprintf("proj-%03d", r.IntN(100))).GPUs(gpus).CPUs(float64(4 * gpus)).
			Memory(domain.ByteSize(32*gpus) << 30).Priority(domain.Priorities()[r.IntN(4)]).
			Submitted(T0.Add(time.Duration(r.IntN(36000)) * time.Second))
		if gpus == 8 && r.IntN(4) == 0 {
			j.Nodes(2 + r.IntN(3))
		}
		if r.IntN(3) > 0 {
			j.Timeout(time.Duration(1+r.IntN(24)) * time.Hour)
		}
		if r.IntN(2) == 0 {
			j.Preemptible()
		}
		s.Pending = append(s.Pending, j.Obj())
	}
	return s
}

// cpuPerOp starts counting the process's CPU time (user and system, the
// garbage collector's included); the function it returns reports it per
// iteration as cpu-ns/op. On a machine shared with other work, ns/op also
// counts time spent waiting for a core; cpu-ns/op does not.
func cpuPerOp(b *testing.B) func() {
	var start syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &start)
	return func() {
		var end syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &end)
		ns := end.Utime.Nano() + end.Stime.Nano() - start.Utime.Nano() - start.Stime.Nano()
		b.ReportMetric(float64(ns)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkSchedule is one full pass at 1k, 10k and 100k pending jobs,
// with the working memory its callers keep between full passes (see
// scheduler.Scratch).
func BenchmarkSchedule(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		s := benchSnapshot(n)
		b.Run(fmt.Sprintf("pending=%d", n), func(b *testing.B) {
			var p scheduler.Plan
			var sc scheduler.Scratch
			done := cpuPerOp(b)
			for b.Loop() {
				p = scheduler.ScheduleIn(s, scheduler.Config{}, &sc)
			}
			done()
			b.ReportMetric(float64(len(p.Start)), "starts")
			b.ReportMetric(float64(len(p.Preempt)), "preemptions")
		})
	}
}

// BenchmarkScheduleAfterSmallChange is a full pass on a steady state (the
// previous pass applied) after one submit or one finish. Schedule keeps no
// state between passes, so this is a full pass over the same queue.
func BenchmarkScheduleAfterSmallChange(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		h := &Harness{Snap: benchSnapshot(n)}
		h.Apply(scheduler.Schedule(h.Snap, scheduler.Config{}))
		h.Apply(scheduler.Schedule(h.Snap, scheduler.Config{}))
		submit := h.Snap
		submit.Pending = append(append([]scheduler.Pending(nil), submit.Pending...), Job(1<<40).Pool("big").Project("proj-007").GPUs(2).Submitted(h.Snap.Now).Obj())
		finish := h.Snap
		finish.Running = finish.Running[1:]
		for _, c := range []struct {
			name string
			s    scheduler.Snapshot
		}{{"submit", submit}, {"finish", finish}} {
			s := c.s
			b.Run(fmt.Sprintf("pending=%d/%s", n, c.name), func(b *testing.B) {
				for b.Loop() {
					scheduler.Schedule(s, scheduler.Config{})
				}
			})
		}
	}
}
