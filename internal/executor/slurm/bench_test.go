package slurm_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/executor/local"
	"trainyard/internal/executor/slurm"
	"trainyard/internal/executor/slurm/slurmtest"
)

// buildShim builds the supervisor the batch steps run, trainyard-shim,
// as a release does (the tests' own supervisor, the test binary, starts
// several times slower), and returns its path.
func buildShim(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	out, err := exec.Command("go", "build", "-o", dir+"/", "trainyard/cmd/trainyard-shim").CombinedOutput()
	if err != nil {
		b.Fatalf("build trainyard-shim: %v\n%s", err, out)
	}
	return filepath.Join(dir, "trainyard-shim")
}

// benchJobs is how many jobs a round runs; TRAINYARD_BENCH_JOBS changes it.
func benchJobs() int {
	if n, err := strconv.Atoi(os.Getenv("TRAINYARD_BENCH_JOBS")); err == nil && n > 0 {
		return n
	}
	return 1000
}

const (
	// benchClients is how many goroutines submit at once, on both sides.
	benchClients = 4
	// benchCPUs is what the benchmark's node declares: 16 one-CPU jobs
	// at once.
	benchCPUs = 16
	// benchPoll is how often both sides ask squeue.
	benchPoll = 200 * time.Millisecond
)

// BenchmarkThousandJobs runs 1,000 trivial one-CPU jobs (true) on a
// private cluster of one 16-CPU node, each round twice, alternating:
// directly, as a minimal script would (sbatch --wrap=true from 4
// goroutines, then squeue every poll interval until none of them is
// left), and through the executor (Launch each from 4 goroutines, then
// wait for every Exited event; its batch step is the supervisor, which
// runs true: the trainyard-shim binary, built for the benchmark, as a
// cluster's nodes run it). It reports each side's jobs per second, first submission
// to last end, the executor's as a fraction of direct's (Trainyard may
// add at most 10% to Slurm's own time: ≥ 0.9), and the Slurm commands
// the executor ran, per job and per poll interval: state is one squeue
// per poll for every attempt, whatever their number (a Launch also
// wakes the poller, so submissions add polls, never more than one at a
// time). It logs, for each round and side, the CPU time per job of the
// daemons, of this process and the commands it ran (sbatch, squeue), and
// of the rest of the machine: the jobs' steps (slurmstepd, the batch
// scripts, the supervisor and its program).
func BenchmarkThousandJobs(b *testing.B) {
	c := slurmtest.NewWith(b, slurmtest.Options{CPUs: benchCPUs})
	shim := buildShim(b)
	n := benchJobs()
	var direct, via []float64
	var elapsed time.Duration
	var cmds commandCount
	round := 0
	for b.Loop() {
		round++
		cpu0 := executortest.CPUNow(c.Dir)
		d := directRound(b, c, n, round)
		cpu1 := executortest.CPUNow(c.Dir)
		direct = append(direct, float64(n)/d.Seconds())
		v := executorRound(b, c, shim, n, round, &cmds)
		cpu2 := executortest.CPUNow(c.Dir)
		via = append(via, float64(n)/v.Seconds())
		b.Logf("round %d, CPU ms per job, direct: %s", round, cpu1.Sub(cpu0).PerJob(float64(n), true))
		b.Logf("round %d, CPU ms per job, executor: %s", round, cpu2.Sub(cpu1).PerJob(float64(n), true))
		elapsed += v
	}
	d, v := median(direct), median(via)
	b.ReportMetric(d, "direct-jobs/s")
	b.ReportMetric(v, "executor-jobs/s")
	b.ReportMetric(v/d, "executor/direct")
	jobs := float64(n * len(direct))
	b.ReportMetric(float64(cmds.total())/jobs, "commands/job")
	b.ReportMetric(float64(cmds.get("squeue"))/jobs, "squeue/job")
	intervals := elapsed.Seconds() / benchPoll.Seconds()
	b.ReportMetric(float64(cmds.get("squeue"))/intervals, "squeue/poll-interval")
	b.ReportMetric(0, "ns/op")
	b.Logf("direct jobs/s by round: %.1f; executor: %.1f", direct, via)
	b.Logf("the executor's Slurm commands: %s per job; squeue %.2f per %v poll interval (%d in %v)",
		cmds.per(jobs), float64(cmds.get("squeue"))/intervals, benchPoll, cmds.get("squeue"), elapsed.Round(time.Millisecond))
}

