package control_test

import (
	"context"
	"testing"
	"time"

	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/store"
)

// quietRig is a rig whose loop runs a cycle only when woken or when an
// attempt ends: what another replica writes meanwhile stays out of its
// view until then. Attempts start and run until an event ends them; a
// stop is recorded and does nothing.
func quietRig(t *testing.T, script func(executor.Launch) []executor.Event) *rig {
	t.Helper()
	if script == nil {
		script = func(executor.Launch) []executor.Event { return []executor.Event{{Kind: executor.Started, PID: 1}} }
	}
	ex := &executortest.Fake{Script: script,
		StopFunc: func(context.Context, executor.Ref, executor.StopRequest) error { return nil }}
	return newTunedRig(t, ex, func(cfg *control.Config) { cfg.Interval = time.Hour })
}

// A cancel the loop acted on while the attempt was starting, whose stop
// found nothing to stop yet, stops the attempt once it has started.
func TestCancelWhileStartingStopsOnceStarted(t *testing.T) {
	r := quietRig(t, func(executor.Launch) []executor.Event { return nil }) // starting until Started is emitted
	j := r.submit("name: s\nentrypoint: [x]\n")
	r.wait(j.ID, domain.JobStarting)
	poll(t, "the launch", func() bool { return len(r.ex.Launches()) == 1 })
	if _, err := r.svc.Jobs.Cancel(context.Background(), admin, j.ID, "enough"); err != nil {
		t.Fatal(err)
	}
	ref := executor.Ref{JobID: j.ID, Attempt: 1}
	poll(t, "the stop of the starting attempt", func() bool { return len(r.ex.Stops()) == 1 })
	r.ex.Emit(executor.Event{Ref: ref, Kind: executor.Started, PID: 1, At: time.Now().UTC()})
	poll(t, "a second stop once started", func() bool { return len(r.ex.Stops()) == 2 })
	if s := r.ex.Stops(); s[1] != ref {
		t.Errorf("stops = %v, want %v twice", s, ref)
	}
}

// A cancel another replica requests while the attempt starts, which the
// loop has not seen by then, stops it at the loop's next look at what
// changed.
func TestCancelByAnotherReplicaWhileStartingStops(t *testing.T) {
	ex := &executortest.Fake{Script: func(executor.Launch) []executor.Event { return nil }}
	r := newTunedRig(t, ex, func(cfg *control.Config) { cfg.Interval = 50 * time.Millisecond })
	j := r.submit("name: s\nentrypoint: [x]\n")
	r.wait(j.ID, domain.JobStarting)
	poll(t, "the launch", func() bool { return len(r.ex.Launches()) == 1 })
	ref := executor.Ref{JobID: j.ID, Attempt: 1}
	if errs, err := r.st.Apply(context.Background(), []store.Change{{JobID: j.ID, In: []domain.JobState{domain.JobStarting},
		RequestCancel: true, SetReason: true, Reason: domain.ReasonCanceledByUser, Message: "cancel requested; canceled by bob",
		At: time.Now().UTC()}}); err != nil || errs[0] != nil {
		t.Fatalf("request: %v %v", err, errs)
	}
	r.ex.Emit(executor.Event{Ref: ref, Kind: executor.Started, PID: 1, At: time.Now().UTC()})
	if final := r.wait(j.ID, domain.JobCanceled); final.Reason != domain.ReasonCanceledByUser {
		t.Errorf("canceled job: %s %q", final.Reason, final.Message)
	}
	if s := r.ex.Stops(); len(s) == 0 || s[len(s)-1] != ref {
		t.Errorf("stops = %v, want %v", s, ref)
	}
}

