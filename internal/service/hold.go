package service

import (
	"context"
	"slices"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// Hold keeps a queued job out of scheduling (state held, reason Held)
// until Release. Holding a held job changes nothing; a job that is no
// longer queued cannot be held (it is placed, running or done).
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
// priority and submit time. Releasing a queued job changes nothing.
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
		if job.State == mv.To() {
			return nil, nil, nil // already where it was asked to go
		}
		if !slices.Contains(mv.From(), job.State) {
			return nil, nil, notMovable(id, job, verb)
		}
		if verb == "release" && (job.Reason == domain.ReasonDependency || job.Reason == domain.ReasonSweepLimit) {
			// The loop releases it when its turn comes (workflow.go).
			return nil, nil, domain.Errorf(domain.ErrConflict, "job %d is held by the platform, not by a person (%s: %s); it is released when its turn comes (see: trainyard why %d), or cancel it",
				id, job.Reason, job.Message, id)
		}
		return &store.Change{JobID: id, Move: mv.Only(job.State), Reason: reason, Message: msg, Actor: p.Actor(), At: now},
			map[string]any{"state": mv.To()}, nil
	})
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
