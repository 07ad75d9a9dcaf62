package control_test

import (
	"context"
	"slices"
	"strings"
	"sync"
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

// An attempt's end is decided on the job as stored when the end comes: a
// cancel or preemption requested an instant before (here by another
// replica, which the loop has not heard of) decides it, not the job as
// the loop last saw it.
func TestEndDecidesOnRequestsJustBefore(t *testing.T) {
	cancel := store.Change{In: []domain.JobState{domain.JobRunning}, RequestCancel: true, SetReason: true,
		Reason: domain.ReasonCanceledByUser, Message: "cancel requested; canceled by bob: enough"}
	preempt := store.Change{In: []domain.JobState{domain.JobRunning}, RequestPreempt: true, SetReason: true,
		Reason: domain.ReasonPreempted, Message: "preempted for job 99"}
	stopped := executor.Event{Kind: executor.Exited, State: domain.AttemptCanceled, Reason: domain.ReasonPreempted, Message: "stopped: preempted for job 99"}
	tests := map[string]struct {
		request  store.Change
		end      executor.Event
		state    domain.JobState // the job's state after the end
		attempt  domain.AttemptState
		reason   domain.Reason
		message  string
		preempts int
	}{
		"cancel, then the attempt fails": {request: cancel, end: exited(domain.AttemptFailed, domain.ReasonExitCode, 1),
			state: domain.JobCanceled, attempt: domain.AttemptFailed, reason: domain.ReasonCanceledByUser, message: "canceled by bob: enough"},
		"cancel, then the node is lost": {request: cancel, end: executor.Event{Kind: executor.Lost},
			state: domain.JobCanceled, attempt: domain.AttemptLost, reason: domain.ReasonCanceledByUser, message: "canceled by bob: enough"},
		"cancel, then the attempt succeeds": {request: cancel, end: exited(domain.AttemptSucceeded, domain.ReasonCompleted, 0),
			state: domain.JobSucceeded, attempt: domain.AttemptSucceeded, reason: domain.ReasonCompleted, message: "attempt 1 succeeded"},
		"preempt, then the attempt stops": {request: preempt, end: stopped,
			state: domain.JobQueued, attempt: domain.AttemptPreempted, reason: domain.ReasonPreempted, preempts: 1,
			message: "attempt 1 preempted (preempted for job 99); queued again to resume from its latest checkpoint"},
		"preempt, then the attempt fails": {request: preempt, end: exited(domain.AttemptFailed, domain.ReasonExitCode, 1),
			state: domain.JobQueued, attempt: domain.AttemptPreempted, reason: domain.ReasonPreempted, preempts: 1,
			message: "attempt 1 preempted (preempted for job 99); queued again to resume from its latest checkpoint"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := quietRig(t, nil)
			ctx := context.Background()
			// Retries left: an end decided on a stale job would requeue a failure.
			j := r.submit("name: r\nentrypoint: [x]\npolicy: {retries: 3, reentrant: true}\n")
			r.wait(j.ID, domain.JobRunning)
			ch := tc.request
			ch.JobID, ch.At = j.ID, time.Now().UTC()
			if errs, err := r.st.Apply(ctx, []store.Change{ch}); err != nil || errs[0] != nil {
				t.Fatalf("request: %v %v", err, errs)
			}
			end := tc.end
			end.Ref, end.At = executor.Ref{JobID: j.ID, Attempt: 1}, time.Now().UTC()
			r.ex.Emit(end)
			poll(t, "attempt 1 ends", func() bool { return r.attempts(j.ID)[0].State.Terminal() })
			if a := r.attempts(j.ID)[0]; a.State != tc.attempt {
				t.Errorf("attempt 1 is %s (%s: %s), want %s", a.State, a.Reason, a.Message, tc.attempt)
			}
			evs, err := r.st.ListEvents(ctx, j.ID)
			if err != nil {
				t.Fatal(err)
			}
			last := evs[len(evs)-1]
			for _, e := range evs {
				if e.From == domain.JobRunning {
					last = e // the end's own transition (a requeued job starts again)
				}
			}
			if last.To != tc.state || last.Reason != tc.reason || !strings.HasPrefix(last.Message, tc.message) {
				t.Errorf("the end moved the job to %s (%s: %q), want %s (%s: %q)", last.To, last.Reason, last.Message, tc.state, tc.reason, tc.message)
			}
			if got, _ := r.st.GetJob(ctx, j.ID); got.Preemptions != tc.preempts {
				t.Errorf("preemptions = %d, want %d", got.Preemptions, tc.preempts)
			}
		})
	}
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

// endObserver records what the loop says of attempt ends.
type endObserver struct {
	mu    sync.Mutex
	jobs  []domain.Job
	atts  []domain.Attempt
	limit []int64
}

func (o *endObserver) Pass(time.Duration)                                   {}
func (o *endObserver) View(control.View)                                    {}
func (o *endObserver) Placed(string, string, int, time.Duration)            {}
func (o *endObserver) PreemptionHeld(domain.Job, domain.PreemptionHold)     {}
func (o *endObserver) PreemptionReleased(int64)                             {}
func (o *endObserver) GrantsExpiring([]domain.GrantNotice)                  {}
func (o *endObserver) LogLimited(j domain.Job, _ int, _ int64, _ time.Time) {}

func (o *endObserver) AttemptEnded(j domain.Job, a domain.Attempt) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.jobs, o.atts = append(o.jobs, j), append(o.atts, a)
}

