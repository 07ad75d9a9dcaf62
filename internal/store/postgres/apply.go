package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/column"
)

// Apply applies changes in order in one transaction. A change whose guard
// does not hold is rolled back on its own (its savepoint) and its slot holds
// store.ErrConflict, store.ErrNotFound or, for a malformed change,
// domain.ErrInvalid; the others commit. The audit record of each change
// that applied (Change.Audit) is appended in the same transaction.
//
// Each change reads its job's row locked (FOR UPDATE), so a writer on
// another replica cannot move the job between the guard and the update.
func (s *Store) Apply(ctx context.Context, changes []store.Change) ([]error, error) {
	if len(changes) == 0 {
		if err := s.checkOpen(); err != nil {
			return nil, err
		}
		return []error{}, nil
	}
	var opts []writeOpt
	if slices.ContainsFunc(changes, func(c store.Change) bool { return c.Audit != nil }) {
		opts = append(opts, appendsAudit) // takes the audit lock with the batch
	}
	var slots []error
	err := s.write(ctx, func(w *writer) error {
		slots = make([]error, len(changes))
		for i := range changes {
			c := &changes[i]
			err, fatal := w.runInSavepoint("change", func(w *writer) error { return applyChange(w, c) })
			if fatal != nil {
				return fmt.Errorf("apply changes: %w", fatal)
			}
			if err != nil {
				var ge guardError
				if !errors.As(err, &ge) {
					return fmt.Errorf("apply change %d of %d: %w", i+1, len(changes), err)
				}
				slots[i] = ge.err
			}
		}
		// Each applied change's audit record, after every change: the
		// request's records are appended last (runRequest).
		var recs []domain.AuditRecord
		for i := range changes {
			if slots[i] == nil && changes[i].Audit != nil {
				recs = append(recs, *changes[i].Audit)
			}
		}
		if len(recs) == 0 {
			return nil
		}
		return w.appendAudit(recs)
	}, opts...)
	if err != nil {
		return nil, err
	}
	return slots, nil
}

// guardError marks a per-change outcome (a guard that did not hold, or a
// malformed change) as opposed to a failure of the transaction itself.
type guardError struct{ err error }

func (e guardError) Error() string { return e.err.Error() }
func (e guardError) Unwrap() error { return e.err }

func guardf(sentinel error, format string, args ...any) error {
	return guardError{fmt.Errorf(format+": %w", append(args, sentinel)...)}
}

const (
	jobGuardSQL   = `SELECT state, attempts FROM jobs WHERE id = $1 FOR UPDATE`
	transitionSQL = `UPDATE jobs SET changed_xid = pg_current_xact_id(), state = $1, reason = $2, message = $3, updated_at = $4,
		started_at = COALESCE(started_at, $5), finished_at = COALESCE($6, finished_at),
		cancel_requested = CASE WHEN $7::int = 2 THEN cancel_requested ELSE $7::int END,
		preempt_requested = 0, preemptions = preemptions + $8,
		next_attempt_at = $9
		WHERE id = $10 AND state = $11`
	setReasonSQL      = `UPDATE jobs SET changed_xid = pg_current_xact_id(), reason = $1, message = $2 WHERE id = $3 AND state = $4`
	requestCancelSQL  = `UPDATE jobs SET changed_xid = pg_current_xact_id(), cancel_requested = 1 WHERE id = $1 AND state = $2`
	requestPreemptSQL = `UPDATE jobs SET changed_xid = pg_current_xact_id(), preempt_requested = 1 WHERE id = $1 AND state = $2`
	bumpAttemptsSQL   = `UPDATE jobs SET changed_xid = pg_current_xact_id(), attempts = attempts + 1 WHERE id = $1 AND attempts = $2`
	insertAttemptSQL  = `INSERT INTO attempts (job_id, number, state, reason, message, exit_code, node, gpus,
		created_at, started_at, finished_at, borrowed) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`
	attemptGuardSQL  = `SELECT state FROM attempts WHERE job_id = $1 AND number = $2 FOR UPDATE`
	updateAttemptSQL = `UPDATE attempts SET state = $1, reason = $2, message = $3,
		exit_code = COALESCE($4, exit_code),
		node = CASE WHEN $5::text = '' THEN node ELSE $5::text END,
		gpus = CASE WHEN $6::int = 1 THEN $7::text ELSE gpus END,
		started_at = COALESCE(started_at, $8), finished_at = COALESCE($9, finished_at),
		cpu_seconds = CASE WHEN $10::int = 1 THEN $11::float8 ELSE cpu_seconds END,
		max_rss = CASE WHEN $10::int = 1 THEN $12::bigint ELSE max_rss END
		WHERE job_id = $13 AND number = $14 AND state = $15`
)

