package control_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"trainyard/internal/clock"
	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/local"
	"trainyard/internal/logs"
	"trainyard/internal/metrics/sample"
	"trainyard/internal/service"
	"trainyard/internal/store/sqlite"
)

// shimEnv makes the test binary act as the local executor's supervisor, so
// that real jobs run under it without a separate build.
const shimEnv = "TRAINYARD_TEST_SHIM"

func TestMain(m *testing.M) {
	if os.Getenv(shimEnv) == "1" {
		os.Exit(local.ShimMain(os.Args[1:]))
	}
	os.Setenv(shimEnv, "1")
	// Race-enabled programs sleep a second at exit by default; shims are
	// race-enabled test binaries under -race.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	os.Exit(m.Run())
}

// scriptedGPUs is a sample.GPUReader whose readings the test sets, in
// percent, per GPU index.
type scriptedGPUs struct {
	mu   sync.Mutex
	util map[int]float64
}

func (g *scriptedGPUs) set(idx int, pct float64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.util[idx] = pct
}

func (g *scriptedGPUs) ReadGPUs(context.Context) ([]sample.GPUStat, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []sample.GPUStat
	for i, u := range g.util {
		out = append(out, sample.GPUStat{Index: i, Utilization: u})
	}
	return out, nil
}

// countedSampler counts the loop's reads of the sampler, so the test knows
// a round of samples was judged before it takes the next.
type countedSampler struct {
	*sample.Sampler
	reads atomic.Int64
}

func (c *countedSampler) Latest() []sample.Sample {
	c.reads.Add(1) // before the read: a read counted after a round sees it
	return c.Sampler.Latest()
}

