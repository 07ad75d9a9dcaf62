// Package executortest holds the conformance suite every executor that runs
// shell commands passes (Exercise), and Fake, a scripted executor for
// control-loop tests.
//
// The suite runs real processes through the executor under test: /bin/sh,
// true, env and sleep must be on PATH. It checks outcomes through the
// executor's events, the attempt's log file (package logs) and files the jobs
// write into their working directories.
package executortest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/logs"
)

// WaitTimeout bounds every wait for an event in the suite. Generous: the
// suite runs under the race detector on small, busy machines.
var WaitTimeout = 30 * time.Second

// Exercise runs the conformance suite. newExec returns a fresh executor for
// one subtest (subtests run in parallel); it should register its own cleanup
// with t.Cleanup.
func Exercise(t *testing.T, newExec func(t *testing.T) executor.Executor) {
	t.Run("Succeeds", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, newExec(t))
		l := h.Launch(t, []string{"true"}, nil)
		started := h.Wait(t, l.Ref, executor.Started)
		if started.PID <= 0 {
			t.Errorf("Started.PID = %d, want > 0", started.PID)
		}
		ev := h.Wait(t, l.Ref, executor.Exited)
		checkExit(t, ev, domain.AttemptSucceeded, domain.ReasonCompleted, intPtr(0))
		if evs := h.Events(l.Ref); evs[0].Kind != executor.Started {
			t.Errorf("first event is %s, want started", evs[0].Kind)
		}
	})

	t.Run("ExitCode", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, newExec(t))
		l := h.Launch(t, []string{"/bin/sh", "-c", "exit 3"}, nil)
		ev := h.Wait(t, l.Ref, executor.Exited)
		checkExit(t, ev, domain.AttemptFailed, domain.ReasonExitCode, intPtr(3))
		if !strings.Contains(ev.Message, "3") {
			t.Errorf("message %q does not mention the exit code 3", ev.Message)
		}
	})

	t.Run("KilledBySignal", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, newExec(t))
		l := h.Launch(t, []string{"/bin/sh", "-c", "kill -KILL $$"}, nil)
		ev := h.Wait(t, l.Ref, executor.Exited)
		checkExit(t, ev, domain.AttemptFailed, domain.ReasonExitCode, nil)
		if !strings.Contains(ev.Message, "SIGKILL") {
			t.Errorf("message %q does not name the signal SIGKILL", ev.Message)
		}
	})

	t.Run("EntrypointNotFound", func(t *testing.T) {
		t.Parallel()
		cases := map[string]struct {
			argv []string
			want string // in the message
		}{
			"name searched in PATH": {argv: []string{"trainyard-no-such-program", "--epochs", "3"}, want: "trainyard-no-such-program"},
			"absolute path":         {argv: []string{"/nonexistent/trainyard-train"}, want: "/nonexistent/trainyard-train"},
			"shell command":         {argv: []string{"/bin/sh", "-c", "trainyard-no-such-program --epochs 3"}, want: "trainyard-no-such-program"},
		}
		for name, tc := range cases {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				h := NewHarness(t, newExec(t))
				l := h.Launch(t, tc.argv, nil)
				ev := h.Wait(t, l.Ref, executor.Exited)
				if ev.State != domain.AttemptFailed || ev.Reason != domain.ReasonEntrypointNotFound {
					t.Errorf("got %s/%s (%q), want failed/EntrypointNotFound", ev.State, ev.Reason, ev.Message)
				}
				if !strings.Contains(ev.Message, tc.want) {
					t.Errorf("message %q does not name %q", ev.Message, tc.want)
				}
			})
		}
	})

	t.Run("TimeoutKillsTree", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, newExec(t))
		// Both the shell and its background grandchild ignore SIGTERM, so
		// only the SIGKILL after the grace period ends them.
		l := h.Launch(t, []string{"/bin/sh", "-c", `trap "" TERM; sleep 300 & echo $! > bg.pid; echo $$ > sh.pid; wait`}, func(l *executor.Launch) {
			l.Timeout = 1500 * time.Millisecond
			l.Grace = 300 * time.Millisecond
		})
		ev := h.Wait(t, l.Ref, executor.Exited)
		checkExit(t, ev, domain.AttemptTimedOut, domain.ReasonTimeout, nil)
		CheckGone(t, l.WorkDir, "sh.pid", "bg.pid")
	})

	t.Run("Stop", func(t *testing.T) {
		t.Parallel()
		cases := map[string]struct {
			trap  string
			grace time.Duration
		}{
			"process ends on SIGTERM": {trap: "", grace: time.Minute},
			"process ignores SIGTERM": {trap: `trap "" TERM; `, grace: 200 * time.Millisecond},
		}
		for name, tc := range cases {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				h := NewHarness(t, newExec(t))
				l := h.Launch(t, []string{"/bin/sh", "-c", tc.trap + `sleep 300 & echo $! > bg.pid; echo $$ > sh.pid; wait`}, nil)
				h.Wait(t, l.Ref, executor.Started)
				WaitFiles(t, l.WorkDir, "sh.pid", "bg.pid")
				if err := h.Exec.Stop(context.Background(), l.Ref, executor.StopRequest{Grace: tc.grace}); err != nil {
					t.Fatalf("Stop: %v", err)
				}
				ev := h.Wait(t, l.Ref, executor.Exited)
				if ev.State != domain.AttemptCanceled || ev.Reason != domain.ReasonCanceledByUser {
					t.Errorf("got %s/%s (%q), want canceled/CanceledByUser", ev.State, ev.Reason, ev.Message)
				}
				CheckGone(t, l.WorkDir, "sh.pid", "bg.pid")
			})
		}
	})

	t.Run("StopEnded", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, newExec(t))
		l := h.Launch(t, []string{"true"}, nil)
		h.Wait(t, l.Ref, executor.Exited)
		if err := h.Exec.Stop(context.Background(), l.Ref, executor.StopRequest{Grace: time.Second}); err != nil {
			t.Errorf("Stop after exit: %v, want nil", err)
		}
	})

	t.Run("LaunchTwiceRunsOnce", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, newExec(t))
		l := h.Launch(t, []string{"/bin/sh", "-c", "echo run >> count"}, nil)
		if err := h.Exec.Launch(context.Background(), l); err != nil {
			t.Fatalf("second Launch: %v", err)
		}
		h.Wait(t, l.Ref, executor.Exited)
		n := len(h.Events(l.Ref))
		// Launching an attempt that has exited reports its outcome again.
		if err := h.Exec.Launch(context.Background(), l); err != nil {
			t.Fatalf("Launch after exit: %v", err)
		}
		ev := h.WaitFrom(t, l.Ref, executor.Exited, n)
		checkExit(t, ev, domain.AttemptSucceeded, domain.ReasonCompleted, intPtr(0))
		b, err := os.ReadFile(filepath.Join(l.WorkDir, "count"))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(string(b), "run\n"); got != 1 {
			t.Errorf("the job ran %d times, want 1", got)
		}
	})

	t.Run("Log", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, newExec(t))
		l := h.Launch(t, []string{"/bin/sh", "-c", `echo out1; echo err1 >&2; echo "out 2"; echo err2 >&2; printf partial`}, nil)
		h.Wait(t, l.Ref, executor.Exited)
		lines := ReadLog(t, l.LogPath)
		if len(lines) < 2 || lines[0].Stream != logs.System || lines[len(lines)-1].Stream != logs.System {
			t.Fatalf("log must start and end with a system line; got %q", lines)
		}
		got := map[string][]string{}
		for i, ln := range lines {
			got[ln.Stream] = append(got[ln.Stream], ln.Text)
			if i > 0 && ln.Time.Before(lines[i-1].Time) {
				t.Errorf("line %d time %s is before line %d's %s", i+1, ln.Time, i, lines[i-1].Time)
			}
		}
		want := map[string][]string{logs.Stdout: {"out1", "out 2", "partial"}, logs.Stderr: {"err1", "err2"}}
		for stream, w := range want {
			if !slices.Equal(got[stream], w) {
				t.Errorf("%s lines = %q, want %q", stream, got[stream], w)
			}
		}
		for stream := range got {
			if stream != logs.Stdout && stream != logs.Stderr && stream != logs.System {
				t.Errorf("unknown stream %q in log", stream)
			}
		}
	})

	t.Run("EnvironmentExact", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, newExec(t))
		env := []string{"PATH=" + testPath(), "TRAINYARD_JOB_ID=42", "WITH_SPACE=a b  c", "EMPTY=", "QUOTE='\"x\"'", "USER=someone"}
		l := h.Launch(t, []string{"env"}, func(l *executor.Launch) { l.Env = env })
		ev := h.Wait(t, l.Ref, executor.Exited)
		checkExit(t, ev, domain.AttemptSucceeded, domain.ReasonCompleted, intPtr(0))
		// Exactly Env, plus the attempt's own HOME and TMPDIR and the name
		// of the user it runs as where Env does not set them, plus the
		// device and rank environment of its placement (none: no GPUs, a
		// single process).
		var got []string
		added := map[string]string{}
		rank := map[string]string{"CUDA_VISIBLE_DEVICES": "", "WORLD_SIZE": "1", "RANK": "0", "NODE_RANK": "0",
			"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "", "MASTER_PORT": ""}
		for _, ln := range ReadLog(t, l.LogPath) {
			if ln.Stream != logs.Stdout {
				continue
			}
			k, v, _ := strings.Cut(ln.Text, "=")
			if _, ok := rank[k]; ok {
				added[k] = v
				continue
			}
			switch k {
			case "HOME", "TMPDIR", "LOGNAME":
				added[k] = v
				continue
			}
			got = append(got, ln.Text)
		}
		for k, want := range rank {
			if v, ok := added[k]; !ok || (want != "" && v != want) || (k != "CUDA_VISIBLE_DEVICES" && v == "") {
				t.Errorf("%s=%q (set: %v), want %q", k, v, ok, want)
			}
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(env))
		if !slices.Equal(got, want) {
			t.Errorf("environment = %q, want exactly %q", got, want)
		}
		for _, k := range []string{"HOME", "TMPDIR"} {
			if !strings.HasPrefix(added[k], l.Dir+"/") {
				t.Errorf("%s = %q, want a directory of the attempt's own, under %s", k, added[k], l.Dir)
			}
		}
		if added["LOGNAME"] == "" {
			t.Error("LOGNAME is not set")
		}
	})

	t.Run("WorkDir", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, newExec(t))
		l := h.Launch(t, []string{"/bin/sh", "-c", "pwd -P > where"}, func(l *executor.Launch) {
			// The executor creates a missing work dir.
			if _, err := os.Stat(l.WorkDir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("precondition: work dir should not exist yet (err=%v)", err)
			}
		})
		ev := h.Wait(t, l.Ref, executor.Exited)
		checkExit(t, ev, domain.AttemptSucceeded, domain.ReasonCompleted, intPtr(0))
		b, err := os.ReadFile(filepath.Join(l.WorkDir, "where"))
		if err != nil {
			t.Fatalf("the job did not run in its work dir: %v", err)
		}
		want, _ := filepath.EvalSymlinks(l.WorkDir)
		if got := strings.TrimSpace(string(b)); got != want {
			t.Errorf("job ran in %q, want %q", got, want)
		}
	})

	t.Run("Inventory", func(t *testing.T) {
		t.Parallel()
		inv, err := newExec(t).Inventory(context.Background())
		if err != nil {
			t.Fatalf("Inventory: %v", err)
		}
		if len(inv.Nodes) == 0 {
			t.Fatal("Inventory has no nodes")
		}
		for _, n := range inv.Nodes {
			if n.Name == "" || n.CPUs <= 0 || n.Memory <= 0 {
				t.Errorf("node %+v: want a name, CPUs and memory", n)
			}
		}
	})
}

