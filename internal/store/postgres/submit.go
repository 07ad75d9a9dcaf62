package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlstore"
)

// sameSpecSQL is SameSpecJobs's statement.
var sameSpecSQL = func() string {
	q, _ := sqlstore.SameSpecQuery("", "", time.Time{})
	return q.SQL(sqlstore.Postgres)
}()

// look is a create's read of its repeats (SameSpecJobs), sent with the
// first round trip of its batch's transaction: it sees what was committed
// before the batch began, as a read beside the write would, without a
// connection and a round trip of its own.
type look struct {
	sql                 string // sameSpecSQL
	args                []any
	submitter, specHash string
	rep                 store.Repeats
}

// CreateJobLooking is CreateJob that also returns what
// SameSpecJobs(p.Submitter, p.SpecHash, since) returns as the job's
// transaction begins. An idempotent replay returns no repeats.
func (s *Store) CreateJobLooking(ctx context.Context, p store.NewJob, audit domain.AuditRecord, since time.Time) (domain.Job, bool, store.Repeats, error) {
	_, args := sqlstore.SameSpecQuery(p.Submitter, p.SpecHash, since)
	l := &look{sql: sameSpecSQL, args: args, submitter: p.Submitter, specHash: p.SpecHash}
	job, created, err := s.createJob(ctx, p, audit, func(r *writeReq) { r.look = l })
	if err != nil || !created {
		return job, created, store.Repeats{}, err
	}
	return job, created, l.rep, nil
}

// looks returns the looks of the claimed requests to send as their batch
// begins. When a look failed in the batch's first run, the run again
// sends none: their submits go on without repeats, as they would when a
// read beside the write failed.
func (s *Store) looks(claimed []*writeReq, optimistic bool) []*look {
	w := s.w
	if optimistic {
		w.lookErr = nil
	}
	var looks []*look
	for _, r := range claimed {
		if r.look == nil {
			continue
		}
		r.look.rep = store.Repeats{}
		if w.lookErr != nil {
			r.look.rep.Err = w.lookErr
			continue
		}
		looks = append(looks, r.look)
	}
	return looks
}

// queueLooks queues the looks for the next round trip.
func (w *writer) queueLooks(looks []*look) {
	for _, l := range looks {
		var jobs []domain.Job
		w.queued++
		w.pending = append(w.pending, pendingStmt{sql: l.sql, args: l.args,
			rows: func(rows pgx.Rows) error {
				return sqlstore.SameSpecRow(rows, &jobs, l.submitter, l.specHash)
			},
			check: func(_ pgconn.CommandTag, err error) error {
				if err != nil {
					w.lookErr = interpretError("list jobs of the same spec", err)
					return w.lookErr
				}
				l.rep.Jobs, l.rep.More = sqlstore.SameSpecNewest(jobs)
				return nil
			}})
	}
}

// readRows passes each row of the batch's next result to fn.
func readRows(br pgx.BatchResults, fn func(pgx.Rows) error) (pgconn.CommandTag, error) {
	rows, err := br.Query()
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return pgconn.CommandTag{}, err
		}
	}
	rows.Close()
	return rows.CommandTag(), rows.Err()
}
