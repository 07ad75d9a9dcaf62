package control_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"syscall"
	"testing"
	"time"

	"trainyard/internal/alerting"
	"trainyard/internal/clock"
	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/logs"
	"trainyard/internal/metrics"
	"trainyard/internal/observe"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
)

// BenchmarkIdleLoop measures the CPU the control loop, the metrics and
// the alert rules use while nothing happens: this process's user and
// system time over a window (60s, which holds one check of the live
// jobs; TRAINYARD_BENCH_IDLE_WINDOW overrides) as a share of one core, with the embedded store, the fake executor, the
// Prometheus series and the alerter wired as the server wires them.
// queued=100000: GPU jobs of 100 projects queued in pool blocked, whose
// one node has no GPU; running=1000: 1,000 one-CPU attempts in pool big
// (1,000 nodes × 8 GPUs, quotas for the 100 projects) that run until
// stopped. TRAINYARD_BENCH_CPUPROFILE names a file for a CPU profile of
// the windows.
func BenchmarkIdleLoop(b *testing.B) {
	window := time.Minute
	if v := os.Getenv("TRAINYARD_BENCH_IDLE_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("TRAINYARD_BENCH_IDLE_WINDOW: %v", err)
		}
		window = d
	}
	b.Run("queued=100000", func(b *testing.B) { idleLoop(b, window, 100_000, 0, false) })
	b.Run("running=1000", func(b *testing.B) { idleLoop(b, window, 0, 1000, false) })
}

// BenchmarkSubmitToLaunch measures, 60 jobs in turn, the time from a
// job's submit (its store write, then a wake-up) to its launch by the
// loop, with 100,000 jobs queued in another pool (as BenchmarkIdleLoop),
// and reports the median and the 99th percentile.
func BenchmarkSubmitToLaunch(b *testing.B) {
	b.Run("queued=100000", func(b *testing.B) { idleLoop(b, 0, 100_000, 0, true) })
}

