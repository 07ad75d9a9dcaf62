package store

import (
	"context"
	"time"

	"trainyard/internal/domain"
)

// Repeats is what a submit read of its submitter's jobs of the same spec
// (as SameSpecJobs returns them), when its store reads them in the
// transaction that stores the job.
type Repeats struct {
	Jobs []domain.Job // newest first
	More bool         // there are more than Jobs
	Err  error        // the look failed; the job is stored all the same
}

// RepeatLooker is a store that reads a submit's repeats in the
// transaction that stores its job, cheaper than a read of their own.
type RepeatLooker interface {
	// CreateJobLooking is CreateJob that also returns what
	// SameSpecJobs(p.Submitter, p.SpecHash, since) returns before the job
	// is stored (never the job itself); a failed look fails no create. An
	// idempotent replay returns no repeats.
	CreateJobLooking(ctx context.Context, p NewJob, audit domain.AuditRecord, since time.Time) (domain.Job, bool, Repeats, error)
}
