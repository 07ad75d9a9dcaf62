package local

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"trainyard/internal/codepkg"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/executor/local/userdb"
)

// shimEnv makes the test binary act as the shim: the executor under test
// starts os.Args[0] as its supervisor, so no separate build is needed.
const shimEnv = "TRAINYARD_TEST_SHIM"

func TestMain(m *testing.M) {
	if os.Getenv(shimEnv) == "1" {
		if marker := os.Getenv(panicEnv); marker != "" {
			shimTestHook = func(s *shim) {
				if slices.Contains(s.rec.Argv, marker) {
					panic("a test's panic")
				}
			}
		}
		os.Exit(ShimMain(os.Args[1:]))
	}
	os.Setenv(shimEnv, "1")
	// Race-enabled programs sleep a second at exit by default; shims are
	// race-enabled test binaries under -race.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	code := m.Run()
	if code != 0 || testSupervisor != "" || benchmarking() {
		os.Exit(code)
	}
	// Every test again, with a supervisor process per attempt: the
	// executor's two ways must pass the same tests.
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, shimEnv+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, supervisorEnv+"="+SupervisorPerAttempt)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	fmt.Printf("=== the tests again, with %s=%s\n", supervisorEnv, SupervisorPerAttempt)
	if err := cmd.Run(); err != nil {
		fmt.Printf("with %s=%s: %v\n", supervisorEnv, SupervisorPerAttempt, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// supervisorEnv sets the supervisor mode of the tests' executors
// (Config.Supervisor); unset, the tests run with the default, then again
// with a supervisor per attempt.
const supervisorEnv = "TRAINYARD_TEST_SUPERVISOR"

var testSupervisor = os.Getenv(supervisorEnv)

// benchmarking reports whether the test binary was asked to run
// benchmarks, which run in the default mode only.
func benchmarking() bool {
	f := flag.Lookup("test.bench")
	return f != nil && f.Value.String() != ""
}

// testConfig is the configuration of a test's executor whose shim is
// shimCmd: this machine's users, and code packages unpacked as the server
// does with codepkg's default limits.
func testConfig(shimCmd ...string) Config {
	return Config{ShimCommand: shimCmd, PollInterval: 20 * time.Millisecond, Users: userdb.System{}, Supervisor: testSupervisor,
		Unpack: func(r io.Reader, dest string) error { return codepkg.Unpack(r, dest, codepkg.Limits{}) }}
}

func newExec(t testing.TB) *Executor {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(testConfig(self))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func TestExercise(t *testing.T) {
	executortest.Exercise(t, func(t *testing.T) executor.Executor { return newExec(t) }, executortest.Options{Processes: true})
}

// gate is a FIFO a job blocks on (read x < gate) until the test opens it.
type gate string

func newGate(t *testing.T) gate {
	p := filepath.Join(t.TempDir(), "gate")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	return gate(p)
}

// release lets the job blocked on the gate go on; it waits until the job
// reads.
func (g gate) release(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(executortest.WaitTimeout)
	for {
		// Without a reader, a non-blocking open for writing fails (ENXIO).
		f, err := os.OpenFile(string(g), os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			_, err = f.WriteString("go\n")
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no job read the gate within %s: %v", executortest.WaitTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func shell(cmd string) []string { return []string{"/bin/sh", "-c", cmd} }

func runCount(t *testing.T, l executor.Launch) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(l.WorkDir, "count"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "run\n")
}

func shimID(t *testing.T, l executor.Launch) procID {
	t.Helper()
	id, err := readProcID(filepath.Join(l.Dir, shimPIDFile))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestReattachRunning: the server dies (Close) while an attempt runs; a new
// executor's Launch reattaches and reports its end, and the job runs once.
func TestReattachRunning(t *testing.T) {
	g := newGate(t)
	a := newExec(t)
	ha := executortest.NewHarness(t, a)
	l := ha.Launch(t, shell(`echo run >> count; read x < `+string(g)+`; echo done`), nil)
	first := ha.Wait(t, l.Ref, executor.Started)
	a.Close()

	b := newExec(t)
	hb := executortest.NewHarness(t, b)
	if err := b.Launch(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	if got := hb.Wait(t, l.Ref, executor.Started); got.PID != first.PID {
		t.Errorf("reattached Started.PID = %d, want %d", got.PID, first.PID)
	}
	// Stop is routed to the reattached shim; here the job ends by itself.
	g.release(t)
	ev := hb.Wait(t, l.Ref, executor.Exited)
	if ev.State != domain.AttemptSucceeded || ev.ExitCode == nil || *ev.ExitCode != 0 {
		t.Errorf("got %+v, want succeeded with code 0", ev)
	}
	if n := runCount(t, l); n != 1 {
		t.Errorf("job ran %d times, want 1", n)
	}
	var sawDone bool
	for _, ln := range executortest.ReadLog(t, l.LogPath) {
		sawDone = sawDone || ln.Text == "done"
	}
	if !sawDone {
		t.Error("log lacks the output written after the server restart")
	}
}

// TestReattachFinishedUnwatched: the attempt ends while no server watches; a
// new executor reports Started and Exited with its exit code.
func TestReattachFinishedUnwatched(t *testing.T) {
	g := newGate(t)
	a := newExec(t)
	ha := executortest.NewHarness(t, a)
	l := ha.Launch(t, shell(`echo run >> count; read x < `+string(g)+`; exit 4`), nil)
	first := ha.Wait(t, l.Ref, executor.Started)
	a.Close()
	g.release(t)
	executortest.WaitFiles(t, l.Dir, exitFile)

	b := newExec(t)
	hb := executortest.NewHarness(t, b)
	if err := b.Launch(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	if got := hb.Wait(t, l.Ref, executor.Started); got.PID != first.PID {
		t.Errorf("Started.PID = %d, want %d", got.PID, first.PID)
	}
	ev := hb.Wait(t, l.Ref, executor.Exited)
	if ev.State != domain.AttemptFailed || ev.Reason != domain.ReasonExitCode || ev.ExitCode == nil || *ev.ExitCode != 4 {
		t.Errorf("got %+v, want failed/ExitCode with code 4", ev)
	}
	if n := runCount(t, l); n != 1 {
		t.Errorf("job ran %d times, want 1", n)
	}
}

// TestStopAfterReattach: Stop reaches a shim found through shim.pid.
func TestStopAfterReattach(t *testing.T) {
	a := newExec(t)
	ha := executortest.NewHarness(t, a)
	l := ha.Launch(t, shell(`sleep 300 & echo $! > bg.pid; echo $$ > sh.pid; wait`), nil)
	ha.Wait(t, l.Ref, executor.Started)
	a.Close()

	b := newExec(t)
	hb := executortest.NewHarness(t, b)
	if err := b.Launch(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	hb.Wait(t, l.Ref, executor.Started)
	executortest.WaitFiles(t, l.WorkDir, "bg.pid", "sh.pid")
	if err := b.Stop(context.Background(), l.Ref, executor.StopRequest{Grace: time.Second}); err != nil {
		t.Fatal(err)
	}
	ev := hb.Wait(t, l.Ref, executor.Exited)
	if ev.State != domain.AttemptCanceled {
		t.Errorf("got %+v, want canceled", ev)
	}
	executortest.CheckGone(t, l.WorkDir, "bg.pid", "sh.pid")
}

// TestStopRightAfterLaunch: a stop that races the shim's start-up still ends
// the attempt as canceled (before or after the process started).
func TestStopRightAfterLaunch(t *testing.T) {
	e := newExec(t)
	h := executortest.NewHarness(t, e)
	for i := 0; i < 5; i++ {
		l := h.Launch(t, shell(`sleep 300`), nil)
		if err := e.Stop(context.Background(), l.Ref, executor.StopRequest{Grace: time.Second}); err != nil {
			t.Fatal(err)
		}
		ev := h.Wait(t, l.Ref, executor.Exited)
		if ev.State != domain.AttemptCanceled || ev.Reason != domain.ReasonCanceledByUser {
			t.Errorf("got %s/%s (%q), want canceled/CanceledByUser", ev.State, ev.Reason, ev.Message)
		}
	}
}

func TestStopUnknownAttempt(t *testing.T) {
	err := newExec(t).Stop(context.Background(), executor.Ref{JobID: 1, Attempt: 1}, executor.StopRequest{Grace: time.Second})
	if !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("Stop of an unknown attempt = %v, want ErrNotFound", err)
	}
}

// TestConcurrentLaunchRunsOnce: two servers launching the same attempt at
// once start two shims; one claims the attempt and the other one's executor
// watches the winner.
func TestConcurrentLaunchRunsOnce(t *testing.T) {
	hs := []*executortest.Harness{executortest.NewHarness(t, newExec(t)), executortest.NewHarness(t, newExec(t))}
	root := t.TempDir()
	l := executor.Launch{
		Ref:  executor.Ref{JobID: 77, Attempt: 2},
		Argv: shell(`echo run >> count`), Env: []string{"PATH=/usr/bin:/bin"},
		Dir: filepath.Join(root, "a"), WorkDir: filepath.Join(root, "w"), LogPath: filepath.Join(root, "a", "output.log"),
	}
	var wg sync.WaitGroup
	for _, h := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.Exec.Launch(context.Background(), l); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, h := range hs {
		ev := h.Wait(t, l.Ref, executor.Exited)
		if ev.State != domain.AttemptSucceeded {
			t.Errorf("got %+v, want succeeded", ev)
		}
	}
	if n := runCount(t, l); n != 1 {
		t.Errorf("job ran %d times, want 1", n)
	}
}

// TestLost: a shim killed with SIGKILL (its process dies with it) leaves no
// exit record; the watching executor, or a later one, reports Lost.
func TestLost(t *testing.T) {
	for name, restart := range map[string]bool{"watched": false, "after restart": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := newGate(t)
			a := newExec(t)
			h := executortest.NewHarness(t, a)
			l := h.Launch(t, shell(`read x < `+string(g)), nil)
			started := h.Wait(t, l.Ref, executor.Started)
			id := shimID(t, l)
			if restart {
				a.Close()
			}
			_ = syscall.Kill(id.PID, syscall.SIGKILL)
			_ = syscall.Kill(-started.PID, syscall.SIGKILL)
			if restart {
				deadline := time.Now().Add(executortest.WaitTimeout)
				for executortest.Running(id.PID) && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				h = executortest.NewHarness(t, newExec(t))
				if err := h.Exec.Launch(context.Background(), l); err != nil {
					t.Fatal(err)
				}
			}
			ev := h.Wait(t, l.Ref, executor.Lost)
			if !strings.Contains(ev.Message, "without recording an outcome") {
				t.Errorf("Lost message %q does not say what happened", ev.Message)
			}
			if _, err := os.Stat(filepath.Join(l.Dir, exitFile)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("exit record exists after the shim was killed: %v", err)
			}
		})
	}
}

// TestOOMKilled: a process exceeding its memory limit fails with OOMKilled
// and the limit in the message; one within it succeeds. Both leave no cgroup
// behind.
func TestOOMKilled(t *testing.T) {
	e := newExec(t)
	parent, ok := e.LimitsEnforced()
	if !ok {
		msg := "no writable cgroup memory controller on this machine (see cgroup.Detect); memory limits are not enforced"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + "; CI machines must have one")
		}
		t.Skip(msg)
	}
	// The job writes its 256 MiB itself. A buffer the kernel fills (dd
	// reading /dev/zero) may instead come back short when the group is
	// full, and dd then exits 0 with a partial record.
	py := python(t)
	grow := "b = b'x' * (256 << 20)"
	cases := map[string]struct {
		argv   []string
		state  domain.AttemptState
		reason domain.Reason
	}{
		"exceeds the limit": {argv: []string{py, "-c", grow}, state: domain.AttemptFailed, reason: domain.ReasonOOMKilled},
		"under a shell":     {argv: shell(py + ` -c "` + grow + `"; exit $?`), state: domain.AttemptFailed, reason: domain.ReasonOOMKilled},
		"within the limit":  {argv: []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=8M", "count=4"}, state: domain.AttemptSucceeded, reason: domain.ReasonCompleted},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := executortest.NewHarness(t, newExec(t))
			l := h.Launch(t, tc.argv, func(l *executor.Launch) { l.Resources.Memory = 64 << 20 })
			ev := h.Wait(t, l.Ref, executor.Exited)
			if ev.State != tc.state || ev.Reason != tc.reason {
				log, _ := os.ReadFile(l.LogPath)
				t.Fatalf("got %s/%s (%q), want %s/%s; the job's log:\n%s", ev.State, ev.Reason, ev.Message, tc.state, tc.reason, log)
			}
			if tc.reason == domain.ReasonOOMKilled && !strings.Contains(ev.Message, "64MiB") {
				t.Errorf("message %q does not name the limit 64MiB", ev.Message)
			}
			own, _ := filepath.Glob(filepath.Join(parent, formatGroupPrefix(l.Ref)+"*"))
			if len(own) > 0 {
				t.Errorf("cgroup left behind: %v", own)
			}
		})
	}
}

func formatGroupPrefix(r executor.Ref) string {
	return strings.Replace(r.String(), "/", "-", 1) + "-"
}

func TestLaunchRejectsBadInput(t *testing.T) {
	e := newExec(t)
	cases := map[string]executor.Launch{
		"empty argv":       {Dir: "/tmp/x", WorkDir: "/tmp/x/w", LogPath: "/tmp/x/l"},
		"relative dir":     {Argv: []string{"true"}, Dir: "x", WorkDir: "/tmp/x/w", LogPath: "/tmp/x/l"},
		"missing log path": {Argv: []string{"true"}, Dir: "/tmp/x", WorkDir: "/tmp/x/w"},
	}
	for name, l := range cases {
		t.Run(name, func(t *testing.T) {
			if err := e.Launch(context.Background(), l); !errors.Is(err, domain.ErrInvalid) {
				t.Errorf("Launch = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestLaunchAfterClose(t *testing.T) {
	e := newExec(t)
	e.Close()
	root := t.TempDir()
	err := e.Launch(context.Background(), executor.Launch{Argv: []string{"true"}, Dir: root, WorkDir: root, LogPath: root + "/log"})
	if err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Launch after Close = %v, want an error saying the executor is closed", err)
	}
}
