package control_test

import (
	"context"
	"testing"
	"time"

	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
)

// The job's stop policy reaches its launch: its grace capped at the
// server's MaxGrace, its warning and who gets the signals; a job without
// one gets the server's grace.
func TestLaunchCarriesTheStopPolicy(t *testing.T) {
	ex := &executortest.Fake{}
	r := newTunedRig(t, ex, func(c *control.Config) { c.Grace, c.MaxGrace = 3*time.Second, 2*time.Minute })
	a := r.submit("name: a\nentrypoint: [x]\npolicy: {timeout: 1h, grace: 1h, warn: {signal: USR1, before: 5m}, stop_signal_to: main}\n")
	r.wait(a.ID, domain.JobSucceeded)
	b := r.submit("name: b\nentrypoint: [x]\n")
	r.wait(b.ID, domain.JobSucceeded)
	ls := ex.Launches()
	if len(ls) != 2 {
		t.Fatalf("%d launches, want 2", len(ls))
	}
	if l := ls[0]; l.Grace != 2*time.Minute || l.Warn != (executor.Warn{Signal: "USR1", Before: 5 * time.Minute}) || l.StopSignalTo != domain.StopMain {
		t.Errorf("launch of a: grace %s, warn %+v, stop_signal_to %q; want 2m (capped), USR1 5m before, main", l.Grace, l.Warn, l.StopSignalTo)
	}
	if l := ls[1]; l.Grace != 3*time.Second || l.Warn != (executor.Warn{}) || l.StopSignalTo != "" {
		t.Errorf("launch of b: grace %s, warn %+v, stop_signal_to %q; want the server's 3s and nothing else", l.Grace, l.Warn, l.StopSignalTo)
	}
}

// A cancellation's stop request says who canceled and why.
func TestCancelStopRequestNamesWho(t *testing.T) {
	ex := &executortest.Fake{Script: func(l executor.Launch) []executor.Event {
		return []executor.Event{{Kind: executor.Started, PID: 1}}
	}}
	r := newRig(t, ex)
	j := r.submit("name: long\nentrypoint: [x]\n")
	r.wait(j.ID, domain.JobRunning)
	if _, err := r.svc.Jobs.Cancel(context.Background(), admin, j.ID, "enough"); err != nil {
		t.Fatal(err)
	}
	r.wait(j.ID, domain.JobCanceled)
	reqs := ex.StopRequests()
	want := executor.StopRequest{Reason: domain.ReasonCanceledByUser, Message: "canceled by admin: enough"}
	if len(reqs) != 1 || reqs[0] != want {
		t.Errorf("stop requests %+v, want [%+v]", reqs, want)
	}
	if a := r.attempts(j.ID); len(a) != 1 || a[0].Reason != domain.ReasonCanceledByUser || a[0].Message != "stopped: canceled by admin: enough" {
		t.Errorf("attempts %+v, want one canceled by admin", a)
	}
}
