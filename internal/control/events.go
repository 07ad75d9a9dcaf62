package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/store"
)

var (
	active    = []domain.JobState{domain.JobStarting, domain.JobRunning}
	activeAtt = []domain.AttemptState{domain.AttemptStarting, domain.AttemptRunning}
)

// handleEvents records a batch of executor events in one store transaction.
// An attempt's end is recorded only once its outputs are (recordThenEnd),
// so a job that is terminal has its manifest; launchFailure says the batch
// is an attempt that never ran, whose end is recorded at once. It reports
// whether it wrote a batch holding an attempt's end, after which the
// scheduler may have resources to hand out again: an end left to
// recordThenEnd is stored, and followed by a cycle, only once its outputs
// are read.
func (c *Controller) handleEvents(ctx context.Context, batch []executor.Event, launchFailure bool) (ended bool) {
	changes := make([]store.Change, 0, len(batch))
	var deferred []store.Change
	var progressed []executor.Ref
	var points []domain.MetricPoint
	var gpu gpuUse // the sampler's GPU use, read once for the batch's ends
	for _, ev := range batch {
		at := ev.At
		if at.IsZero() {
			at = c.cfg.Clock.Now()
		}
		switch ev.Kind {
		case executor.Started:
			resumed := c.resumed(ctx, ev) // records the checkpoint it was handed: checkpoints.go
			changes = append(changes, store.Change{
				JobID: ev.JobID, Move: domain.MoveRun(),
				Reason: domain.ReasonStarted, Message: fmt.Sprintf("attempt %d started (pid %d)%s%s", ev.Attempt, ev.PID, resumed, checkNote(ev)), // envs.go
				Actor: actorExecutor, At: at, Attempt: &store.AttemptChange{
					Number: ev.Attempt, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning},
			})
		case executor.Progress:
			points = append(points, ev.Points...)
			c.progressed(ev.Ref, at)
			if !slices.Contains(progressed, ev.Ref) {
				progressed = append(progressed, ev.Ref)
			}
		case executor.Checkpointed:
			c.checkpointed(ctx, ev) // checkpoints.go
		case executor.OutputsSealed:
			if ev.Outputs != nil {
				c.sealed[ev.Ref] = ev.Outputs // recorded with the attempt's end (artifacts.go)
			}
		case executor.LogLimited:
			c.logLimited(ctx, ev, at)
		case executor.Exited, executor.Lost:
			if c.finishing[ev.Ref] {
				continue // a repeated end: its outputs are being recorded
			}
			ch, err := c.ended(ctx, ev, at, &gpu)
			if err != nil {
				c.log.Error("record attempt end", "attempt", ev.Ref.String(), "err", err)
				continue
			}
			if !launchFailure && c.outputsFirst(ctx, ch) {
				deferred = append(deferred, ch) // recorded once the outputs are (artifacts.go)
				continue
			}
			delete(c.sealed, ev.Ref)
			changes = append(changes, ch)
			ended = true
		}
	}
	// Before the batch's ends, so that a job seen ended has its points.
	c.storePoints(ctx, points)
	for _, ref := range progressed {
		if at := c.progress[ref]; !at.IsZero() {
			if err := c.cfg.Store.RecordProgress(ctx, ref.JobID, ref.Attempt, at); err != nil {
				c.log.Warn("record progress", "attempt", ref.String(), "err", err)
			}
		}
	}
	if !c.apply(ctx, changes, true) {
		for _, ch := range changes { // not recorded: the executor reports the end again
			if ch.Attempt != nil && ch.Attempt.To.Terminal() {
				delete(c.endJobs, executor.Ref{JobID: ch.JobID, Attempt: ch.Attempt.Number})
			}
		}
		ended = false
	}
	// After the batch's Started changes, which the outputs' lineage reads.
	for _, ch := range deferred {
		c.recordThenEnd(ch)
	}
	return ended
}

