package store

import (
	"context"
	"time"

	"trainyard/internal/domain"
)

// SweepFilter selects sweeps for ListSweeps, newest first.
type SweepFilter struct {
	Project  string // empty: all
	BeforeID int64  // cursor: only ids < BeforeID; 0: from the newest
	Limit    int    // 0: no limit
	// Restrict keeps only the sweeps of Projects and those of Submitter.
	Restrict  bool
	Projects  []string
	Submitter string
}

// Workflows stores sweeps (and job arrays) and the dependencies jobs wait
// for (a spec's after:). The jobs themselves are stored as any job is,
// with NewJob's Held, Sweep and Waits.
type Workflows interface {
	// CreateSweep stores sw and its members in one transaction: members
	// is called with the sweep's new id and returns the member jobs to
	// store, each with NewJob.Sweep set to that id. The audit record's
	// "{id}" is the sweep's id. It returns the sweep and its members in
	// order, and created true.
	//
	// When sw.IdempotencyKey is set and sw.Submitter already has a sweep
	// with that key, it stores nothing (no audit record either) and
	// returns that sweep and its members (ids and states only), and
	// created false. Two such calls at once may both miss the other:
	// the second to commit fails with domain.ErrConflict, and a retry
	// returns the first's sweep.
	CreateSweep(ctx context.Context, sw domain.Sweep, members func(id int64) ([]NewJob, error), audit domain.AuditRecord) (out domain.Sweep, jobs []domain.Job, created bool, err error)
	// GetSweep returns the sweep, or ErrNotFound.
	GetSweep(ctx context.Context, id int64) (domain.Sweep, error)
	// ListSweeps returns sweeps newest first.
	ListSweeps(ctx context.Context, f SweepFilter) ([]domain.Sweep, error)
	// CancelSweep records that the sweep was canceled (its members are
	// canceled as jobs are); a second cancel changes nothing.
	CancelSweep(ctx context.Context, id int64, by string, at time.Time, audit domain.AuditRecord) error
	// SweepCounts counts the sweep's members by state.
	SweepCounts(ctx context.Context, id int64) (map[domain.JobState]int, error)
	// HeldSweepMembers returns up to limit ids of the sweep's members held
	// with reason, oldest first.
	HeldSweepMembers(ctx context.Context, id int64, reason domain.Reason, limit int) ([]int64, error)
	// SweepOf returns the sweep job id is a member of; 0: none.
	SweepOf(ctx context.Context, id int64) (int64, error)
	// WaitsOf returns job id's dependencies as stored with it.
	WaitsOf(ctx context.Context, id int64) ([]domain.Dependency, error)
	// SweepsOf returns the sweeps that any of the jobs ids is a member of,
	// ascending, each once.
	SweepsOf(ctx context.Context, ids []int64) ([]int64, error)
	// WaitersOn returns the ids of the jobs whose dependencies name one of
	// the jobs ids (sweeps, when sweep), ascending, each once.
	WaitersOn(ctx context.Context, ids []int64, sweep bool) ([]int64, error)
	// WaitingJobs returns the ids of the jobs held for a dependency
	// (reason Dependency).
	WaitingJobs(ctx context.Context) ([]int64, error)
	// WaitingSweeps returns the ids of the sweeps with members held for
	// their max_parallel (reason SweepLimit).
	WaitingSweeps(ctx context.Context) ([]int64, error)
	// RunningSweeps returns the ids of the sweeps with running members.
	RunningSweeps(ctx context.Context) ([]int64, error)
}