func (o *endObserver) seen() ([]domain.Job, []domain.Attempt) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.jobs), slices.Clone(o.atts)
}

// The Observer hears of each attempt end with the job as the end left it.
func TestObserverSeesTheJobAfterEachEnd(t *testing.T) {
	fails := true
	var mu sync.Mutex
	ex := &executortest.Fake{Script: func(executor.Launch) []executor.Event {
		mu.Lock()
		defer mu.Unlock()
		if fails {
			fails = false
			return []executor.Event{{Kind: executor.Started, PID: 1}, exited(domain.AttemptFailed, domain.ReasonExitCode, 2)}
		}
		return []executor.Event{{Kind: executor.Started, PID: 1}, exited(domain.AttemptSucceeded, domain.ReasonCompleted, 0)}
	}}
	obs := &endObserver{}
	r := newTunedRig(t, ex, func(cfg *control.Config) { cfg.Observer = obs })
	j := r.submit("name: twice\nentrypoint: [x]\npolicy: {retries: 1, reentrant: true}\n")
	stored := r.wait(j.ID, domain.JobSucceeded)
	poll(t, "two ends observed", func() bool { jobs, _ := obs.seen(); return len(jobs) == 2 })
	jobs, atts := obs.seen()
	want := []struct {
		state    domain.JobState
		reason   domain.Reason
		attempt  domain.AttemptState
		attempts int
	}{
		{domain.JobQueued, domain.ReasonRetrying, domain.AttemptFailed, 1},
		{domain.JobSucceeded, domain.ReasonCompleted, domain.AttemptSucceeded, 2},
	}
	for i, w := range want {
		got := jobs[i]
		if got.ID != j.ID || got.Name != "twice" || got.Project != stored.Project || got.Pool != stored.Pool || got.Submitter != stored.Submitter {
			t.Errorf("end %d: job %d %q of %s/%s by %s; want job %d \"twice\" of %s/%s by %s", i+1, got.ID, got.Name,
				got.Project, got.Pool, got.Submitter, j.ID, stored.Project, stored.Pool, stored.Submitter)
		}
		if got.State != w.state || got.Reason != w.reason || got.Attempts != w.attempts || got.CancelRequested {
			t.Errorf("end %d: job %s (%s), %d attempts, cancel %v; want %s (%s), %d attempts", i+1, got.State, got.Reason,
				got.Attempts, got.CancelRequested, w.state, w.reason, w.attempts)
		}
		if atts[i].Number != i+1 || atts[i].State != w.attempt {
			t.Errorf("end %d: attempt %d %s, want %d %s", i+1, atts[i].Number, atts[i].State, i+1, w.attempt)
		}
	}
	if got := jobs[1]; got.Message != stored.Message || got.FinishedAt.IsZero() {
		t.Errorf("final end: message %q, finished %v; stored %q", got.Message, got.FinishedAt, stored.Message)
	}
}
