package e2e

import (
	"os"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkEndToEndTrue submits 500 jobs running `true` (1 CPU each, on a
// 16-CPU inventory) from 4 clients to a fresh server and reports jobs/s from
// the first submit to the last job's end, both as recorded by the server, so
// polling adds nothing to the figure. Its sub-benchmarks run jobs as the
// server's user and, when the benchmark runs as root, as their project's
// own user; with -count they alternate.
func BenchmarkEndToEndTrue(b *testing.B) {
	modes := []string{"off"}
	if os.Geteuid() == 0 {
		modes = append(modes, "required")
	}
	for _, mode := range modes {
		b.Run("isolation="+mode, func(b *testing.B) { endToEndTrue(b, mode) })
	}
}

func endToEndTrue(b *testing.B, isolation string) {
	const jobs, clients = 500, 4
	var rates []float64
	for b.Loop() {
		b.StopTimer()
		s := startServer(b, serverOpts{cpus: 16, memory: "256GiB", extra: "isolation: " + isolation + "\n"})
		spec := "name: t\nresources: {cpus: 1, memory: 16MiB}\nentrypoint: [true]\n"
		b.StartTimer()
		ids := make([]int64, jobs)
		var wg sync.WaitGroup
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := c; i < jobs; i += clients {
					ids[i] = s.submit(spec).ID
				}
			}()
		}
		wg.Wait()
		for _, id := range ids {
			if j := s.waitState(id, 5*time.Minute, "succeeded", "failed"); j.State != "succeeded" {
				b.Fatalf("job %d %s: %s", id, j.State, j.Message)
			}
		}
		b.StopTimer()
		first, last := spanOf(s, ids)
		rates = append(rates, float64(jobs)/last.Sub(first).Seconds())
		s.shutdown()
		b.StartTimer()
	}
	b.ReportMetric(median(rates), "jobs/s")
}

func spanOf(s *server, ids []int64) (first, last time.Time) {
	for _, id := range ids {
		j := s.job(id)
		if first.IsZero() || j.SubmittedAt.Before(first) {
			first = j.SubmittedAt
		}
		if j.FinishedAt != nil && j.FinishedAt.After(last) {
			last = *j.FinishedAt
		}
	}
	return first, last
}

func median(xs []float64) float64 { return percentile(xs, 0.5) }

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(int(float64(len(s))*p), len(s)-1)]
}
