package control_test

import (
	"context"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/store"
)

// A preemption requested while the attempt still starts survives its start:
// the attempt that then stops ends as preempted and the job is queued again
// to resume, rather than failed by the stop's signal, and the job still says
// why it was preempted.
func TestPreemptWhileStartingRequeues(t *testing.T) {
	ex := &executortest.Fake{Script: func(executor.Launch) []executor.Event { return nil }}
	r := newTunedRig(t, ex, nil)
	j := r.submit("name: s\nentrypoint: [x]\n")
	r.wait(j.ID, domain.JobStarting)
	poll(t, "the launch", func() bool { return len(r.ex.Launches()) == 1 })
	ref := executor.Ref{JobID: j.ID, Attempt: 1}
	if errs, err := r.st.Apply(context.Background(), []store.Change{{JobID: j.ID, In: []domain.JobState{domain.JobStarting, domain.JobRunning},
		RequestPreempt: true, SetReason: true, Reason: domain.ReasonPreempted, Message: "preempted for job 9",
		At: time.Now().UTC()}}); err != nil || errs[0] != nil {
		t.Fatalf("request: %v %v", err, errs)
	}
	r.ex.Emit(executor.Event{Ref: ref, Kind: executor.Started, PID: 1, At: time.Now().UTC()})
	running := r.wait(j.ID, domain.JobRunning)
	if !running.PreemptRequested || running.Reason != domain.ReasonPreempted || running.Message != "preempted for job 9" {
		t.Errorf("after the start: preempt requested %v, %s %q; want the request and its reason kept",
			running.PreemptRequested, running.Reason, running.Message)
	}
	// The view may have learned of the request before the start or not:
	// either way the started attempt is stopped for it.
	poll(t, "the stop for the preemption", func() bool {
		for _, q := range r.ex.StopRequests() {
			if q.Reason == domain.ReasonPreempted && q.Message == "preempted for job 9" {
				return true
			}
		}
		return false
	})
	code := 143
	r.ex.Emit(executor.Event{Ref: ref, Kind: executor.Exited, State: domain.AttemptFailed, Reason: domain.ReasonExitCode,
		ExitCode: &code, At: time.Now().UTC()})
	var final domain.Job
	poll(t, "the attempt's end", func() bool {
		final, _ = r.st.GetJob(context.Background(), j.ID)
		return final.Preemptions > 0 || final.State.Terminal()
	})
	if final.State.Terminal() || final.Preemptions != 1 {
		t.Errorf("after the stop: %s, %d preemptions, %s %q; want queued again as preempted", final.State, final.Preemptions, final.Reason, final.Message)
	}
	atts, err := r.st.ListAttempts(context.Background(), j.ID)
	if err != nil || len(atts) == 0 || atts[0].State != domain.AttemptPreempted {
		t.Errorf("attempts = %+v, %v; want the first preempted", atts, err)
	}
}
