package sqlite

import (
	"context"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlstore"
)

// CreateJobLooking is CreateJob that also returns what
// SameSpecJobs(p.Submitter, p.SpecHash, since) returns just before the
// job is stored, read in the transaction that stores it: the writer has
// the pages at hand, where a read transaction of its own would read them
// afresh after every commit. An idempotent replay returns no repeats.
func (s *Store) CreateJobLooking(ctx context.Context, p store.NewJob, audit domain.AuditRecord, since time.Time) (domain.Job, bool, store.Repeats, error) {
	var rep store.Repeats
	job, created, err := s.createJob(ctx, p, audit, func(w *writer) error {
		rep = store.Repeats{}
		if jobs, ok := w.repeats.memo(p.Submitter, p.SpecHash); ok { // repeats.go
			rep.Jobs, rep.More = jobs, true
			return nil
		}
		jobs, err := w.lookSameSpec(p.Submitter, p.SpecHash, since)
		if err != nil {
			// A failed look fails no submit (as SameSpecJobs, read
			// beside the write, would not).
			rep.Err = interpretError("list jobs of the same spec", err)
			return nil
		}
		rep.Jobs, rep.More = sqlstore.SameSpecNewest(jobs)
		return nil
	})
	if err != nil || !created {
		return job, created, store.Repeats{}, err
	}
	return job, created, rep, nil
}

// sameSpec runs SameSpecJobs's query in the write transaction.
func (w *writer) sameSpec(query string, args []any, submitter, specHash string) ([]domain.Job, error) {
	rows, err := w.query(query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var jobs []domain.Job
	for rows.Next() {
		if err := sqlstore.SameSpecRow(rows, &jobs, submitter, specHash); err != nil {
			return nil, err
		}
	}
	return jobs, rows.Err()
}
