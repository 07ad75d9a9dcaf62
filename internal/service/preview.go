package service

import (
	"context"
	"time"

	"trainyard/internal/cost"
	"trainyard/internal/domain"
	"trainyard/internal/jobspec"
)

// SubmitPreview is what a submit would do, without doing it (submit
// --dry-run): the spec as it would be stored, the pool it would wait in,
// and where it would stand in that pool's queue.
type SubmitPreview struct {
	Spec     domain.Spec
	SpecJSON []byte // the canonical snapshot the job would run
	SpecHash string
	Pool     domain.Pool
	// Waiting counts the jobs waiting in the pool as the scheduler last
	// ordered them; Ahead, those of them at the job's priority or above,
	// which go first (fair share aside). AheadStart is when the last of
	// those is expected to start (zero: unknown).
	Waiting, Ahead int
	AheadStart     time.Time
	// QueueKnown is false when no control loop orders the queue (the
	// counts are then zero and mean nothing).
	QueueKnown bool
	// WorstCase is the most the job may cost: its pool's rates × its
	// request × its timeout; CostBounded is false without a timeout.
	WorstCase   domain.Money
	CostBounded bool
	// Budget is the project's budget in force and whether the job would
	// fit in it now (nil: none, or the caller may not read it).
	Budget *PreviewBudget
}

// PreviewBudget is how a previewed job stands against its project's
// budget: Fits is false when a blocking budget would hold it, and Why
// then says so with the numbers.
type PreviewBudget struct {
	Status BudgetStatus
	Fits   bool
	Why    string
}

// Preview checks a submit as Submit does (permission, spec, environment,
// secrets, code, paths and admission, with the same errors) and reports
// what it would do, storing nothing.
func (s *JobService) Preview(ctx context.Context, p Principal, in SubmitInput) (SubmitPreview, error) {
	spec, err := s.prepare(ctx, p, in)
	if err != nil {
		return SubmitPreview{}, err
	}
	specJSON, hash := jobspec.Canonical(spec)
	pv := SubmitPreview{Spec: spec, SpecJSON: specJSON, SpecHash: hash}
	if v, err := s.pools.admission(ctx); err == nil {
		pv.Pool = v.pools[spec.Pool] // admit found it
	}
	j := cost.JobCost(spec.Resources, pv.Pool.Rates, spec.Policy.Timeout.D())
	pv.WorstCase, pv.CostBounded = j.Worst, j.Bounded
	pv.Budget = s.cost.preview(ctx, p, spec.Project, j)
	if s.cfg.Queue == nil {
		return pv, nil
	}
	q, err := s.cfg.Queue(ctx, spec.Pool)
	if err != nil {
		return pv, nil // an estimate, not a reason to refuse the preview
	}
	pv.QueueKnown, pv.Waiting = true, len(q)
	rank := spec.Policy.Priority.Rank()
	for _, e := range q {
		if e.Priority.Rank() >= rank {
			pv.Ahead++
			if e.EstimatedStart.After(pv.AheadStart) {
				pv.AheadStart = e.EstimatedStart
			}
		}
	}
	return pv, nil
}
