package local

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
)

// footprintShims is how many attempts BenchmarkShimFootprint runs at once.
const footprintShims = 200

// BenchmarkShimFootprint measures what the attempt supervisor costs while
// its job runs: it starts footprintShims attempts of `sleep` through the
// executor, one after the other, and once all run reads each shim's
// memory (/proc/PID/smaps_rollup) and the CPU time it has used so far
// (/proc/PID/task/*/schedstat: its start, since a shim whose job sleeps
// does nothing). The shim is cmd/trainyard-shim, built for the benchmark;
// TRAINYARD_BENCH_SHIM (a command, e.g. "/usr/local/bin/trainyard shim")
// measures another one.
//
// Reported: pss-MiB-total (all supervisor processes together; pages of
// the binary they share count once), pss-KiB and rss-KiB per supervisor
// process (median), start-cpu-ms per attempt (median and p90), threads
// per supervisor process (median), server-cpu-ms (the CPU time the
// executor's own process spent per launch, median), and, as the floors
// under any start, the CPU time of running /bin/true (exec-true-cpu-ms)
// and an empty Go program built as the shim is (exec-go-cpu-ms).
//
// With a supervisor per attempt (TRAINYARD_TEST_SUPERVISOR=per-attempt),
// an attempt's start CPU is all its shim used. Under the shared
// supervisor (the default), it is what the supervisor used from before
// the launch until the next one (the first, which starts the supervisor,
// is left out and reported as supervisor-start-cpu-ms), and
// start-cpu-mean-ms is all it used for the 199 others over 199, threads
// that ended included.
func BenchmarkShimFootprint(b *testing.B) {
	shimCmd := strings.Fields(os.Getenv("TRAINYARD_BENCH_SHIM"))
	if len(shimCmd) == 0 {
		bin := filepath.Join(b.TempDir(), ShimBinary)
		out, err := exec.Command("go", "build", "-o", bin, "trainyard/cmd/trainyard-shim").CombinedOutput()
		if err != nil {
			b.Fatalf("build %s: %v\n%s", ShimBinary, err, out)
		}
		shimCmd = []string{bin}
	}
	e, err := New(testConfig(shimCmd...))
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	root := b.TempDir()
	var pssTotal, pss, rss, cpu, cpuMean, supStart, threads, server []float64
	for b.Loop() {
		launches := make(map[executor.Ref]executor.Launch, footprintShims)
		defer stopAll(e, launches) // when the benchmark fails half-way
		// One at a time, so that each start's CPU time is its own and not
		// that of 200 runtimes contending for the machine at once.
		sup, supTicks := 0, 0.0
		var supBefore float64
		for i := range footprintShims {
			l := benchLaunch(root, []string{"sleep", "600"})
			launches[l.Ref] = l
			if sup != 0 {
				supBefore = taskCPUMs(sup)
			}
			serverBefore := selfCPUMs()
			if err := e.Launch(context.Background(), l); err != nil {
				b.Fatal(err)
			}
			waitAll(b, e, map[executor.Ref]executor.Launch{l.Ref: l}, executor.Started)
			server = append(server, selfCPUMs()-serverBefore)
			if !e.sharedMode {
				continue
			}
			if i == 0 {
				c, err := readClaim(l.Dir)
				if err != nil {
					b.Fatal(err)
				}
				sup = c.Shim.PID
				waitFile(b, filepath.Join(l.Dir, childPIDFile))
				supStart = append(supStart, taskCPUMs(sup))
				supTicks = statCPUMs(sup)
				continue
			}
			if i > 1 {
				cpu = append(cpu, taskCPUMs(sup)-supBefore)
			}
		}
		if sup != 0 {
			// The last launch's work after its start, then all of them.
			time.Sleep(100 * time.Millisecond)
			cpu = append(cpu, taskCPUMs(sup)-supBefore)
			cpuMean = append(cpuMean, (statCPUMs(sup)-supTicks)/float64(footprintShims-1))
		}
		var total float64
		seen := map[int]bool{}
		for _, l := range launches {
			c, err := readClaim(l.Dir)
			if err != nil {
				b.Fatal(err)
			}
			if seen[c.Shim.PID] {
				continue
			}
			seen[c.Shim.PID] = true
			f, err := readFootprint(c.Shim.PID)
			if err != nil {
				b.Fatal(err)
			}
			total += f.pssKiB
			pss = append(pss, f.pssKiB)
			rss = append(rss, f.rssKiB)
			if !e.sharedMode {
				cpu = append(cpu, f.cpuMs)
			}
			threads = append(threads, f.threads)
		}
		pssTotal = append(pssTotal, total/1024)
		for ref := range launches {
			if err := e.Stop(context.Background(), ref, executor.StopRequest{Grace: time.Second}); err != nil {
				b.Fatal(err)
			}
		}
		waitAll(b, e, launches, executor.Exited)
	}
	b.ReportMetric(quantile(pssTotal, 0.5), "pss-MiB-total")
	b.ReportMetric(quantile(pss, 0.5), "pss-KiB")
	b.ReportMetric(quantile(rss, 0.5), "rss-KiB")
	b.ReportMetric(quantile(cpu, 0.5), "start-cpu-ms")
	b.ReportMetric(quantile(cpu, 0.9), "start-cpu-p90-ms")
	b.ReportMetric(quantile(threads, 0.5), "threads")
	b.ReportMetric(quantile(server, 0.5), "server-cpu-ms")
	if len(cpuMean) > 0 {
		b.ReportMetric(quantile(cpuMean, 0.5), "start-cpu-mean-ms")
		b.ReportMetric(quantile(supStart, 0.5), "supervisor-start-cpu-ms")
	}
	b.ReportMetric(execCPU(b, "/bin/true"), "exec-true-cpu-ms")
	b.ReportMetric(execCPU(b, emptyGo(b)), "exec-go-cpu-ms")
}