func intPtr(i int) *int { return &i }

func fmtCode(p *int) string {
	if p == nil {
		return "nil"
	}
	return strconv.Itoa(*p)
}

func checkExit(t *testing.T, ev executor.Event, state domain.AttemptState, reason domain.Reason, code *int) {
	t.Helper()
	if ev.State != state || ev.Reason != reason {
		t.Errorf("got %s/%s (%q), want %s/%s", ev.State, ev.Reason, ev.Message, state, reason)
	}
	if (code == nil) != (ev.ExitCode == nil) || (code != nil && *code != *ev.ExitCode) {
		t.Errorf("exit code = %s, want %s (message %q)", fmtCode(ev.ExitCode), fmtCode(code), ev.Message)
	}
	if ev.Message == "" {
		t.Error("Exited event has no message")
	}
}

var nextJob atomic.Int64

func testPath() string {
	if p := os.Getenv("PATH"); p != "" {
		return p
	}
	return "/usr/local/bin:/usr/bin:/bin"
}

// Harness collects one executor's events by attempt.
type Harness struct {
	Exec executor.Executor

	mu     sync.Mutex
	events map[executor.Ref][]executor.Event
	notify chan struct{} // closed and replaced on every event
}

// NewHarness starts collecting ex's events until the test ends.
func NewHarness(t testing.TB, ex executor.Executor) *Harness {
	h := &Harness{Exec: ex, events: map[executor.Ref][]executor.Event{}, notify: make(chan struct{})}
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		for {
			select {
			case ev, ok := <-ex.Events():
				if !ok {
					return
				}
				h.mu.Lock()
				h.events[ev.Ref] = append(h.events[ev.Ref], ev)
				close(h.notify)
				h.notify = make(chan struct{})
				h.mu.Unlock()
			case <-stop:
				return
			}
		}
	}()
	return h
}

