package local

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
)

// TestSpareShim: once an attempt started, a spare shim waits for the next
// launch, which it supervises like a shim started for it (its claim, its
// log in the attempt's shim.log); Close ends the spare left over.
func TestSpareShim(t *testing.T) {
	e := newExecWith(t, perAttempt)
	h := executortest.NewHarness(t, e)
	first := h.Launch(t, shell("true"), nil)
	if ev := h.Wait(t, first.Ref, executor.Exited); ev.State != domain.AttemptSucceeded {
		t.Fatalf("first attempt ended %s: %s", ev.State, ev.Message)
	}
	spare := waitSpare(t, e)

	second := h.Launch(t, shell("echo from-the-spare"), nil)
	if ev := h.Wait(t, second.Ref, executor.Exited); ev.State != domain.AttemptSucceeded {
		t.Fatalf("second attempt ended %s: %s", ev.State, ev.Message)
	}
	if got := shimID(t, second).PID; got != spare {
		t.Errorf("the second attempt's shim is pid %d, want the spare, pid %d", got, spare)
	}
	if out := stdout(t, second); !strings.Contains(out, "from-the-spare") {
		t.Errorf("the second attempt's output: %q", out)
	}
	if _, err := os.Stat(filepath.Join(second.Dir, shimLogFile)); err != nil {
		t.Errorf("the spare did not open the attempt's shim log: %v", err)
	}

	left := waitSpare(t, e) // started once the second attempt had
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(executortest.WaitTimeout)
	for syscall.Kill(left, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the spare shim (pid %d) still runs after Close", left)
		}
		time.Sleep(10 * time.Millisecond) // polling the process table
	}
}

// perAttempt gives every attempt a shim of its own: spares are such shims.
func perAttempt(c *Config) { c.Supervisor = SupervisorPerAttempt }

// waitSpare waits until e has a spare shim and returns its pid.
func waitSpare(t *testing.T, e *Executor) int {
	t.Helper()
	deadline := time.Now().Add(executortest.WaitTimeout)
	for {
		e.spareMu.Lock()
		sp := e.spare
		e.spareMu.Unlock()
		if sp != nil {
			return sp.cmd.Process.Pid
		}
		if time.Now().After(deadline) {
			t.Fatal("no spare shim after an attempt started")
		}
		time.Sleep(10 * time.Millisecond) // polling the executor
	}
}

// TestNoSpareWithMountNamespace: a shim that needs a mount namespace of its
// own is never kept in advance (its copy of the host's mounts would go
// stale), and a spare without one is not handed to such a launch.
func TestNoSpareWithMountNamespace(t *testing.T) {
	e := newExecWith(t, perAttempt)
	e.refill(true)
	e.spareMu.Lock()
	sp := e.spare
	e.spareMu.Unlock()
	if sp != nil {
		t.Fatalf("refill after a launch in a mount namespace kept spare pid %d", sp.cmd.Process.Pid)
	}
	e.refill(false)
	spare := waitSpare(t, e)
	got, err := e.shim(true)
	if err != nil {
		t.Fatal(err)
	}
	defer got.retire()
	if got.cmd.Process.Pid == spare {
		t.Errorf("a launch wanting a mount namespace took the spare, pid %d", spare)
	}
	if left := waitSpare(t, e); left != spare {
		t.Errorf("the spare is pid %d, want it kept, pid %d", left, spare)
	}
}