// directRound submits n jobs with sbatch and waits until squeue lists
// none of them as pending, running or completing.
func directRound(b *testing.B, c *slurmtest.Cluster, n, round int) time.Duration {
	name := fmt.Sprintf("bench-direct-%d", round)
	ctx := context.Background()
	var failed atomic.Int64
	start := time.Now()
	each(n, func(int) {
		out, err := c.Command(ctx, "sbatch", "--parsable", "--job-name="+name, "--output=/dev/null",
			"--cpus-per-task=1", "--wrap=true").CombinedOutput()
		if err != nil {
			failed.Add(1)
			b.Errorf("sbatch: %v: %s", err, out)
		}
	})
	if failed.Load() > 0 {
		b.Fatalf("%d submissions failed", failed.Load())
	}
	submitted := time.Since(start)
	waitGone(b, c, name, true)
	d := time.Since(start)
	b.Logf("direct round %d: submitted in %v, all ended in %v", round, submitted.Round(time.Millisecond), d.Round(time.Millisecond))
	return d
}

// executorRound launches n attempts through a new executor and waits
// for every one to exit; then, untimed, for Slurm to list none of them
// as still running.
func executorRound(b *testing.B, c *slurmtest.Cluster, shim string, n, round int, cmds *commandCount) time.Duration {
	root := b.TempDir()
	prefix := fmt.Sprintf("bench-ty%d", round)
	cfg := slurm.WithCommandHook(slurm.Config{
		ShimCommand:  []string{shim},
		Env:          []string{"SLURM_CONF=" + c.Conf},
		NamePrefix:   prefix,
		PollInterval: benchPoll,
		Files:        local.NewReader(root),
	}, cmds.add)
	ex, err := slurm.New(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer ex.Close()
	done := make(chan struct{})
	go func() {
		exited := 0
		for ev := range ex.Events() {
			if ev.Kind == executor.Exited || ev.Kind == executor.Lost {
				if ev.State != domain.AttemptSucceeded {
					b.Errorf("attempt %s: %s %s %s", ev.Ref, ev.Kind, ev.State, ev.Message)
				}
				if exited++; exited == n {
					close(done)
					return
				}
			}
		}
	}()
	var failed atomic.Int64
	start := time.Now()
	each(n, func(i int) {
		dir := filepath.Join(root, strconv.Itoa(i+1), "1")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Error(err)
			return
		}
		l := executor.Launch{Ref: executor.Ref{JobID: int64(i + 1), Attempt: 1}, Project: "bench", Pool: "slurm",
			Argv: []string{"/bin/true"}, Resources: domain.Resources{CPUs: 1, Nodes: 1},
			Dir: dir, WorkDir: dir, LogPath: filepath.Join(dir, "output.log")}
		if err := ex.Launch(context.Background(), l); err != nil {
			failed.Add(1)
			b.Error(err)
		}
	})
	if failed.Load() > 0 {
		b.Fatalf("%d launches failed", failed.Load())
	}
	submitted := time.Since(start)
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		b.Fatal("timed out waiting for every attempt to exit")
	}
	d := time.Since(start)
	b.Logf("executor round %d: launched in %v, all exited in %v", round, submitted.Round(time.Millisecond), d.Round(time.Millisecond))
	waitGone(b, c, prefix+"-", false)
	return d
}

// waitGone waits until squeue lists no job of this user whose name is
// name (exact) or starts with it, pending, running or completing.
func waitGone(b *testing.B, c *slurmtest.Cluster, name string, exact bool) {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		out, err := c.Command(context.Background(), "squeue", "--noheader", "--me", "--states=PD,R,CG,CF,S", "--format=%j").Output()
		if err != nil {
			b.Fatalf("squeue: %v", err)
		}
		left := 0
		for j := range strings.FieldsSeq(string(out)) {
			if j == name || !exact && strings.HasPrefix(j, name) {
				left++
			}
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d jobs named %s still in Slurm after 10m", left, name)
		}
		time.Sleep(benchPoll)
	}
}

// each runs f(0) … f(n-1) from benchClients goroutines.
func each(n int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range benchClients {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		})
	}
	wg.Wait()
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// commandCount counts Slurm commands by name.
type commandCount struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *commandCount) add(name string, _ []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[name]++
}

func (c *commandCount) get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

func (c *commandCount) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := 0
	for _, v := range c.n {
		t += v
	}
	return t
}

func (c *commandCount) per(jobs float64) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for k, v := range c.n {
		parts = append(parts, fmt.Sprintf("%s %.3f", k, float64(v)/jobs))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}
