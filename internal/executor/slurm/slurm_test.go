package slurm_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/executor/local"
	"trainyard/internal/executor/slurm"
	"trainyard/internal/executor/slurm/slurmtest"
	"trainyard/internal/logs"
)

// shimEnv makes the test binary act as the supervisor: the batch step of
// every job runs os.Args[0], so no separate build is needed.
const shimEnv = "TRAINYARD_TEST_SHIM"

func TestMain(m *testing.M) {
	if os.Getenv(shimEnv) == "1" {
		os.Exit(local.ShimMain(os.Args[1:]))
	}
	slurmtest.Main(m)
}

// world is the shared cluster and where attempts keep their logs and
// outcomes (the cluster's shared filesystem: this machine's).
type world struct {
	c    *slurmtest.Cluster
	runs logs.Layout
}

func newWorld(t *testing.T) *world {
	t.Helper()
	return &world{c: slurmtest.Shared(t), runs: logs.Layout{Root: t.TempDir()}}
}

// twoNodes is the shared cluster of two nodes, for multi-node attempts.
var twoNodes = slurmtest.Options{Nodes: 2}

// newWorldOf is newWorld on the shared cluster with opts.
func newWorldOf(t *testing.T, opts slurmtest.Options) *world {
	t.Helper()
	return &world{c: slurmtest.SharedWith(t, opts), runs: logs.Layout{Root: t.TempDir()}}
}

// layoutExec keeps attempts where the control loop does (the runs
// directory's layout, which Config.Files reads) under the directories
// the harness chose: the harness's attempt directory is a link to the
// layout's, so that the attempt sees the paths it was launched with.
type layoutExec struct {
	*slurm.Executor
	runs logs.Layout
}

func (e layoutExec) Launch(ctx context.Context, l executor.Launch) error {
	real := e.runs.AttemptDir(l.JobID, l.Attempt)
	if err := os.MkdirAll(real, 0o755); err != nil {
		return err
	}
	if _, err := os.Lstat(l.Dir); os.IsNotExist(err) {
		if err := os.MkdirAll(filepath.Dir(l.Dir), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(real, l.Dir); err != nil {
			return err
		}
	}
	if l.LogPath != filepath.Join(l.Dir, "output.log") {
		l.LogPath = e.runs.LogPath(l.JobID, l.Attempt)
	}
	return e.Executor.Launch(ctx, l)
}

// exec is a new executor on the cluster, closed when the test ends.
func (w *world) exec(t *testing.T) layoutExec {
	t.Helper()
	return w.execWith(t, nil)
}

// execWith is exec, with hook told every Slurm command the executor runs.
func (w *world) execWith(t *testing.T, hook func(name string, args []string)) layoutExec {
	t.Helper()
	self, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ex, err := slurm.New(ctx, slurm.WithCommandHook(slurm.Config{
		// Race-enabled programs sleep a second at exit by default.
		ShimCommand:  []string{"/usr/bin/env", shimEnv + "=1", "GORACE=atexit_sleep_ms=0", "GOMAXPROCS=1", self},
		Env:          []string{"SLURM_CONF=" + w.c.Conf},
		PollInterval: 200 * time.Millisecond,
		KillAfter:    5 * time.Second,
		Files:        local.NewReader(w.runs.Root),
	}, hook))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ex.Close() })
	return layoutExec{Executor: ex, runs: w.runs}
}

func checkExit(t *testing.T, ev executor.Event, state domain.AttemptState, reason domain.Reason, code *int) {
	t.Helper()
	if ev.State != state || ev.Reason != reason {
		t.Errorf("exited %s/%s (%q), want %s/%s", ev.State, ev.Reason, ev.Message, state, reason)
	}
	switch {
	case code == nil && ev.ExitCode != nil:
		t.Errorf("exit code %d, want none", *ev.ExitCode)
	case code != nil && (ev.ExitCode == nil || *ev.ExitCode != *code):
		t.Errorf("exit code %v, want %d (%q)", ev.ExitCode, *code, ev.Message)
	}
}

