package executortest

import (
	"context"
	"errors"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
)

func TestFakeDefaultScript(t *testing.T) {
	f := &Fake{}
	h := NewHarness(t, f)
	l := h.Launch(t, []string{"true"}, nil)
	if ev := h.Wait(t, l.Ref, executor.Started); ev.PID <= 0 {
		t.Errorf("Started.PID = %d, want > 0", ev.PID)
	}
	checkExit(t, h.Wait(t, l.Ref, executor.Exited), domain.AttemptSucceeded, domain.ReasonCompleted, intPtr(0))
	if err := f.Stop(context.Background(), l.Ref, executor.StopRequest{Grace: time.Second}); err != nil {
		t.Errorf("Stop after exit: %v", err)
	}
	if got := len(f.Stops()); got != 1 {
		t.Errorf("Stops recorded = %d, want 1", got)
	}
}

func TestFakeStopRunning(t *testing.T) {
	f := &Fake{Script: func(l executor.Launch) []executor.Event {
		return []executor.Event{{Kind: executor.Started, PID: 7}}
	}}
	h := NewHarness(t, f)
	l := h.Launch(t, []string{"sleep", "300"}, nil)
	h.Wait(t, l.Ref, executor.Started)
	if err := f.Stop(context.Background(), l.Ref, executor.StopRequest{Grace: time.Second}); err != nil {
		t.Fatal(err)
	}
	ev := h.Wait(t, l.Ref, executor.Exited)
	if ev.State != domain.AttemptCanceled || ev.Reason != domain.ReasonCanceledByUser {
		t.Errorf("got %s/%s, want canceled/CanceledByUser", ev.State, ev.Reason)
	}
}

func TestFakeLaunchIdempotent(t *testing.T) {
	runs := 0
	f := &Fake{Script: func(l executor.Launch) []executor.Event {
		runs++
		return defaultScript(l)
	}}
	h := NewHarness(t, f)
	l := h.Launch(t, []string{"true"}, nil)
	h.Wait(t, l.Ref, executor.Exited)
	if err := f.Launch(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	// The relaunch reports Started and Exited again without running anew.
	h.WaitFrom(t, l.Ref, executor.Exited, 2)
	if runs != 1 {
		t.Errorf("script ran %d times, want 1", runs)
	}
	if got := len(f.Launches()); got != 2 {
		t.Errorf("Launches recorded = %d, want 2", got)
	}
}

func TestFakeFuncFields(t *testing.T) {
	boom := errors.New("boom")
	f := &Fake{
		LaunchFunc:    func(context.Context, executor.Launch) error { return boom },
		InventoryFunc: func(context.Context) (executor.Inventory, error) { return executor.Inventory{}, boom },
	}
	if err := f.Launch(context.Background(), executor.Launch{}); !errors.Is(err, boom) {
		t.Errorf("Launch = %v, want boom", err)
	}
	if _, err := f.Inventory(context.Background()); !errors.Is(err, boom) {
		t.Errorf("Inventory = %v, want boom", err)
	}
}

// TestFakeExercise: the Fake passes the conformance suite, playing
// Programs in memory, as a multi-node executor.
func TestFakeExercise(t *testing.T) {
	Exercise(t, func(t *testing.T) executor.Executor {
		f := &Fake{Caps: executor.Capabilities{MultiNode: true}}
		return f
	}, Options{})
}