// apply records executor-driven changes and does what follows an attempt's
// end: forget it, tell the Observer, record its outputs when owed (not yet
// recorded) and remove its code unpack. An attempt's end deletes its job
// token in the same write. It reports false when the store could not be
// written at all.
func (c *Controller) apply(ctx context.Context, changes []store.Change, outputsOwed bool) bool {
	if len(changes) == 0 {
		return true
	}
	if c.cfg.JobTokens != nil {
		// An attempt's end deletes its job token with it.
		for i := range changes {
			if a := changes[i].Attempt; a != nil && a.To.Terminal() && a.EndTokens == nil {
				rec := c.cfg.JobTokens.End(ctx, executor.Ref{JobID: changes[i].JobID, Attempt: a.Number})
				a.EndTokens = &rec
			}
		}
	}
	errs, err := c.cfg.Store.Apply(ctx, changes)
	if err != nil {
		c.log.Error("record executor events", "err", err)
		return false
	}
	var paused []store.Change // requeued jobs a retry storm holds (storm.go)
	var ended []executor.Ref  // attempts whose end was recorded
	for i, e := range errs {
		if msg, ok := c.storm.holds[changes[i].JobID]; ok && changes[i].Attempt != nil && changes[i].Attempt.To.Terminal() {
			delete(c.storm.holds, changes[i].JobID) // its end: requeued (then held) or moved on
			if e == nil && changes[i].To() == domain.JobQueued {
				paused = append(paused, stormHold(changes[i].JobID, msg, changes[i].At))
			}
		}
		switch {
		case e == nil:
			if changes[i].To() == domain.JobRunning {
				c.stopIfRequested(ctx, executor.Ref{JobID: changes[i].JobID, Attempt: changes[i].Attempt.Number})
			}
			if a := changes[i].Attempt; a != nil && a.To.Terminal() {
				c.forgetAttempt(executor.Ref{JobID: changes[i].JobID, Attempt: a.Number})
			}
			if a := changes[i].Attempt; a != nil && a.To.Terminal() { // Observer (metrics)
				if j, ok := c.view[changes[i].JobID]; ok {
					c.budget.attemptEnded(j.Project) // budget.go: the running rate fell
				}
				c.observeEnd(ctx, changes[i])
				if outputsOwed {
					c.outputs(executor.Ref{JobID: changes[i].JobID, Attempt: a.Number})
				}
				c.release(executor.Ref{JobID: changes[i].JobID, Attempt: a.Number}) // code.go
			}
			if a := changes[i].Attempt; a != nil && a.To.Terminal() {
				ended = append(ended, executor.Ref{JobID: changes[i].JobID, Attempt: a.Number})
			}
		case errors.Is(e, domain.ErrConflict):
			// A repeated event (reattach after restart) or a job that moved on.
		default:
			c.log.Warn("executor event not recorded", "job", changes[i].JobID, "err", e)
		}
		if a := changes[i].Attempt; a != nil && a.To.Terminal() {
			delete(c.endJobs, executor.Ref{JobID: changes[i].JobID, Attempt: a.Number})
		}
	}
	if len(ended) > 0 && c.cfg.JobTokens != nil {
		// The attempts are over and their tokens deleted: they may
		// report nothing more.
		c.cfg.JobTokens.Ended(ended)
	}
	c.holdPaused(ctx, paused)
	return true
}

// observeEnd tells the Observer about a recorded attempt end, with the job
// the end was decided on as the end left it (afterEnd): what the end
// writes is as stored, the rest as ended had it (for a success, as the
// loop last saw it, e.g. StartedAt). It is read from the store when ended
// kept none.
func (c *Controller) observeEnd(ctx context.Context, ch store.Change) {
	if _, ok := c.cfg.Observer.(nopObserver); ok {
		return
	}
	job, ok := c.endJobs[executor.Ref{JobID: ch.JobID, Attempt: ch.Attempt.Number}]
	if ok {
		afterEnd(&job, ch)
	} else {
		var err error
		if job, err = c.cfg.Store.GetJob(ctx, ch.JobID); err != nil {
			return
		}
	}
	a := domain.Attempt{JobID: ch.JobID, Number: ch.Attempt.Number, State: ch.Attempt.To, Reason: ch.Attempt.Reason,
		Message: ch.Attempt.Message, FinishedAt: ch.At}
	if a.Reason == "" {
		a.Reason, a.Message = ch.Reason, ch.Message
	}
	c.cfg.Observer.AttemptEnded(job, a)
}

// afterEnd makes job, as read before the attempt end ch, what the store
// has once ch applied (the job's row: Apply's transition).
func afterEnd(job *domain.Job, ch store.Change) {
	to := ch.To()
	if to == "" {
		return
	}
	job.State, job.Reason, job.Message, job.UpdatedAt = to, ch.Reason, ch.Message, ch.At
	if to.Terminal() {
		job.FinishedAt = ch.At
	}
	if to.Terminal() || to == domain.JobQueued {
		job.CancelRequested = false
	}
	job.PreemptRequested = false
	if ch.CountPreemption {
		job.Preemptions++
	}
	job.NextAttempt = ch.NextAttempt
	if ch.Attempt != nil {
		job.Attempts = max(job.Attempts, ch.Attempt.Number)
	}
}