func intp(n int) *int { return &n }

// TestExitCode: a job's output reaches its log and its exit code its
// Exited event, after Started.
func TestExitCode(t *testing.T) {
	w := newWorld(t)
	h := executortest.NewHarness(t, w.exec(t))
	t0 := time.Now()
	l := h.Launch(t, []string{"sh", "-c", "echo hi; exit 3"}, nil)
	started := h.Wait(t, l.Ref, executor.Started)
	if started.PID <= 0 {
		t.Errorf("Started.PID = %d", started.PID)
	}
	checkExit(t, h.Wait(t, l.Ref, executor.Exited), domain.AttemptFailed, domain.ReasonExitCode, intp(3))
	t.Logf("launch to Exited: %v", time.Since(t0))
	if got := h.LogLines(t, l.Ref, executor.LogQuery{}); !slices.Equal(got, []string{"hi"}) {
		t.Errorf("log %q, want hi", got)
	}
}

// TestLaunchRecordGone: the launch record, which holds the job's
// secrets, is gone before the job starts; the job still gets them.
func TestLaunchRecordGone(t *testing.T) {
	w := newWorld(t)
	h := executortest.NewHarness(t, w.exec(t))
	l := h.Launch(t, nil, func(l *executor.Launch) {
		l.Env = append(l.Env, "TEST_SECRET=s3cret")
		l.Argv = []string{"sh", "-c", `if [ -e "$1" ]; then echo "the launch record is there"; exit 3; fi; echo "secret=$TEST_SECRET"`,
			"sh", filepath.Join(l.Dir, "launch.json")}
	})
	checkExit(t, h.Wait(t, l.Ref, executor.Exited), domain.AttemptSucceeded, domain.ReasonCompleted, intp(0))
	if got := h.LogLines(t, l.Ref, executor.LogQuery{}); !slices.Equal(got, []string{"secret=s3cret"}) {
		t.Errorf("log %q, want the secret as the job saw it", got)
	}
}

// TestStop: a stop ends a running job through its supervisor, which
// records the stop's reason; the job's handler of SIGTERM runs.
func TestStop(t *testing.T) {
	w := newWorld(t)
	h := executortest.NewHarness(t, w.exec(t))
	l := h.Launch(t, []string{"sh", "-c", `trap 'echo bye; exit 0' TERM; echo up; while :; do sleep 0.1; done`}, nil)
	h.WaitLine(t, l.Ref, "up")
	if err := h.Exec.Stop(context.Background(), l.Ref, executor.StopRequest{Grace: 30 * time.Second, Message: "canceled by alice"}); err != nil {
		t.Fatal(err)
	}
	ev := h.Wait(t, l.Ref, executor.Exited)
	checkExit(t, ev, domain.AttemptCanceled, domain.ReasonCanceledByUser, intp(0))
	if !strings.Contains(ev.Message, "alice") {
		t.Errorf("message %q does not say who", ev.Message)
	}
	if got := h.LogLines(t, l.Ref, executor.LogQuery{}); !slices.Contains(got, "bye") {
		t.Errorf("log %q lacks the job's goodbye", got)
	}
}

