package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
)

// latencySamples is how many jobs each submit→running run times.
const latencySamples = 60

// benchPools is the server config of the latency and idle benchmarks:
// pool default runs the timed jobs; pool blocked has a node too small for
// the jobs queued there, so they wait for good.
const benchPools = `pools:
  - {name: default, nodes: [{name: n1, cpus: 4, memory: 8GiB}]}
  - {name: blocked, nodes: [{name: b1, cpus: 1, memory: 1GiB}]}
`

// BenchmarkSubmitToRunning measures, job after job, the time from a
// job's submit to its running transition, both as recorded by the
// server, over latencySamples jobs per run: on an idle server
// (queued=0), and with 100,000 jobs (TRAINYARD_BENCH_QUEUED) queued in
// another pool that cannot run them, seeded through the store before the
// server starts. It reports the median and the 99th percentile. The
// running transition's time is the supervisor's, taken once the
// entrypoint's exec succeeded; the client's polling for each job's end
// (waitState, every 20ms) is outside the figure.
func BenchmarkSubmitToRunning(b *testing.B) {
	for _, queued := range []int{0, benchQueued(b)} {
		b.Run("queued="+strconv.Itoa(queued), func(b *testing.B) {
			s := startServer(b, serverOpts{cpus: 4, extra: benchPools})
			if queued > 0 {
				seedBlocked(b, s, queued)
			}
			defer stopQuietly(s)
			settle(b, s)
			spec := "name: lat\nresources: {cpus: 1, memory: 16MiB}\nentrypoint: [true]\n"
			var lat []float64
			for b.Loop() {
				for range latencySamples {
					j := s.submit(spec)
					s.waitState(j.ID, time.Minute, "succeeded", "failed")
					full := s.job(j.ID)
					for _, tr := range full.Transitions {
						if tr.To == "running" {
							lat = append(lat, float64(tr.At.Sub(full.SubmittedAt).Microseconds())/1000)
						}
					}
				}
			}
			b.ReportMetric(median(lat), "p50-ms")
			b.ReportMetric(percentile(lat, 0.99), "p99-ms")
			b.Logf("%d samples; load %s", len(lat), loadAvg())
		})
	}
}

// BenchmarkIdleCPU measures the CPU an idle server uses with 100,000
// jobs (TRAINYARD_BENCH_QUEUED) queued in a pool that cannot run them: the server process's user
// and system time over idleWindow (30s; TRAINYARD_BENCH_IDLE_WINDOW
// overrides), once the queue has settled, as a share of one core.
func BenchmarkIdleCPU(b *testing.B) {
	window := 30 * time.Second
	if v := os.Getenv("TRAINYARD_BENCH_IDLE_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("TRAINYARD_BENCH_IDLE_WINDOW: %v", err)
		}
		window = d
	}
	n := benchQueued(b)
	b.Run("queued="+strconv.Itoa(n), func(b *testing.B) {
		s := startServer(b, serverOpts{cpus: 4, extra: benchPools})
		seedBlocked(b, s, n)
		defer stopQuietly(s)
		settle(b, s)
		var shares []float64
		for b.Loop() {
			before := cpuTime(b, s.cmd.Process.Pid)
			start := time.Now()
			time.Sleep(window) // the measurement window itself
			used := cpuTime(b, s.cmd.Process.Pid) - before
			shares = append(shares, 100*used.Seconds()/time.Since(start).Seconds())
		}
		b.ReportMetric(median(shares), "cpu-%")
		b.Logf("window %s; load %s", window, loadAvg())
	})
}

// benchQueued is how many jobs the benchmarks queue in pool blocked:
// 100,000, or TRAINYARD_BENCH_QUEUED.
func benchQueued(b *testing.B) int {
	if v := os.Getenv("TRAINYARD_BENCH_QUEUED"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("TRAINYARD_BENCH_QUEUED=%q: want a positive number of jobs", v)
		}
		return n
	}
	return 100_000
}

// seedBlocked stops the server, adds n queued jobs to pool blocked
// through its store (four writers; the store batches them), and starts
// it again, which reads them all.
func seedBlocked(b *testing.B, s *server, n int) {
	b.Helper()
	s.shutdown()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(s.data, "trainyard.db"))
	if err != nil {
		b.Fatal(err)
	}
	spec := domain.Spec{Name: "blocked", Project: "default", Pool: "blocked", Entrypoint: []string{"true"},
		Resources: domain.Resources{CPUs: 2, Memory: 16 << 20, Nodes: 1}}
	raw, err := json.Marshal(spec)
	if err != nil {
		b.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	in := store.NewJob{Spec: spec, SpecJSON: raw, SpecHash: "sha256:" + hex.EncodeToString(sum[:]), Submitter: "admin", Actor: "user:admin"}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				in := in
				in.SubmittedAt = time.Now()
				in.OutputDir = func(id int64) string { return filepath.Join(s.data, "outputs", strconv.FormatInt(id, 10)) }
				if _, _, err := st.CreateJob(ctx, in, domain.AuditRecord{Actor: "user:admin", Action: "job.submit", Result: domain.AuditOK}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	b.Logf("queued %d jobs in pool blocked in %s", n, time.Since(start).Round(time.Millisecond))
	s.start()
}

// settle waits until the server has read its queue and written why each
// job waits: a job submitted to pool default runs, the last jobs queued
// have their reason, and the server's CPU time stays flat (under 20% of a
// core) for two seconds in a row.
func settle(b *testing.B, s *server) {
	b.Helper()
	j := s.submit("name: warm\nresources: {cpus: 1, memory: 16MiB}\nentrypoint: [true]\n")
	s.waitState(j.ID, 20*time.Minute, "succeeded", "failed")
	deadline := time.Now().Add(20 * time.Minute)
	// The queue's last jobs (the last seeded) get their reason last.
	for id := max(j.ID-4, 1); id < j.ID; id++ {
		waitFor(b, 20*time.Minute, fmt.Sprintf("job %d's reason", id), func() bool { return s.job(id).Reason != "Submitted" })
	}
	time.Sleep(5 * time.Second) // two cycles, to read them back
	for quiet := 0; quiet < 2; {
		if time.Now().After(deadline) {
			b.Fatal("the server did not settle within 20 minutes")
		}
		before := cpuTime(b, s.cmd.Process.Pid)
		time.Sleep(time.Second)
		if cpuTime(b, s.cmd.Process.Pid)-before < 200*time.Millisecond {
			quiet++
		} else {
			quiet = 0
		}
	}
}

// stopQuietly stops the server without canceling its jobs one by one
// first (shutdown would try, for the first thousand of the queue).
func stopQuietly(s *server) {
	s.url = ""
	s.shutdown()
}

// cpuTime is the user and system CPU time the process used so far.
func cpuTime(b *testing.B, pid int) time.Duration {
	b.Helper()
	d, err := executortest.ProcessCPU(pid)
	if err != nil {
		b.Fatalf("read the server's CPU time: %v", err)
	}
	return d
}

// loadAvg is the machine's 1, 5 and 15 minute load averages.
func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(raw))[:3], " ")
}