// knownJob is job id as the loop knows it without reading the store: its
// row as of the view's last read (the row info read when the view does
// not hold it), with the Spec and Code info read. Its immutable fields
// are right; the rest may be stale, so no decision that depends on them
// (a cancel or preemption requested, the state) may rest on it.
func (c *Controller) knownJob(ctx context.Context, id int64) (domain.Job, error) {
	ji, err := c.info(ctx, id)
	if err != nil {
		return domain.Job{}, err
	}
	job, ok := c.view[id]
	if !ok {
		return ji.job, nil
	}
	job.Spec, job.SpecJSON, job.Code = ji.job.Spec, ji.job.SpecJSON, ji.job.Code
	return job, nil
}

// logLimited tells the Observer that an attempt's log reached its limit,
// when the attempt is still its job's current, active one.
func (c *Controller) logLimited(ctx context.Context, ev executor.Event, at time.Time) {
	if _, ok := c.cfg.Observer.(nopObserver); ok {
		return
	}
	job, err := c.cfg.Store.GetJob(ctx, ev.JobID)
	if err != nil || job.Attempts != ev.Attempt || !slices.Contains(active, job.State) {
		return // gone, or an attempt that ended since
	}
	c.cfg.Observer.LogLimited(job, ev.Attempt, ev.Limit, at)
}

// stopIfRequested stops an attempt that started after its job was
// canceled or preempted: a stop sent while it started may have found
// nothing to stop. It looks at the view: a cancel requested after the
// view's last read changed the job's row, so the next read of what changed
// (refreshView) has the loop stop the attempt then. A job the view lacks
// is read, and so is one whose attempt this loop already sent a stop while
// it started (a preemption, which the view learns only at its next read).
func (c *Controller) stopIfRequested(ctx context.Context, ref executor.Ref) {
	job, ok := c.view[ref.JobID]
	if !ok || c.stopping[ref] {
		var err error
		if job, err = c.cfg.Store.GetJob(ctx, ref.JobID); err != nil {
			return
		}
	}
	switch {
	case job.CancelRequested:
		delete(c.stopping, ref)
		c.stop(ctx, ref, cancelRequest(job))
	case job.PreemptRequested:
		delete(c.stopping, ref)
		c.stop(ctx, ref, preemptRequest(job))
	}
}