// emptyGo builds a Go program that does nothing, as the benchmark builds
// the shim (go build, default settings), and returns its path.
func emptyGo(b *testing.B) string {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module empty\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", "empty", ".")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build an empty Go program: %v\n%s", err, out)
	}
	return filepath.Join(dir, "empty")
}

// execCPU is the CPU time (median of 50, in ms) that starting and running
// the program at path (which must do nothing) costs on this machine now.
func execCPU(b *testing.B, path string) float64 {
	var cpu []float64
	for range 50 {
		c := exec.Command(path)
		if err := c.Run(); err != nil {
			b.Fatal(err)
		}
		if ru, ok := c.ProcessState.SysUsage().(*syscall.Rusage); ok {
			cpu = append(cpu, float64(ru.Utime.Nano()+ru.Stime.Nano())/1e6)
		}
	}
	return quantile(cpu, 0.5)
}

// TestShimRuntime: a shim of its own runs on one processor, the shared
// supervisor on a few (GOMAXPROCS in its environment), and the job does
// not inherit that.
func TestShimRuntime(t *testing.T) {
	e := newExec(t)
	l := benchLaunch(t.TempDir(), []string{"sh", "-c", "echo \"gomaxprocs=$GOMAXPROCS\"; exec sleep 600"})
	launches := map[executor.Ref]executor.Launch{l.Ref: l}
	if err := e.Launch(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	defer stopAll(e, launches) // when the test fails half-way
	waitAll(t, e, launches, executor.Started)
	c, err := readClaim(l.Dir)
	if err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile("/proc/" + strconv.Itoa(c.Shim.PID) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	want := "GOMAXPROCS=1"
	if e.sharedMode {
		want = "GOMAXPROCS=" + strconv.Itoa(min(runtime.NumCPU(), sharedProcs))
	}
	if vars := strings.Split(string(env), "\x00"); !slices.Contains(vars, want) {
		t.Errorf("supervisor environment has no %s: %q", want, vars)
	}
	if err := e.Stop(context.Background(), l.Ref, executor.StopRequest{Grace: time.Second}); err != nil {
		t.Fatal(err)
	}
	waitAll(t, e, launches, executor.Exited)
	out, err := os.ReadFile(l.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "gomaxprocs=") {
		t.Fatalf("job output missing: %s", out)
	}
	if strings.Contains(string(out), "gomaxprocs=1") {
		t.Errorf("the job inherited the shim's GOMAXPROCS: %s", out)
	}
}

// stopAll stops every attempt of launches that is still running, so that
// none of their `sleep`s outlives a failed run.
func stopAll(e *Executor, launches map[executor.Ref]executor.Launch) {
	for ref := range launches {
		_ = e.Stop(context.Background(), ref, executor.StopRequest{Grace: time.Second})
	}
}

// waitAll waits for an event of kind for every attempt of launches.
func waitAll(b testing.TB, e *Executor, launches map[executor.Ref]executor.Launch, kind executor.EventKind) {
	b.Helper()
	seen := make(map[executor.Ref]bool, len(launches))
	timeout := time.After(5 * time.Minute)
	for len(seen) < len(launches) {
		select {
		case ev := <-e.Events():
			if _, ok := launches[ev.Ref]; !ok {
				continue
			}
			if ev.Kind == executor.Lost || (ev.Kind == executor.Exited && kind != executor.Exited) {
				b.Fatalf("attempt %s: %s %s %s", ev.Ref, ev.Kind, ev.State, ev.Message)
			}
			if ev.Kind == kind {
				seen[ev.Ref] = true
			}
		case <-timeout:
			b.Fatalf("%d of %d attempts reached %s within 5 minutes", len(seen), len(launches), kind)
		}
	}
}

type footprint struct {
	pssKiB, rssKiB float64
	cpuMs          float64 // CPU time used, all threads
	threads        float64
}

// readFootprint reads a process's memory and CPU time from /proc.
func readFootprint(pid int) (footprint, error) {
	var f footprint
	dir := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(dir + "/smaps_rollup")
	if err != nil {
		return f, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		v, _ := strconv.ParseFloat(fields[1], 64)
		switch fields[0] {
		case "Pss:":
			f.pssKiB = v
		case "Rss:":
			f.rssKiB = v
		}
	}
	tasks, err := filepath.Glob(dir + "/task/*/schedstat")
	if err != nil {
		return f, err
	}
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // a thread that just ended
		}
		ns, _ := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
		f.cpuMs += ns / 1e6
	}
	f.threads = float64(len(tasks))
	return f, nil
}

// taskCPUMs is the CPU time pid's live threads used, in ms.
func taskCPUMs(pid int) float64 {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/schedstat")
	var ms float64
	for _, t := range tasks {
		if b, err := os.ReadFile(t); err == nil {
			ns, _ := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
			ms += ns / 1e6
		}
	}
	return ms
}

// statCPUMs is the CPU time pid used (utime + stime, threads that ended
// included), in ms, at the resolution of clock ticks (10 ms).
func statCPUMs(pid int) float64 {
	d, _ := executortest.ProcessCPU(pid)
	return float64(d.Microseconds()) / 1000
}

// selfCPUMs is the CPU time this process used, in ms.
func selfCPUMs() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e6
}

// waitFile waits for path to exist.
func waitFile(b testing.TB, path string) {
	deadline := time.Now().Add(executortest.WaitTimeout)
	for !exists(path) {
		if time.Now().After(deadline) {
			b.Fatalf("no %s within %s", path, executortest.WaitTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

func quantile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(int(float64(len(s))*p), len(s)-1)]
}
