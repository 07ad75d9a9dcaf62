package service

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// Hold keeps a queued job out of scheduling (state held, reason Held)
// until Release. A job the platform holds while it waits for its
// dependencies or its sweep's max_parallel is then held by the person
// instead: it stays held when its turn comes. Holding a job held
// otherwise changes nothing; a job that is no longer queued cannot be
// held (it is placed, running or done).
func (s *JobService) Hold(ctx context.Context, p Principal, id int64, reason string) (domain.Job, error) {
	if msg := domain.TextProblem(reason, false); msg != "" {
		return domain.Job{}, domain.FieldErrors{{Path: "reason", Message: msg}}
	}
	msg := "held by " + p.Subject
	if reason != "" {
		msg += ": " + reason
	}
	return s.holdOrRelease(ctx, p, id, domain.MoveHold(), domain.ReasonHeld, msg)
}

// Release puts a held job back in the queue, where it keeps its place by
// priority and submit time; a job with dependencies, or a member of a
// sweep with a max_parallel, goes back to waiting for them instead.
// Releasing a queued job changes nothing; a job the platform holds is not
// a person's to release.
func (s *JobService) Release(ctx context.Context, p Principal, id int64) (domain.Job, error) {
	return s.holdOrRelease(ctx, p, id, domain.MoveRelease(), domain.ReasonReleased, "released by "+p.Subject)
}

func (s *JobService) holdOrRelease(ctx context.Context, p Principal, id int64, mv domain.Move, reason domain.Reason, msg string) (domain.Job, error) {
	verb := "hold"
	if mv.To() == domain.JobQueued {
		verb = "release"
	}
	now := s.cfg.Clock.Now()
	return s.changeJob(ctx, p, id, authz.JobHold, verb, func(job domain.Job) (*store.Change, any, error) {
		waiting := job.State == domain.JobHeld && (job.Reason == domain.ReasonDependency || job.Reason == domain.ReasonSweepLimit)
		switch {
		case waiting && verb == "hold":
			// Held by a person now: the loop leaves it be (workflow.go)
			// until it is released.
			return &store.Change{JobID: id, In: []domain.JobState{domain.JobHeld}, SetReason: true, Reason: reason,
				Message: msg + " (it was waiting: " + job.Message + ")", Actor: p.Actor(), At: now}, map[string]any{"state": job.State, "reason": reason}, nil
		case waiting:
			// The loop releases it when its turn comes (workflow.go).
			return nil, nil, domain.Errorf(domain.ErrConflict, "job %d is held by the platform, not by a person (%s: %s); it is released when its turn comes (see: trainyard why %d), or cancel it",
				id, job.Reason, job.Message, id)
		case job.State == mv.To():
			return nil, nil, nil // already where it was asked to go
		case !slices.Contains(mv.From(), job.State):
			return nil, nil, notMovable(id, job, verb)
		}
		if verb == "release" {
			wait, err := s.waitAgain(ctx, job, msg, p, now)
			if err != nil {
				return nil, nil, err
			}
			if wait != nil {
				return wait, map[string]any{"state": job.State, "reason": wait.Reason}, nil
			}
		}
		return &store.Change{JobID: id, Move: mv.Only(job.State), Reason: reason, Message: msg, Actor: p.Actor(), At: now},
			map[string]any{"state": mv.To()}, nil
	})
}

// waitAgain is the release of a job a person held while it waited for
// its dependencies or its sweep's max_parallel: it goes back to waiting
// (held, reason Dependency or SweepLimit) for the control loop to queue
// it when its turn comes. nil: the job waits for nothing and is queued.
func (s *JobService) waitAgain(ctx context.Context, job domain.Job, msg string, p Principal, now time.Time) (*store.Change, error) {
	ch := &store.Change{JobID: job.ID, In: []domain.JobState{domain.JobHeld}, SetReason: true, Actor: p.Actor(), At: now}
	if len(job.Spec.After) > 0 {
		ch.Reason, ch.Message = domain.ReasonDependency, msg+"; "+domain.WaitMessage(job.Spec.After, nil)
		return ch, nil
	}
	sweep, err := strconv.ParseInt(job.Spec.Labels[domain.SweepLabel], 10, 64)
	if err != nil {
		return nil, nil // not a member of a sweep
	}
	sw, err := s.st.GetSweep(ctx, sweep)
	if err != nil {
		return nil, fmt.Errorf("read sweep %d of job %d: %w", sweep, job.ID, err)
	}
	if sw.MaxParallel == 0 || !sw.CanceledAt.IsZero() {
		return nil, nil
	}
	ch.Reason, ch.Message = domain.ReasonSweepLimit, msg+"; "+sweepLimitMessage(sweep, sw.MaxParallel)
	return ch, nil
}

// notMovable explains why job cannot be held or released now.
func notMovable(id int64, job domain.Job, verb string) error {
	if verb == "release" {
		return domain.Errorf(domain.ErrConflict, "job %d is %s, not held; there is nothing to release", id, job.State)
	}
	switch {
	case job.State.Terminal():
		return domain.Errorf(domain.ErrConflict, "job %d already %s; only a queued job can be held", id, job.State)
	case job.State.Active():
		return domain.Errorf(domain.ErrConflict, "job %d is %s; only a queued job can be held (cancel it with: trainyard cancel %d)", id, job.State, id)
	}
	return domain.Errorf(domain.ErrConflict, "job %d is %s; only a queued job can be held", id, job.State)
}