// ended decides what an attempt's end means for its job: success, a retry
// after backoff, cancellation, or failure.
//
// The decision rests on the job as the store has it now (a cancel or a
// preemption may have been requested since the loop last looked, on any
// replica), except for an attempt that succeeded: that ends its job
// succeeded whatever was requested, so the job is not read for it.
func (c *Controller) ended(ctx context.Context, ev executor.Event, at time.Time, gpu *gpuUse) (store.Change, error) {
	var job domain.Job
	var err error
	if ev.Kind == executor.Exited && ev.State == domain.AttemptSucceeded {
		job, err = c.knownJob(ctx, ev.JobID)
	} else {
		job, err = c.cfg.Store.GetJob(ctx, ev.JobID)
	}
	if err != nil {
		return store.Change{}, err
	}
	att := &store.AttemptChange{Number: ev.Attempt, From: activeAtt, To: ev.State,
		Reason: ev.Reason, Message: ev.Message, ExitCode: ev.ExitCode}
	ev.Usage.GPUSeconds = gpu.of(c.cfg.GPUSamples, ev.JobID, ev.Attempt)
	if ev.Usage != (domain.Usage{}) {
		att.Usage = &ev.Usage
	}
	if ev.Kind == executor.Lost {
		att.To, att.Reason = domain.AttemptLost, domain.ReasonNodeLost
		if att.Message == "" {
			att.Message = "the attempt's supervisor vanished without an exit record"
		}
	}
	if ev.Kind == executor.Exited && att.To != domain.AttemptSucceeded && !job.CancelRequested && !job.PreemptRequested {
		// Stopped by a health check: the attempt failed for that reason.
		h, err := c.cfg.Store.AttemptHealth(ctx, ev.JobID, ev.Attempt)
		if err != nil && !errors.Is(err, domain.ErrNotFound) {
			return store.Change{}, err
		}
		if h.HealthFailed != "" {
			att.To, att.Reason = domain.AttemptFailed, h.HealthFailed
			att.Message = h.HealthMessage
			if ev.Message != "" {
				att.Message += "; " + ev.Message
			}
		}
	}
	ch := store.Change{JobID: ev.JobID, Actor: actorExecutor, At: at, Attempt: att}
	outcome := fmt.Sprintf("attempt %d %s", ev.Attempt, att.To)
	if att.Message != "" {
		outcome += ": " + att.Message
	}
	// A checkpoint that does not load fails the attempt that resumes from
	// it before its first step: the next attempt falls back to the one
	// before (checkpoints.go).
	if att.To == domain.AttemptFailed && (att.Reason == domain.ReasonExitCode || att.Reason == domain.ReasonHealthCheckFailed) &&
		!job.CancelRequested && !job.PreemptRequested {
		h, err := c.cfg.Store.AttemptHealth(ctx, ev.JobID, ev.Attempt)
		if err != nil && !errors.Is(err, domain.ErrNotFound) {
			return store.Change{}, err
		}
		progressed := !h.LastProgressAt.IsZero() || !c.progress[ev.Ref].IsZero()
		if aside := c.failedResume(ctx, ev.JobID, ev.Attempt, att.Reason, att.ExitCode, progressed); aside != "" {
			outcome += "; " + aside
		}
	}
	spec := job.Spec
	// A program that cannot be found will not be found on the next try
	// either, nor will a failed environment check pass: those failures are
	// permanent. Nor is a job stopped as idle retried: a retry would hold
	// the same GPUs idle again (idle.go).
	retriesLeft := spec.Policy.Reentrant && ev.Attempt <= spec.Policy.Retries && att.Reason != domain.ReasonEntrypointNotFound &&
		att.Reason != domain.ReasonEnvironmentCheckFailed && att.Reason != domain.ReasonIdle
	switch {
	case att.To == domain.AttemptSucceeded:
		ch.Move, ch.Reason, ch.Message = domain.MoveSucceed(), domain.ReasonCompleted, outcome
	case job.PreemptRequested && !job.CancelRequested:
		// Stopped to make room: back to the queue, ahead of its class peers;
		// the next attempt resumes from the latest checkpoint.
		att.To, att.Reason = domain.AttemptPreempted, domain.ReasonPreempted
		att.Message = job.Message
		ch.Move, ch.Reason, ch.CountPreemption = domain.MoveRequeue(), domain.ReasonPreempted, true
		ch.Message = fmt.Sprintf("attempt %d preempted (%s); queued again to resume from its latest checkpoint", ev.Attempt, job.Message)
		if h, ok := c.guard.held[ev.JobID]; ok {
			ch.Message += "; " + h.String()
		}
	case job.CancelRequested && job.Reason == domain.ReasonEarlyStopped:
		// Stopped by its sweep's early-stop rule: a finished run (earlystop.go).
		ch.Move, ch.Reason, ch.Message = domain.MoveSucceed().Only(active...), domain.ReasonEarlyStopped, job.Message
	case job.CancelRequested || att.To == domain.AttemptCanceled:
		ch.Move, ch.Reason = domain.MoveCancel().Only(active...), domain.ReasonCanceledByUser
		ch.Message = strings.TrimPrefix(job.Message, "cancel requested; ")
		if job.Reason != domain.ReasonCanceledByUser || ch.Message == "" {
			ch.Message = outcome
		}
	case retriesLeft:
		delay := c.backoff(ev.Attempt)
		ch.Move, ch.Reason = domain.MoveRequeue(), domain.ReasonRetrying
		ch.NextAttempt = at.Add(delay)
		ch.Message = fmt.Sprintf("%s; retry %d of %d in %s", outcome, ev.Attempt, spec.Policy.Retries, domain.FormatDuration(delay))
		if msg, paused := c.storm.failed(job, at); paused {
			// Requeued, then held as soon as that is recorded (apply).
			ch.Message = outcome + "; " + msg
		}
	default:
		ch.Move, ch.Reason, ch.Message = domain.MoveFail(), att.Reason, outcome
		if spec.Policy.Retries > 0 && att.Reason != domain.ReasonIdle {
			ch.Message = fmt.Sprintf("%s (no retries left of %d)", outcome, spec.Policy.Retries)
		}
	}
	if c.endJobs == nil {
		c.endJobs = map[executor.Ref]domain.Job{}
	}
	c.endJobs[ev.Ref] = job
	return ch, nil
}

// backoff is the delay after attempt n fails: RetryBackoff doubled per
// attempt, capped at MaxBackoff.
func (c *Controller) backoff(n int) time.Duration {
	d := c.cfg.RetryBackoff
	for i := 1; i < n && d < c.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, c.cfg.MaxBackoff)
}

// handleLaunchFailure records an attempt that could not be started at all.
func (c *Controller) handleLaunchFailure(ctx context.Context, r launchResult) {
	if r.err == nil {
		return
	}
	c.log.Error("launch attempt", "attempt", r.ref.String(), "err", r.err)
	reason := domain.ReasonLaunchFailed
	if errors.Is(r.err, executor.ErrOutputs) {
		reason = domain.ReasonArtifactWrite
	}
	c.handleEvents(ctx, []executor.Event{{Ref: r.ref, Kind: executor.Exited, At: c.cfg.Clock.Now(),
		State: domain.AttemptFailed, Reason: reason, Message: r.err.Error()}}, true)
}