// Launch launches argv as a new attempt in fresh directories under
// t.TempDir(); mod, when non-nil, adjusts the launch first.
func (h *Harness) Launch(t testing.TB, argv []string, mod func(*executor.Launch)) executor.Launch {
	t.Helper()
	root := t.TempDir()
	ref := executor.Ref{JobID: 1_000_000 + nextJob.Add(1), Attempt: 1}
	dir := filepath.Join(root, "attempt")
	l := executor.Launch{
		Ref:     ref,
		Argv:    argv,
		Env:     []string{"PATH=" + testPath(), "HOME=" + root, "LANG=C"},
		WorkDir: filepath.Join(root, "work"),
		Dir:     dir,
		LogPath: filepath.Join(dir, "output.log"),
		Grace:   5 * time.Second,
	}
	if mod != nil {
		mod(&l)
	}
	if err := h.Exec.Launch(context.Background(), l); err != nil {
		t.Fatalf("Launch %v: %v", argv, err)
	}
	return l
}

// Events returns the events of ref seen so far.
func (h *Harness) Events(ref executor.Ref) []executor.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events[ref])
}

// Wait returns the first event of kind for ref, waiting up to WaitTimeout.
func (h *Harness) Wait(t testing.TB, ref executor.Ref, kind executor.EventKind) executor.Event {
	t.Helper()
	return h.WaitFrom(t, ref, kind, 0)
}