// applyChange applies one change. It returns a guardError for an outcome that
// belongs in the change's slot and any other error for a failure that must
// abort the transaction. The guard read is the only round trip before the
// change's updates, which travel together when the savepoint ends.
func applyChange(w *writer, c *store.Change) error {
	to := c.To()
	if !c.Guarded() {
		return guardf(domain.ErrInvalid, "job %d: change has no states to guard on; give it a Move, or the states the job must be in (In)", c.JobID)
	}
	var (
		state    string
		attempts int32
	)
	if err := w.queryRow(jobGuardSQL, c.JobID).Scan(&state, &attempts); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return guardf(store.ErrNotFound, "job %d does not exist", c.JobID)
		}
		return interpretError(fmt.Sprintf("read job %d", c.JobID), err)
	}
	cur := domain.JobState(state)
	if !c.Applies(cur) {
		return guardf(store.ErrConflict, "job %d is %s, not %v", c.JobID, cur, c.Guard())
	}

	if to != "" {
		var started, finished any
		if to == domain.JobRunning {
			started = timeArg(c.At)
		}
		if to.Terminal() {
			finished = timeArg(c.At)
		}
		cancel := cancelKeep
		switch {
		case to.Terminal() || to == domain.JobQueued:
			cancel = cancelClear
		case c.RequestCancel:
			cancel = cancelSet
		}
		queueOneRow(w, fmt.Sprintf("move job %d from %s to %s", c.JobID, cur, to), transitionSQL,
			string(to), string(c.Reason), c.Message, timeArg(c.At), started, finished, cancel,
			boolArg(c.CountPreemption), timeArg(c.NextAttempt), c.JobID, state)
		attempt := 0
		if c.Attempt != nil {
			attempt = c.Attempt.Number
		}
		w.queue(fmt.Sprintf("record event of job %d", c.JobID), insertEventSQL, c.JobID, attempt, timeArg(c.At),
			state, string(to), c.Actor, string(c.Reason), c.Message)
	} else {
		if c.SetReason {
			queueOneRow(w, fmt.Sprintf("set reason of job %d", c.JobID), setReasonSQL, string(c.Reason), c.Message, c.JobID, state)
		}
		if c.RequestCancel {
			queueOneRow(w, fmt.Sprintf("request cancel of job %d", c.JobID), requestCancelSQL, c.JobID, state)
		}
		if c.RequestPreempt {
			queueOneRow(w, fmt.Sprintf("request preemption of job %d", c.JobID), requestPreemptSQL, c.JobID, state)
		}
	}

	if c.Attempt != nil {
		return applyAttempt(w, c, int(attempts))
	}
	return nil
}

// What a transition does to cancel_requested (the values transitionSQL
// understands).
const (
	cancelClear int32 = 0
	cancelSet   int32 = 1
	cancelKeep  int32 = 2
)

// applyAttempt creates or updates the attempt of a change whose job guard
// held. jobAttempts is the job's attempt count before the change.
func applyAttempt(w *writer, c *store.Change, jobAttempts int) error {
	a := c.Attempt
	if a.To == "" {
		return guardf(domain.ErrInvalid, "job %d attempt %d: change has no target state", c.JobID, a.Number)
	}
	var started, finished any
	if a.To == domain.AttemptRunning {
		started = timeArg(c.At)
	}
	if a.To.Terminal() {
		finished = timeArg(c.At)
	}
	if a.Create {
		if a.Number != jobAttempts+1 {
			return guardf(store.ErrConflict, "job %d: cannot create attempt %d, the next attempt is %d", c.JobID, a.Number, jobAttempts+1)
		}
		w.queueCheck(func(_ pgconn.CommandTag, err error) error {
			if isUniqueViolation(err) {
				return guardf(store.ErrConflict, "job %d: attempt %d already exists", c.JobID, a.Number)
			}
			return interpretError(fmt.Sprintf("create attempt %d of job %d", a.Number, c.JobID), err)
		}, insertAttemptSQL, c.JobID, a.Number, string(a.To), string(a.Reason), a.Message, exitCodeArg(a.ExitCode),
			a.Node, column.GPUs(a.GPUs), timeArg(c.At), started, finished, boolArg(a.Borrowed))
		queueOneRow(w, fmt.Sprintf("count attempt %d of job %d", a.Number, c.JobID), bumpAttemptsSQL, c.JobID, jobAttempts)
		return nil
	}
	if len(a.From) == 0 {
		return guardf(domain.ErrInvalid, "job %d attempt %d: change has no From states; name the states the attempt must be in", c.JobID, a.Number)
	}
	var state string
	if err := w.queryRow(attemptGuardSQL, c.JobID, a.Number).Scan(&state); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return guardf(store.ErrNotFound, "job %d has no attempt %d", c.JobID, a.Number)
		}
		return interpretError(fmt.Sprintf("read attempt %d of job %d", a.Number, c.JobID), err)
	}
	cur := domain.AttemptState(state)
	if !slices.Contains(a.From, cur) {
		return guardf(store.ErrConflict, "job %d attempt %d is %s, not %v", c.JobID, a.Number, cur, a.From)
	}
	u := usageOf(a)
	queueOneRow(w, fmt.Sprintf("move job %d attempt %d from %s to %s", c.JobID, a.Number, cur, a.To), updateAttemptSQL,
		string(a.To), string(a.Reason), a.Message, exitCodeArg(a.ExitCode),
		a.Node, boolArg(a.GPUs != nil), column.GPUs(a.GPUs),
		started, finished, boolArg(a.Usage != nil), u.CPUSeconds, int64(u.MaxRSS),
		c.JobID, a.Number, state)
	return nil
}

// queueOneRow queues a guarded UPDATE that must change exactly one row; any
// other count is a guard conflict. The guard read locked the row, so this
// only fails if the guard and the update disagree.
func queueOneRow(w *writer, action, query string, args ...any) {
	w.queueCheck(func(tag pgconn.CommandTag, err error) error {
		if err != nil {
			return interpretError(action, err)
		}
		if n := tag.RowsAffected(); n != 1 {
			return guardError{fmt.Errorf("%s: the row changed underneath (%d rows matched the guard): %w", action, n, store.ErrConflict)}
		}
		return nil
	}, query, args...)
}

func usageOf(a *store.AttemptChange) domain.Usage {
	if a.Usage == nil {
		return domain.Usage{}
	}
	return *a.Usage
}
