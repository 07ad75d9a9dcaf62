package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
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

// sameSpecsSQL reads, in one statement, what sameSpecSQL reads for each
// of several since values of one submitter and spec ($7 the newest of
// them, $8 the oldest): the rows sameSpecSQL reads for $7, and the rows
// the others may add to them, those not live and submitted from $8 up to
// $7, newer than the oldest of the first when there are
// DuplicateShown+1 of those (an older one is never read). The window
// start is found once for both.
var sameSpecsSQL = `WITH w AS MATERIALIZED (
		SELECT COALESCE((SELECT id FROM jobs WHERE submitter = $1 ORDER BY id DESC LIMIT 1 OFFSET ` + strconv.Itoa(store.DuplicateScan-1) + `), 0) AS start),
	t AS MATERIALIZED (
		SELECT id, state, submitted_at, idempotency_key FROM jobs
		WHERE submitter = $1 AND spec_hash = $2 AND (state IN ($3, $4, $5, $6) OR submitted_at >= $7)
		AND id >= (SELECT start FROM w)
		ORDER BY id DESC LIMIT ` + strconv.Itoa(store.DuplicateShown+1) + `)
	SELECT id, state, submitted_at, idempotency_key FROM t
	UNION ALL
	SELECT id, state, submitted_at, idempotency_key FROM jobs
	WHERE submitter = $1 AND spec_hash = $2 AND state NOT IN ($3, $4, $5, $6) AND submitted_at >= $8 AND submitted_at < $7
	AND id >= (SELECT start FROM w)
	AND id > (SELECT CASE WHEN COUNT(*) = ` + strconv.Itoa(store.DuplicateShown+1) + ` THEN MIN(id) ELSE 0 END FROM t)`

// look is a create's read of its repeats (SameSpecJobs), sent with the
// first round trip of its batch's transaction: it sees what was committed
// before the batch began, as a read beside the write would, without a
// connection and a round trip of its own. The looks of a batch for one
// submitter and spec share one statement (queueLooks).
type look struct {
	sql                 string // sameSpecSQL
	args                []any
	submitter, specHash string
	since               int64 // args' since, in Unix nanoseconds
	rep                 store.Repeats
}

// CreateJobLooking is CreateJob that also returns what
// SameSpecJobs(p.Submitter, p.SpecHash, since) returns as the job's
// transaction begins. An idempotent replay returns no repeats.
func (s *Store) CreateJobLooking(ctx context.Context, p store.NewJob, audit domain.AuditRecord, since time.Time) (domain.Job, bool, store.Repeats, error) {
	_, args := sqlstore.SameSpecQuery(p.Submitter, p.SpecHash, since)
	l := &look{sql: sameSpecSQL, args: args, submitter: p.Submitter, specHash: p.SpecHash, since: since.UnixNano()}
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

// queueLooks queues the looks for the next round trip: one statement for
// the looks of each submitter and spec (sameSpecSQL when they ask for one
// since, sameSpecsSQL when for several), which each look's rows are
// picked from as sameSpecSQL would read them.
func (w *writer) queueLooks(looks []*look) {
	type key struct{ sql, submitter, specHash string }
	var (
		order  []key
		groups = map[key][]*look{}
	)
	for _, l := range looks {
		k := key{l.sql, l.submitter, l.specHash}
		if l.sql != sameSpecSQL {
			k.sql = fmt.Sprintf("%p", l) // a look of its own
		}
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], l)
	}
	for _, k := range order {
		g := groups[k]
		first := g[0]
		sql, args := first.sql, first.args
		lo, hi := first.since, first.since
		for _, l := range g[1:] {
			lo, hi = min(lo, l.since), max(hi, l.since)
		}
		if lo != hi {
			sql, args = sameSpecsSQL, append(slices.Clone(first.args[:6]), hi, lo)
		}
		var jobs []domain.Job
		w.queued++
		w.pending = append(w.pending, pendingStmt{sql: sql, args: args,
			rows: func(rows pgx.Rows) error {
				return sqlstore.SameSpecRow(rows, &jobs, first.submitter, first.specHash)
			},
			check: func(_ pgconn.CommandTag, err error) error {
				if err != nil {
					w.lookErr = interpretError("list jobs of the same spec", err)
					return w.lookErr
				}
				if len(g) == 1 {
					first.rep.Jobs, first.rep.More = sqlstore.SameSpecNewest(jobs)
					return nil
				}
				slices.SortFunc(jobs, func(a, b domain.Job) int { return cmp.Compare(b.ID, a.ID) })
				for _, l := range g {
					l.rep.Jobs, l.rep.More = sqlstore.SameSpecNewest(sameSpecRows(jobs, first.args[2:6], l.since))
				}
				return nil
			}})
	}
}

// sameSpecRows returns the rows of jobs (newest first) that sameSpecSQL
// reads for since: those in one of the live states, or submitted at or
// after since, DuplicateShown+1 at most, in a slice of their own.
func sameSpecRows(jobs []domain.Job, live []any, since int64) []domain.Job {
	out := make([]domain.Job, 0, store.DuplicateShown+1)
	for _, j := range jobs {
		if len(out) == store.DuplicateShown+1 {
			break
		}
		if slices.Contains(live, any(string(j.State))) || j.SubmittedAt.UnixNano() >= since {
			out = append(out, j)
		}
	}
	return out
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