// TestStopPending: a job Slurm cannot place yet is cancelled in the
// queue; it never starts, and says why it waited.
func TestStopPending(t *testing.T) {
	w := newWorld(t)
	ex := w.exec(t)
	h := executortest.NewHarness(t, ex)
	l := h.Launch(t, []string{"sleep", "600"}, func(l *executor.Launch) {
		l.Resources = domain.Resources{CPUs: float64(w.c.CPUs + 1)} // more than the node has
	})
	deadline := time.Now().Add(executortest.WaitTimeout)
	for ex.Waiting(l.Ref) == "" {
		if time.Now().After(deadline) {
			t.Fatal("the job never said why it waits")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("waiting: %s", ex.Waiting(l.Ref))
	if err := ex.Stop(context.Background(), l.Ref, executor.StopRequest{Reason: domain.ReasonPreempted}); err != nil {
		t.Fatal(err)
	}
	checkExit(t, h.Wait(t, l.Ref, executor.Exited), domain.AttemptCanceled, domain.ReasonPreempted, nil)
	if evs := h.Events(l.Ref); len(evs) != 1 {
		t.Errorf("events %+v, want Exited only", evs)
	}
}

// TestTimeout: an attempt past its timeout ends timed out.
func TestTimeout(t *testing.T) {
	w := newWorld(t)
	h := executortest.NewHarness(t, w.exec(t))
	l := h.Launch(t, []string{"sleep", "600"}, func(l *executor.Launch) {
		l.Timeout, l.Grace = 2*time.Second, time.Second
	})
	checkExit(t, h.Wait(t, l.Ref, executor.Exited), domain.AttemptTimedOut, domain.ReasonTimeout, nil)
}

// TestInventory: the node with its CPUs, memory and GPUs.
func TestInventory(t *testing.T) {
	w := newWorld(t)
	inv, err := w.exec(t).Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Nodes) != 1 {
		t.Fatalf("inventory %+v, want one node", inv)
	}
	n := inv.Nodes[0]
	if n.Name != w.c.Node || n.CPUs != float64(w.c.CPUs) || n.Memory != domain.ByteSize(w.c.MemoryMiB)<<20 || len(n.GPUs) != w.c.GPUs {
		t.Errorf("node %+v, want %s with %d CPUs, %d MiB, %d GPUs", n, w.c.Node, w.c.CPUs, w.c.MemoryMiB, w.c.GPUs)
	}
}

// TestRestart is a server restart: the first executor goes away while
// two attempts run; one of them ends while no executor watches, and the
// other's record of its Slurm job id is gone (found by name instead). A
// fresh executor, launched with the same attempts, reports the one that
// ended with its outcome and whole log, and still follows and stops the
// other.
func TestRestart(t *testing.T) {
	w := newWorld(t)
	ex1 := w.exec(t)
	h1 := executortest.NewHarness(t, ex1)
	gate := filepath.Join(t.TempDir(), "gate")
	ending := h1.Launch(t, []string{"/bin/sh", "-c", `echo before; while [ ! -e "$GATE" ]; do sleep 0.05; done; echo after; exit 4`},
		func(l *executor.Launch) { l.Env = append(l.Env, "GATE="+gate) })
	running := h1.Launch(t, []string{"/bin/sh", "-c", `trap 'echo bye; exit 0' TERM; echo up; while :; do sleep 0.1; done`}, nil)
	h1.WaitLine(t, ending.Ref, "before")
	h1.WaitLine(t, running.Ref, "up")
	_ = ex1.Close()

	if err := os.Remove(filepath.Join(running.Dir, "slurm-job")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(executortest.WaitTimeout)
	for {
		if _, _, ok, _ := local.Outcome(ending.Dir); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the ending attempt recorded no outcome")
		}
		time.Sleep(50 * time.Millisecond)
	}

	ex2 := w.exec(t)
	h2 := executortest.NewHarness(t, ex2)
	for _, l := range []executor.Launch{ending, running} {
		if err := ex2.Launch(context.Background(), l); err != nil {
			t.Fatal(err)
		}
	}
	h2.Wait(t, ending.Ref, executor.Started)
	checkExit(t, h2.Wait(t, ending.Ref, executor.Exited), domain.AttemptFailed, domain.ReasonExitCode, intp(4))
	if got := h2.LogLines(t, ending.Ref, executor.LogQuery{}); !slices.Equal(got, []string{"before", "after"}) {
		t.Errorf("the log of the attempt that ended unwatched is %q, want before and after", got)
	}
	h2.Wait(t, running.Ref, executor.Started)
	if err := ex2.Stop(context.Background(), running.Ref, executor.StopRequest{Grace: time.Minute}); err != nil {
		t.Fatal(err)
	}
	checkExit(t, h2.Wait(t, running.Ref, executor.Exited), domain.AttemptCanceled, domain.ReasonCanceledByUser, intp(0))
	// (The shell may add a line of its own about its sleep's end.)
	if got := h2.LogLines(t, running.Ref, executor.LogQuery{}); len(got) < 2 || got[0] != "up" || !slices.Contains(got, "bye") {
		t.Errorf("the log of the stopped attempt is %q, want up, then bye", got)
	}
	var kinds []executor.EventKind
	for _, ev := range h2.Events(running.Ref) {
		kinds = append(kinds, ev.Kind)
	}
	if !slices.Equal(kinds, []executor.EventKind{executor.Started, executor.OutputsSealed, executor.Exited}) {
		t.Errorf("the running attempt's events are %v, want started, outputs and exited, once each", kinds)
	}
}

// TestCancelledOutsideRunning: a running job cancelled in Slurm
// (scancel, not Trainyard) ends its attempt canceled, saying so, though
// its supervisor only saw SIGTERM.
func TestCancelledOutsideRunning(t *testing.T) {
	w := newWorld(t)
	h := executortest.NewHarness(t, w.exec(t))
	l := h.Launch(t, []string{"/bin/sh", "-c", `echo up; while :; do sleep 0.1; done`}, nil)
	h.WaitLine(t, l.Ref, "up")
	id, err := os.ReadFile(filepath.Join(l.Dir, "slurm-job"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := w.c.Command(ctx, "scancel", strings.TrimSpace(string(id))).CombinedOutput(); err != nil {
		t.Fatalf("scancel: %v: %s", err, out)
	}
	ev := h.Wait(t, l.Ref, executor.Exited)
	if ev.State != domain.AttemptCanceled || ev.Reason != domain.ReasonCanceledByUser || !strings.Contains(ev.Message, "outside Trainyard") {
		t.Errorf("exited %s/%s %q, want canceled by someone outside Trainyard", ev.State, ev.Reason, ev.Message)
	}
	t.Logf("message: %s", ev.Message)
}

// cancelledOutside launches a job Slurm never places and cancels it
// with scancel, as someone outside Trainyard would; it returns the
// launch and the Slurm job's id.
func (w *world) cancelledOutside(t *testing.T, h *executortest.Harness) (executor.Launch, string) {
	t.Helper()
	l := h.Launch(t, []string{"sleep", "600"}, func(l *executor.Launch) {
		l.Resources = domain.Resources{CPUs: float64(w.c.CPUs + 1)} // never placed
	})
	b, err := os.ReadFile(filepath.Join(l.Dir, "slurm-job"))
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(string(b))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := w.c.Command(ctx, "scancel", id).CombinedOutput(); err != nil {
		t.Fatalf("scancel: %v: %s", err, out)
	}
	return l, id
}

// TestCancelledOutside: a job cancelled in Slurm before it started
// (scancel, not Trainyard) ends its attempt canceled, saying so.
func TestCancelledOutside(t *testing.T) {
	w := newWorld(t)
	ex := w.exec(t)
	h := executortest.NewHarness(t, ex)
	l, _ := w.cancelledOutside(t, h)
	ev := h.Wait(t, l.Ref, executor.Exited)
	checkExit(t, ev, domain.AttemptCanceled, domain.ReasonCanceledByUser, nil)
	if !strings.Contains(ev.Message, "outside Trainyard") {
		t.Errorf("message %q does not say who cancelled it", ev.Message)
	}
	// Its outcome is recorded: a relaunch reports it again.
	n := len(h.Events(l.Ref))
	if err := ex.Launch(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	checkExit(t, h.WaitFrom(t, l.Ref, executor.Exited, n), domain.AttemptCanceled, domain.ReasonCanceledByUser, nil)
}

// TestPollsAskForActiveJobs: once the executor runs, its polls ask Slurm
// only for jobs that have not ended, while every job succeeds; a job that
// leaves that list without an outcome recorded is asked about by its id
// alone, and its end (scancel, outside Trainyard) is still found.
func TestPollsAskForActiveJobs(t *testing.T) {
	w := newWorld(t)
	var mu sync.Mutex
	var queries [][]string
	ex := w.execWith(t, func(name string, args []string) {
		if name == "squeue" {
			mu.Lock()
			queries = append(queries, slices.Clone(args))
			mu.Unlock()
		}
	})
	since := func(from int) [][]string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(queries[from:])
	}
	h := executortest.NewHarness(t, ex)
	first := len(since(0))
	l := h.Launch(t, []string{"true"}, nil)
	checkExit(t, h.Wait(t, l.Ref, executor.Exited), domain.AttemptSucceeded, domain.ReasonCompleted, intp(0))
	polls := since(first)
	if len(polls) == 0 {
		t.Fatal("no squeue between the launch and the job's end")
	}
	for _, q := range polls {
		if slices.Contains(q, "--states=all") {
			t.Errorf("squeue %q asks for ended jobs, though no job ended without its outcome", q)
		}
	}

	from := len(since(0))
	l, id := w.cancelledOutside(t, h)
	checkExit(t, h.Wait(t, l.Ref, executor.Exited), domain.AttemptCanceled, domain.ReasonCanceledByUser, nil)
	want := "--jobs=" + id
	asked := false
	for _, q := range since(from) {
		asked = asked || slices.Contains(q, want) && slices.Contains(q, "--states=all")
	}
	if !asked {
		t.Errorf("no squeue %s --states=all: %q", want, since(from))
	}
}

// TestStrays: a job whose attempt no executor follows is a stray, and
// Release cancels it.
func TestStrays(t *testing.T) {
	w := newWorld(t)
	ex1 := w.exec(t)
	h1 := executortest.NewHarness(t, ex1)
	l := h1.Launch(t, []string{"sleep", "600"}, nil)
	h1.Wait(t, l.Ref, executor.Started)
	_ = ex1.Close()

	ex2 := w.exec(t)
	if got := ex2.Strays(time.Hour); slices.Contains(got, l.Ref) {
		t.Errorf("Strays(1h) = %v: the job is younger than that", got)
	}
	// Slurm's submission times are whole seconds.
	deadline := time.Now().Add(executortest.WaitTimeout)
	for !slices.Contains(ex2.Strays(0), l.Ref) {
		if time.Now().After(deadline) {
			t.Fatalf("Strays(0) = %v, want %v among them", ex2.Strays(0), l.Ref)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := ex2.Release(context.Background(), l.Ref); err != nil {
		t.Fatal(err)
	}
	for slices.Contains(ex2.Strays(0), l.Ref) {
		if time.Now().After(deadline) {
			t.Fatalf("the stray's job is still there after Release")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Idempotent, and no error for an attempt that never ran.
	for _, ref := range []executor.Ref{l.Ref, {JobID: 999_999, Attempt: 1}} {
		if err := ex2.Release(context.Background(), ref); err != nil {
			t.Errorf("Release(%s) again: %v", ref, err)
		}
	}
}

// TestLaunchRejected: a job Slurm refuses (more memory than any node
// has) fails its launch with Slurm's words, and leaves no launch record
// (it holds secrets) behind.
func TestLaunchRejected(t *testing.T) {
	w := newWorld(t)
	ex := w.exec(t)
	dir := filepath.Join(t.TempDir(), "attempt")
	l := executor.Launch{Ref: executor.Ref{JobID: 77, Attempt: 1}, Argv: []string{"true"}, Env: []string{"PATH=/usr/bin:/bin"},
		Dir: dir, WorkDir: filepath.Join(dir, "work"), LogPath: filepath.Join(dir, "output.log"),
		Resources: domain.Resources{CPUs: 1, Memory: domain.ByteSize(w.c.MemoryMiB+1) << 20}}
	err := ex.Launch(context.Background(), l)
	if err == nil || !strings.Contains(err.Error(), "sbatch") {
		t.Fatalf("Launch = %v, want sbatch's refusal", err)
	}
	t.Logf("launch error: %v", err)
	if _, err := os.Stat(filepath.Join(dir, "launch.json")); !os.IsNotExist(err) {
		t.Errorf("the launch record is still there (%v)", err)
	}
}

// TestGPUs: an attempt gets the GPUs Slurm allocated to its job
// (CUDA_VISIBLE_DEVICES as Slurm sets it in the batch step), not its
// placement's indices: two attempts both placed on GPU 0 run on two
// different GPUs.
func TestGPUs(t *testing.T) {
	w := newWorld(t)
	if !w.c.GPUDevices {
		t.Skip("the test cluster's GPUs are a count, not devices (device files cannot be made here): Slurm names none")
	}
	h := executortest.NewHarness(t, w.exec(t))
	onGPU0 := func(l *executor.Launch) {
		l.Resources = domain.Resources{CPUs: 1, GPUs: 1}
		l.Placement = executor.Local(w.c.Node, []int{0})
	}
	script := []string{"/bin/sh", "-c", `echo "gpus=$CUDA_VISIBLE_DEVICES"; trap 'exit 0' TERM; while :; do sleep 0.1; done`}
	a := h.Launch(t, script, onGPU0)
	b := h.Launch(t, script, onGPU0)
	gpusOf := func(l executor.Launch) string {
		h.Wait(t, l.Ref, executor.Started) // its log exists
		deadline := time.Now().Add(executortest.WaitTimeout)
		for {
			for _, line := range h.LogLines(t, l.Ref, executor.LogQuery{}) {
				if v, ok := strings.CutPrefix(line, "gpus="); ok {
					return v
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("attempt %s printed no gpus= line", l.Ref)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	ga, gb := gpusOf(a), gpusOf(b)
	if ga == "" || gb == "" || ga == gb {
		t.Errorf("CUDA_VISIBLE_DEVICES %q and %q, want one GPU each, different ones (Slurm's allocation)", ga, gb)
	}
	for _, l := range []executor.Launch{a, b} {
		if err := h.Exec.Stop(context.Background(), l.Ref, executor.StopRequest{}); err != nil {
			t.Fatal(err)
		}
		h.Wait(t, l.Ref, executor.Exited)
	}
}

// TestSlurmTimeLimit: a job that Slurm ends at its time limit ends its
// attempt timed out, though its supervisor only saw SIGTERM. Slurm's
// limits are whole minutes, checked about every 30 s: the test takes
// 60 to 90 s, mostly waiting, so it runs in parallel (beside the other
// parallel tests) and not with -short.
func TestSlurmTimeLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("waits a minute or more for Slurm's time limit")
	}
	t.Parallel()
	w := newWorld(t)
	h := executortest.NewHarness(t, w.exec(t))
	l := h.Launch(t, []string{"/bin/sh", "-c", `echo up; while :; do sleep 0.1; done`}, func(l *executor.Launch) {
		l.Timeout = time.Hour // the supervisor's own limit stays far off
	})
	h.WaitLine(t, l.Ref, "up")
	id, err := os.ReadFile(filepath.Join(l.Dir, "slurm-job"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The shortest limit there is: a minute from its start.
	if out, err := w.c.Command(ctx, "scontrol", "update", "JobId="+strings.TrimSpace(string(id)), "TimeLimit=1").CombinedOutput(); err != nil {
		t.Fatalf("scontrol update: %v: %s", err, out)
	}
	deadline := time.Now().Add(2 * time.Minute) // beyond the suite's WaitTimeout: the check's period, KillWait, load
	for {
		evs := h.Events(l.Ref)
		if i := slices.IndexFunc(evs, func(ev executor.Event) bool { return ev.Kind == executor.Exited }); i >= 0 {
			checkExit(t, evs[i], domain.AttemptTimedOut, domain.ReasonTimeout, nil)
			t.Logf("message: %s", evs[i].Message)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Exited within 2 minutes of cutting the job's time limit; events %+v", evs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
