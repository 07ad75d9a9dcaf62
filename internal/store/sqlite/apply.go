package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/column"
)

// Apply applies changes in order in one transaction. A change whose guard
// does not hold is rolled back on its own (its savepoint) and its slot holds
// store.ErrConflict, store.ErrNotFound or, for a malformed change,
// domain.ErrInvalid; the others commit. The audit record of each change
// that applied (Change.Audit) is appended in the same transaction.
func (s *Store) Apply(ctx context.Context, changes []store.Change) ([]error, error) {
	if len(changes) == 0 {
		if err := s.checkOpen(); err != nil {
			return nil, err
		}
		return []error{}, nil
	}
	var slots []error
	err := s.write(ctx, func(w *writer) error {
		slots = make([]error, len(changes))
		for i := range changes {
			c := &changes[i]
			err, fatal := runInSavepoint(w, "change", func(w *writer) error { return applyChange(w, c) })
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
	})
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
	jobGuardSQL   = `SELECT state, attempts FROM jobs WHERE id = ?`
	transitionSQL = `UPDATE jobs SET rev = ?, state = ?, reason = ?, message = ?, updated_at = ?,
		started_at = COALESCE(started_at, ?), finished_at = COALESCE(?, finished_at),
		cancel_requested = CASE WHEN ? = 2 THEN cancel_requested ELSE ? END,
		preempt_requested = 0, preemptions = preemptions + ?,
		next_attempt_at = ?
		WHERE id = ? AND state = ?`
	setReasonSQL      = `UPDATE jobs SET rev = ?, reason = ?, message = ? WHERE id = ? AND state = ?`
	requestCancelSQL  = `UPDATE jobs SET rev = ?, cancel_requested = 1 WHERE id = ? AND state = ?`
	requestPreemptSQL = `UPDATE jobs SET rev = ?, preempt_requested = 1 WHERE id = ? AND state = ?`
	bumpAttemptsSQL   = `UPDATE jobs SET rev = ?, attempts = attempts + 1 WHERE id = ? AND attempts = ?`
	insertAttemptSQL  = `INSERT INTO attempts (job_id, number, state, reason, message, exit_code, node, gpus,
		created_at, started_at, finished_at, borrowed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	attemptGuardSQL  = `SELECT state FROM attempts WHERE job_id = ? AND number = ?`
	updateAttemptSQL = `UPDATE attempts SET state = ?, reason = ?, message = ?,
		exit_code = COALESCE(?, exit_code),
		node = CASE WHEN ? = '' THEN node ELSE ? END,
		gpus = CASE WHEN ? = 1 THEN ? ELSE gpus END,
		started_at = COALESCE(started_at, ?), finished_at = COALESCE(?, finished_at),
		cpu_seconds = CASE WHEN ? = 1 THEN ? ELSE cpu_seconds END,
		max_rss = CASE WHEN ? = 1 THEN ? ELSE max_rss END
		WHERE job_id = ? AND number = ? AND state = ?`
)

// applyChange applies one change. It returns a guardError for an outcome that
// belongs in the change's slot and any other error for a failure that must
// abort the transaction.
func applyChange(w *writer, c *store.Change) error {
	to := c.To()
	if !c.Guarded() {
		return guardf(domain.ErrInvalid, "job %d: change has no states to guard on; give it a Move, or the states the job must be in (In)", c.JobID)
	}
	var (
		cur      domain.JobState
		attempts int
	)
	if err := w.queryRow(jobGuardSQL, c.JobID).Scan(&cur, &attempts); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return guardf(store.ErrNotFound, "job %d does not exist", c.JobID)
		}
		return interpretError(fmt.Sprintf("read job %d", c.JobID), err)
	}
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
		query := transitionSQL
		args := []any{w.rev, to, c.Reason, c.Message, timeArg(c.At), started, finished, cancel, cancel,
			boolArg(c.CountPreemption), timeArg(c.NextAttempt), c.JobID, cur}
		if err := expectOneRow(w, query, args...); err != nil {
			return fmt.Errorf("move job %d from %s to %s: %w", c.JobID, cur, to, err)
		}
		attempt := 0
		if c.Attempt != nil {
			attempt = c.Attempt.Number
		}
		if _, err := w.exec(insertEventSQL, c.JobID, attempt, timeArg(c.At), cur, to, c.Actor, c.Reason, c.Message); err != nil {
			return interpretError(fmt.Sprintf("record event of job %d", c.JobID), err)
		}
	} else {
		if c.SetReason {
			if err := expectOneRow(w, setReasonSQL, w.rev, c.Reason, c.Message, c.JobID, cur); err != nil {
				return fmt.Errorf("set reason of job %d: %w", c.JobID, err)
			}
		}
		if c.RequestCancel {
			if err := expectOneRow(w, requestCancelSQL, w.rev, c.JobID, cur); err != nil {
				return fmt.Errorf("request cancel of job %d: %w", c.JobID, err)
			}
		}
		if c.RequestPreempt {
			if err := expectOneRow(w, requestPreemptSQL, w.rev, c.JobID, cur); err != nil {
				return fmt.Errorf("request preemption of job %d: %w", c.JobID, err)
			}
		}
	}

	if c.Attempt != nil {
		return applyAttempt(w, c, attempts)
	}
	return nil
}

// What a transition does to cancel_requested (the values transitionSQL
// understands).
const (
	cancelClear = 0
	cancelSet   = 1
	cancelKeep  = 2
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
		if _, err := w.exec(insertAttemptSQL, c.JobID, a.Number, a.To, a.Reason, a.Message, exitCodeArg(a.ExitCode),
			a.Node, column.GPUs(a.GPUs), timeArg(c.At), started, finished, boolArg(a.Borrowed)); err != nil {
			if isUniqueViolation(err) {
				return guardf(store.ErrConflict, "job %d: attempt %d already exists", c.JobID, a.Number)
			}
			return interpretError(fmt.Sprintf("create attempt %d of job %d", a.Number, c.JobID), err)
		}
		if err := expectOneRow(w, bumpAttemptsSQL, w.rev, c.JobID, jobAttempts); err != nil {
			return fmt.Errorf("count attempt %d of job %d: %w", a.Number, c.JobID, err)
		}
		return nil
	}
	if len(a.From) == 0 {
		return guardf(domain.ErrInvalid, "job %d attempt %d: change has no From states; name the states the attempt must be in", c.JobID, a.Number)
	}
	var cur domain.AttemptState
	if err := w.queryRow(attemptGuardSQL, c.JobID, a.Number).Scan(&cur); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return guardf(store.ErrNotFound, "job %d has no attempt %d", c.JobID, a.Number)
		}
		return interpretError(fmt.Sprintf("read attempt %d of job %d", a.Number, c.JobID), err)
	}
	if !slices.Contains(a.From, cur) {
		return guardf(store.ErrConflict, "job %d attempt %d is %s, not %v", c.JobID, a.Number, cur, a.From)
	}
	if err := expectOneRow(w, updateAttemptSQL, a.To, a.Reason, a.Message, exitCodeArg(a.ExitCode),
		a.Node, a.Node, boolArg(a.GPUs != nil), column.GPUs(a.GPUs),
		started, finished, boolArg(a.Usage != nil), usageOf(a).CPUSeconds, boolArg(a.Usage != nil), int64(usageOf(a).MaxRSS),
		c.JobID, a.Number, cur); err != nil {
		return fmt.Errorf("move job %d attempt %d from %s to %s: %w", c.JobID, a.Number, cur, a.To, err)
	}
	return nil
}

// expectOneRow runs a guarded UPDATE and fails with a guard conflict unless it
// changed exactly one row. The writer is the only one writing, so after the
// guard read this only fails if the guard and the update disagree.
func expectOneRow(w *writer, query string, args ...any) error {
	res, err := w.exec(query, args...)
	if err != nil {
		return interpretError("update", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return interpretError("update", err)
	}
	if n != 1 {
		return guardError{fmt.Errorf("the row changed underneath (%d rows matched the guard): %w", n, store.ErrConflict)}
	}
	return nil
}

func usageOf(a *store.AttemptChange) domain.Usage {
	if a.Usage == nil {
		return domain.Usage{}
	}
	return *a.Usage
}
