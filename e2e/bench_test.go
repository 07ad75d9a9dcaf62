package e2e

import (
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkEndToEndTrue submits 1,000 jobs running `true` (1 CPU each, as
// Slurm's default, on a 16-CPU inventory) from 4 clients to a fresh server
// and reports jobs/s from the first submit to the last job's end, both as
// recorded by the server, so polling adds nothing to the figure. Its
// sub-benchmarks run jobs as the server's user and, when the benchmark
// runs as root, as their project's own user; with -count they alternate.
//
// The ceiling is this machine's: right before and right after each run it
// measures how fast Go starts /bin/true (16 at a time, as many as the
// inventory runs jobs) and reports exec-limit-jobs/s, half that rate (each
// job costs two execs: its supervisor and its program), and
// of-exec-limit, jobs/s over exec-limit-jobs/s, the figure that stays
// comparable across machines and load.
func BenchmarkEndToEndTrue(b *testing.B) {
	modes := []string{"off"}
	if os.Geteuid() == 0 {
		modes = append(modes, "required")
	}
	for _, mode := range modes {
		b.Run("isolation="+mode, func(b *testing.B) { endToEndTrue(b, mode) })
	}
}

// endToEndJobs, endToEndClients and endToEndCPUs are the end-to-end
// benchmark's setup: jobs per run, concurrent submitters, and the
// inventory's CPUs (each job takes 1).
const endToEndJobs, endToEndClients, endToEndCPUs = 1000, 4, 16

func endToEndTrue(b *testing.B, isolation string) {
	var rates, limits, ratios []float64
	for b.Loop() {
		b.StopTimer()
		// Every run's files stay until the benchmark binary exits (keep):
		// removing them between runs would slow the next run's file
		// creation on some filesystems (keptDir).
		s := startServer(b, serverOpts{cpus: endToEndCPUs, memory: "256GiB", extra: "isolation: " + isolation + "\n", keep: true})
		spec := "name: t\nresources: {cpus: 1, memory: 16MiB}\nentrypoint: [true]\n"
		before := execRate(b, endToEndCPUs, endToEndJobs)
		b.StartTimer()
		ids := make([]int64, endToEndJobs)
		var wg sync.WaitGroup
		for c := range endToEndClients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := c; i < endToEndJobs; i += endToEndClients {
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
		rate := float64(endToEndJobs) / last.Sub(first).Seconds()
		limit := (before + execRate(b, endToEndCPUs, endToEndJobs)) / 2 / 2
		rates, limits, ratios = append(rates, rate), append(limits, limit), append(ratios, rate/limit)
		s.shutdown()
		b.StartTimer()
	}
	b.ReportMetric(median(rates), "jobs/s")
	b.ReportMetric(median(limits), "exec-limit-jobs/s")
	b.ReportMetric(median(ratios), "of-exec-limit")
}

// execRate starts /bin/true n times, par at a time, and returns how many
// it started (and waited for) per second.
func execRate(b *testing.B, par, n int) float64 {
	b.Helper()
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	t0 := time.Now()
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := exec.Command("/bin/true").Run(); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("exec /bin/true: %v", err)
	}
	return float64(n) / time.Since(t0).Seconds()
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
