package simulate

import (
	"runtime/debug"
	"testing"
	"time"
)

// BenchmarkFairShare simulates testdata/fairshare.yaml (a week, three
// projects, a one-minute tick) and reports virtual days per wall second.
func BenchmarkFairShare(b *testing.B) {
	w := load(b, "fairshare.yaml")
	days := w.Duration.D().Hours() / 24
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		run(b, w)
	}
	b.ReportMetric(days*float64(b.N)/time.Since(start).Seconds(), "virtual-days/s")
}

// BenchmarkSimulate100Nodes simulates each generated week-long workload on
// 100 nodes of 8 GPUs (testdata/gen-*.yaml: about 10,000 jobs each, ten
// projects, gangs, borrowing and preemption) and reports simulated jobs per
// wall second. gen-steady is the realistic load (about 80% utilisation);
// gen-overload keeps the pool oversubscribed with heavy preemption. Two
// variants of gen-steady: with the garbage collector as trainyard sim sets
// it (GOGC=400), and with the invariant checks on (sim --check).
func BenchmarkSimulate100Nodes(b *testing.B) {
	for _, name := range []string{"gen-steady.yaml", "gen-overload.yaml", "gen-gangs.yaml"} {
		b.Run(name, func(b *testing.B) { benchJobs(b, load(b, name), Options{}) })
	}
	b.Run("gogc=400/gen-steady.yaml", func(b *testing.B) {
		defer debug.SetGCPercent(debug.SetGCPercent(400))
		benchJobs(b, load(b, "gen-steady.yaml"), Options{})
	})
	b.Run("check/gen-steady.yaml", func(b *testing.B) { benchJobs(b, load(b, "gen-steady.yaml"), Options{Check: true}) })
}

func benchJobs(b *testing.B, w Workload, opt Options) {
	b.ReportAllocs()
	jobs := 0
	start := time.Now()
	for b.Loop() {
		r, err := RunWith(w, opt)
		if err != nil {
			b.Fatal(err)
		}
		jobs += r.Submitted
	}
	b.ReportMetric(float64(jobs)/time.Since(start).Seconds(), "jobs/s")
}
