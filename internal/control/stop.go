package control

import (
	"strings"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
)

// applyStopPolicy copies how the job wants to be stopped into its launch:
// the warning before the timeout and who gets the signals. (Its grace
// period is in the launch already, capped at the server's MaxGrace.)
func applyStopPolicy(l *executor.Launch, spec domain.Spec) {
	if w := spec.Policy.Warn; w != nil {
		l.Warn = executor.Warn{Signal: w.Signal, Before: w.Before.D()}
	}
	l.StopSignalTo = spec.Policy.StopSignalTo
}

// cancelRequest is the stop request for a job whose cancellation was
// requested: its message names who canceled it ("canceled by alice: not
// needed", from service.Cancel).
func cancelRequest(j domain.Job) executor.StopRequest {
	if j.Reason == domain.ReasonEarlyStopped { // earlystop.go
		return executor.StopRequest{Reason: domain.ReasonEarlyStopped, Message: j.Message}
	}
	msg := strings.TrimPrefix(j.Message, "cancel requested; ")
	if j.Reason != domain.ReasonCanceledByUser || msg == j.Message {
		msg = "" // the job's message has moved on; the reason says enough
	}
	return executor.StopRequest{Reason: domain.ReasonCanceledByUser, Message: msg}
}

// preemptRequest is the stop request for a job whose preemption was
// requested (by a pass, a budget or a lapsed grant): its message says why.
func preemptRequest(j domain.Job) executor.StopRequest {
	return executor.StopRequest{Reason: domain.ReasonPreempted, Message: j.Message}
}

// healthRequest is the stop request for an attempt that failed a health
// check. Its words are short: the attempt's message, recorded by ended,
// already starts with the check's own.
func healthRequest(reason domain.Reason) executor.StopRequest {
	msg := "health check failed (health.first_progress)"
	if reason == domain.ReasonStalled {
		msg = "stalled (health.stall)"
	}
	return executor.StopRequest{Reason: reason, Message: msg}
}