// WaitFrom is Wait among the events of ref from index from on. An Exited or
// Lost event of another kind than the one awaited fails the test at once.
func (h *Harness) WaitFrom(t testing.TB, ref executor.Ref, kind executor.EventKind, from int) executor.Event {
	t.Helper()
	deadline := time.NewTimer(WaitTimeout)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		evs := h.events[ref]
		ch := h.notify
		h.mu.Unlock()
		for i := from; i < len(evs); i++ {
			if evs[i].Kind == kind {
				return evs[i]
			}
			if evs[i].Kind == executor.Exited || evs[i].Kind == executor.Lost {
				t.Fatalf("attempt %s: waiting for %s, got %s: %s %s: %s", ref, kind, evs[i].Kind, evs[i].State, evs[i].Reason, evs[i].Message)
			}
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("attempt %s: no %s event within %s; events so far: %+v", ref, kind, WaitTimeout, evs)
		}
	}
}

// ReadLog parses the attempt's log file; every line must be well formed.
func ReadLog(t testing.TB, path string) []logs.Line {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read log: %v", err)
	}
	var lines []logs.Line
	for i, raw := range strings.SplitAfter(string(b), "\n") {
		if raw == "" {
			continue
		}
		if !strings.HasSuffix(raw, "\n") {
			t.Errorf("log line %d has no newline: %q", i+1, raw)
		}
		ln := logs.ParseLine([]byte(raw))
		if ln.Stream == "" || ln.Time.IsZero() {
			t.Errorf("log line %d is malformed: %q", i+1, raw)
		}
		lines = append(lines, ln)
	}
	return lines
}

// WaitFiles waits until the named files exist in dir.
func WaitFiles(t testing.TB, dir string, names ...string) {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for _, name := range names {
		for {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err == nil && strings.HasSuffix(string(b), "\n") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not appear in %s within %s", name, dir, WaitTimeout)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// CheckGone fails the test unless every process whose pid is in one of the
// named files in dir has ended (zombies count as ended) within a few seconds:
// the time its parent or init needs to reap it.
func CheckGone(t testing.TB, dir string, names ...string) {
	t.Helper()
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("pid file: %v", err)
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			t.Errorf("pid file %s holds %q, not a pid", name, b)
			continue
		}
		deadline := time.Now().Add(5 * time.Second)
		for Running(pid) {
			if time.Now().After(deadline) {
				t.Errorf("process %d (%s) still runs after the attempt ended", pid, name)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// Running reports whether pid exists and is not a zombie.
func Running(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

// NeedRoot skips a test that runs jobs as other users (job isolation) when
// the tests do not run as root; under CI, which runs as root, it fails
// instead, so the isolation tests can never be skipped there unseen.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("job isolation tests need root, and CI runs as root: run them as root")
	}
	t.Skip("job isolation tests need root (jobs run as other users only when the server is root); run them as root to include them")
}