// A real job on the local executor whose GPU reads idle for the pool's
// whole idle_stop window is stopped with reason Idle, fails without a
// retry, and says why; a job whose GPU got busy within the window keeps
// running. The sampler is the real one, over a scripted GPU reader and the
// fake clock.
func TestIdleStopEndsAJobWhoseGPUsIdle(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	layout := logs.Layout{Root: filepath.Join(dir, "runs")}
	node := executor.Node{Name: "gpu-a", CPUs: 2, Memory: 4 << 30, GPUs: []int{0, 1}}
	ex, err := local.New(local.Config{ShimCommand: []string{self}, PollInterval: 20 * time.Millisecond, Runs: layout.Root,
		Inventory: &executor.Inventory{Nodes: []executor.Node{node}}, CgroupRoot: "none", CgroupTrackRoot: "none", CgroupCPURoot: "none"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Close() })

	clk := clock.NewFake(time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC))
	gpus := &scriptedGPUs{util: map[int]float64{0: 0, 1: 0}}
	smp := &countedSampler{Sampler: sample.New(sample.Config{GPU: gpus, Now: clk.Now,
		Targets: func(ctx context.Context) []sample.Target {
			atts, _ := st.ActiveAttempts(ctx)
			var ts []sample.Target
			for _, a := range atts {
				ts = append(ts, sample.Target{JobID: a.JobID, Attempt: a.Number, GPUs: a.GPUs, Dir: layout.AttemptDir(a.JobID, a.Number)})
			}
			return ts
		}})}
	ctl := control.New(control.Config{Store: st, Executor: ex, Clock: clk, Logs: layout, Grace: time.Second,
		Interval: 5 * time.Millisecond, BaseEnv: []string{"PATH=/usr/bin:/bin"}, GPUSamples: smp})
	svc := service.New(service.Config{Store: st, Logs: layout, Clock: clk, ArtifactsRoot: filepath.Join(dir, "artifacts"), Wake: ctl.Wake})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ctl.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })

	pool := domain.Pool{Name: "gpu", Executor: "local", Nodes: []domain.Node{{Name: node.Name, CPUs: node.CPUs, Memory: node.Memory, GPUs: node.GPUs}},
		IdleStop: domain.IdleStop{Below: 0.05, For: domain.Duration(30 * time.Minute)}}
	if _, _, err := svc.Pools.PutPool(ctx, admin, pool); err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, st: st, svc: svc, dir: dir}
	spec := "pool: gpu\nentrypoint: [sleep, '600']\nresources: {gpus: 1, cpus: 0.5, memory: 64MiB}\npolicy: {retries: 2, reentrant: true}\n"
	idle := r.submit("name: idle\n" + spec)
	busy := r.submit("name: busy\n" + spec)
	gpuOf := map[int64]int{}
	for _, j := range []domain.Job{idle, busy} {
		r.wait(j.ID, domain.JobRunning)
		a := r.attempts(j.ID)
		if len(a) != 1 || len(a[0].GPUs) != 1 {
			t.Fatalf("job %d attempts = %+v, want one holding one GPU", j.ID, a)
		}
		gpuOf[j.ID] = a[0].GPUs[0]
	}

	// One round every 5 minutes: the idle job's GPU reads 1% throughout;
	// the busy job's reads 1%, except 80% at 20m.
	for step := 0; step <= 6; step++ {
		gpus.set(gpuOf[idle.ID], 1)
		busyUtil := 1.0
		if step == 4 {
			busyUtil = 80
		}
		gpus.set(gpuOf[busy.ID], busyUtil)
		smp.SampleOnce(ctx)
		n := smp.reads.Load()
		ctl.Wake()
		deadline := time.Now().Add(10 * time.Second)
		for smp.reads.Load() < n+2 { // the read after this round's, so its judgement is done
			if time.Now().After(deadline) {
				t.Fatal("the loop did not read the sampler")
			}
			time.Sleep(time.Millisecond) // polling the loop
		}
		if step < 6 {
			if j, _ := st.GetJob(ctx, idle.ID); j.State != domain.JobRunning {
				t.Fatalf("at %dm the idle job is %s (%s: %s), before its window ended", 5*step, j.State, j.Reason, j.Message)
			}
			clk.Advance(5 * time.Minute)
		}
	}

	got := r.wait(idle.ID, domain.JobFailed)
	if got.Reason != domain.ReasonIdle || !strings.Contains(got.Message, "stopped as idle: GPU ") ||
		!strings.Contains(got.Message, "under 5% utilisation (at most 1%) for 30m, pool gpu's idle_stop") ||
		strings.Contains(got.Message, "retries left") {
		t.Fatalf("idle job: %s %q", got.Reason, got.Message)
	}
	if a := r.attempts(idle.ID); len(a) != 1 || a[0].State != domain.AttemptFailed || a[0].Reason != domain.ReasonIdle {
		t.Fatalf("idle job attempts = %+v, want one, failed Idle (not retried)", a)
	}
	// Its GPU use is recorded on the attempt: 6 intervals between 7 rounds,
	// each counted as at most two of the sampler's (15 s) rounds, at 1%.
	if a := r.attempts(idle.ID); math.Abs(a[0].Usage.GPUSeconds-6*30*0.01) > 1e-9 {
		t.Errorf("idle job's GPU use = %g GPU-seconds, want %g", a[0].Usage.GPUSeconds, 6*30*0.01)
	}
	events, err := st.ListEvents(ctx, idle.ID)
	if err != nil || len(events) == 0 || events[len(events)-1].Reason != domain.ReasonIdle ||
		!strings.Contains(events[len(events)-1].Message, "stopped as idle") {
		t.Fatalf("events = %+v, %v; want the last to be the Idle stop", events, err)
	}
	why, err := svc.Jobs.Explain(ctx, admin, idle.ID)
	if err != nil || why.Class != "idle" || !strings.Contains(why.Hint, "trainyard rerun") {
		t.Fatalf("why = %+v, %v; want class idle and a hint to rerun", why, err)
	}
	if j, _ := st.GetJob(ctx, busy.ID); j.State != domain.JobRunning {
		t.Fatalf("the job whose GPU got busy at 20m is %s (%s: %s), want running", j.State, j.Reason, j.Message)
	}
}