func idleLoop(b *testing.B, window time.Duration, queued, running int, latency bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := b.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "db.sqlite"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	bigPool(b, st)
	if queued > 0 {
		seedBlocked(b, st, queued)
	}
	for i := range running {
		in := seedInput(b, fmt.Sprintf("proj-%03d", i%100), 0, domain.PriorityNormal)
		in.Spec.Resources = domain.Resources{CPUs: 1, Memory: 1 << 30, Nodes: 1}
		in.SubmittedAt = time.Now()
		in.OutputDir = func(id int64) string { return filepath.Join(dir, "out", fmt.Sprint(id)) }
		if _, _, err := st.CreateJob(ctx, in, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); err != nil {
			b.Fatal(err)
		}
	}
	m := metrics.New(metrics.Config{})
	al, err := alerting.New(alerting.Config{Store: st})
	if err != nil {
		b.Fatal(err)
	}
	launched := make(chan int64, 1024)
	ex := &executortest.Fake{Script: func(l executor.Launch) []executor.Event {
		launched <- l.JobID
		return []executor.Event{{Kind: executor.Started, PID: 1}} // runs until stopped
	}}
	ctl := control.New(control.Config{Store: st, Executor: ex, Clock: clock.Real{}, Observer: observe.Observers{M: m, A: al},
		Logs: logs.Layout{Root: filepath.Join(dir, "runs")}, Logger: discard()})
	done := make(chan struct{}, 2)
	go func() { ctl.Run(ctx); done <- struct{}{} }()
	go func() { al.Run(ctx); done <- struct{}{} }()
	defer func() { cancel(); <-done; <-done }()
	// Settled: every job has its reason or runs, and a cycle read it back.
	deadline := time.Now().Add(10 * time.Minute)
	for {
		n, err := st.CountJobs(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if n[domain.JobRunning] == running && n[domain.JobQueued] == queued {
			if q, _ := ctl.Queue(ctx, ""); len(q) == queued {
				break
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("not settled in 10 minutes: %v", n)
		}
		time.Sleep(100 * time.Millisecond) // polling the store
	}
	// Then every waiting job's reason written (the queue's last, written
	// last, is), read back a cycle later, and this process's CPU use
	// under 20% of a core for two seconds in a row.
	if q, _ := ctl.Queue(ctx, ""); len(q) > 0 {
		last := q[len(q)-1]
		for j, _ := st.GetJob(ctx, last.JobID); j.Reason != last.Reason; j, _ = st.GetJob(ctx, last.JobID) {
			if time.Now().After(deadline) {
				b.Fatal("reasons not written in 10 minutes")
			}
			time.Sleep(100 * time.Millisecond) // polling the store
		}
		time.Sleep(5 * time.Second) // two cycles
	}
	for quiet := 0; quiet < 2; {
		if time.Now().After(deadline) {
			b.Fatal("not settled in 10 minutes")
		}
		before := cpuTime(b)
		time.Sleep(time.Second)
		if cpuTime(b)-before < 200*time.Millisecond {
			quiet++
		} else {
			quiet = 0
		}
	}
	if path := os.Getenv("TRAINYARD_BENCH_CPUPROFILE"); path != "" { // the windows only
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	if latency {
		var lat []float64
		in := seedInput(b, "proj-001", 0, domain.PriorityNormal)
		in.Spec.Resources = domain.Resources{CPUs: 1, Memory: 1 << 30, Nodes: 1}
		for len(launched) > 0 {
			<-launched
		}
		for b.Loop() {
			for range 60 {
				start := time.Now()
				in.SubmittedAt = start
				in.OutputDir = func(id int64) string { return filepath.Join(dir, "out", fmt.Sprint(id)) }
				j, _, err := st.CreateJob(ctx, in, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK})
				if err != nil {
					b.Fatal(err)
				}
				ctl.Wake()
				for id := <-launched; id != j.ID; id = <-launched {
				}
				lat = append(lat, float64(time.Since(start).Microseconds())/1000)
			}
		}
		slices.Sort(lat)
		b.ReportMetric(lat[len(lat)/2], "p50-ms")
		b.ReportMetric(lat[len(lat)*99/100], "p99-ms")
		return
	}
	var shares []float64
	for b.Loop() {
		before, start := cpuTime(b), time.Now()
		time.Sleep(window) // the measurement window itself
		shares = append(shares, 100*(cpuTime(b)-before).Seconds()/time.Since(start).Seconds())
	}
	b.ReportMetric(shares[len(shares)/2], "cpu-%")
	raw, _ := os.ReadFile("/proc/loadavg")
	b.Logf("window %s; loadavg %s", window, raw)
}

// bigPool puts pool big (1,000 nodes × 8 GPUs, 64 CPUs) and 100 projects
// with quotas of 48 GPUs there.
func bigPool(b *testing.B, st store.Store) {
	ctx := context.Background()
	pool := domain.Pool{Name: "big", Executor: "local", Borrowing: true, Preemption: true}
	for i := range 1000 {
		pool.Nodes = append(pool.Nodes, domain.Node{Name: fmt.Sprintf("node-%04d", i), CPUs: 64, Memory: 512 << 30,
			GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}})
	}
	audit := domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}
	if _, err := st.PutPool(ctx, pool, audit); err != nil {
		b.Fatal(err)
	}
	for p := range 100 {
		name := fmt.Sprintf("proj-%03d", p)
		if err := st.PutProject(ctx, domain.Project{Name: name, Shares: float64(1 + p%3)}, audit); err != nil {
			b.Fatal(err)
		}
		if err := st.PutQuota(ctx, domain.Quota{Project: name, Pool: "big", Guaranteed: domain.Limits{GPUs: 48, CPUs: 640},
			Borrow: domain.Limits{GPUs: 40}, MaxPriority: domain.PriorityUrgent}, audit); err != nil {
			b.Fatal(err)
		}
	}
}

// seedBlocked queues n GPU jobs of mixed shapes, priorities and projects
// in pool blocked, whose one node has no GPU: they wait for good.
func seedBlocked(b *testing.B, st store.Store, n int) {
	b.Helper()
	ctx := context.Background()
	audit := domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}
	if _, err := st.PutPool(ctx, domain.Pool{Name: "blocked", Executor: "local",
		Nodes: []domain.Node{{Name: "cpu-only", CPUs: 64, Memory: 512 << 30}}}, audit); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	var inputs []store.NewJob
	for p := range 100 {
		for _, gpus := range []int{1, 2, 4, 8} {
			for _, prio := range domain.Priorities() {
				in := seedInput(b, fmt.Sprintf("proj-%03d", p), gpus, prio)
				in.Spec.Pool = "blocked"
				raw, err := json.Marshal(in.Spec)
				if err != nil {
					b.Fatal(err)
				}
				sum := sha256.Sum256(raw)
				in.SpecJSON, in.SpecHash = raw, "sha256:"+hex.EncodeToString(sum[:])
				inputs = append(inputs, in)
			}
		}
	}
	errs := make(chan error, 4)
	for w := range 4 {
		go func() {
			for i := w; i < n; i += 4 {
				in := inputs[i%len(inputs)]
				in.SubmittedAt = time.Now()
				in.OutputDir = func(id int64) string { return fmt.Sprintf("/out/%d", id) }
				if _, _, err := st.CreateJob(ctx, in, audit); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("queued %d jobs in %v", n, time.Since(start).Round(time.Millisecond))
}

// cpuTime is the user and system time this process used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
