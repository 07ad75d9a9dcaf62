package sqlstore

import (
	"context"
	"encoding/json"
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
//
// Each change reads its job's row locked (FOR UPDATE on PostgreSQL; SQLite
// has one writer), so no other writer can move the job between the guard
// and the update.
func (s Shared) Apply(ctx context.Context, changes []store.Change) ([]error, error) {
	if len(changes) == 0 {
		if _, err := s.b.Reader(); err != nil {
			return nil, err
		}
		return []error{}, nil
	}
	var slots []error
	fn := func(x Exec) error {
		slots = make([]error, len(changes))
		for i := range changes {
			c := &changes[i]
			err, fatal := x.Savepoint(func() error { return s.applyChange(x, c) })
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
		// Each applied change's audit records, after every change.
		var recs []domain.AuditRecord
		for i := range changes {
			if slots[i] == nil {
				recs = append(recs, changes[i].Audits()...)
			}
		}
		if len(recs) == 0 {
			return nil
		}
		return x.AppendAudit(recs)
	}
	var err error
	if slices.ContainsFunc(changes, store.Change.Audited) {
		err = s.b.WriteAuditing(ctx, fn)
	} else {
		err = s.b.Write(ctx, fn)
	}
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

var (
	qJobGuard = Q(`SELECT state, attempts FROM jobs WHERE id = ?{FOR UPDATE}`)
	// qTransition moves a job. A start (a move to running) keeps the
	// reason and message of a cancel or preemption requested while the
	// attempt was starting, and the request itself: the attempt is about
	// to be stopped for it, and its end must be read as that stop. Only a
	// move back to the queue or to an end clears a preemption request.
	qTransition = Q(`UPDATE jobs SET {REV}, state = ?,
		reason = CASE WHEN CAST(? AS INTEGER) = 1 AND (cancel_requested = 1 OR preempt_requested = 1) THEN reason ELSE ? END,
		message = CASE WHEN CAST(? AS INTEGER) = 1 AND (cancel_requested = 1 OR preempt_requested = 1) THEN message ELSE ? END,
		updated_at = ?,
		started_at = COALESCE(started_at, ?), finished_at = COALESCE(?, finished_at),
		cancel_requested = CASE WHEN CAST(? AS INTEGER) = 2 THEN cancel_requested ELSE CAST(? AS INTEGER) END,
		preempt_requested = CASE WHEN CAST(? AS INTEGER) = 2 THEN preempt_requested ELSE 0 END,
		preemptions = preemptions + ?,
		next_attempt_at = ?
		WHERE id = ? AND state = ?`)
	qSetPriority    = Q(`UPDATE jobs SET {REV}, priority = ? WHERE id = ? AND state = ?`)
	qSetReason      = Q(`UPDATE jobs SET {REV}, reason = ?, message = ? WHERE id = ? AND state = ?`)
	qRequestCancel  = Q(`UPDATE jobs SET {REV}, cancel_requested = 1 WHERE id = ? AND state = ?`)
	qRequestPreempt = Q(`UPDATE jobs SET {REV}, preempt_requested = 1 WHERE id = ? AND state = ?`)
	qBumpAttempts   = Q(`UPDATE jobs SET {REV}, attempts = attempts + 1 WHERE id = ? AND attempts = ?`)
	// qTouchJob stamps a job whose change wrote only its attempt: the
	// attempt is part of what showing the job shows (store.JobRev).
	qTouchJob    = Q(`UPDATE jobs SET {REV} WHERE id = ?`)
	qEventInsert = Q(`INSERT INTO events (job_id, attempt, at, from_state, to_state, actor, reason, message)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
	qAttemptInsert = Q(`INSERT INTO attempts (job_id, number, state, reason, message, exit_code, node, gpus,
		created_at, started_at, finished_at, borrowed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	qAttemptGuard  = Q(`SELECT state FROM attempts WHERE job_id = ? AND number = ?{FOR UPDATE}`)
	qAttemptUpdate = Q(`UPDATE attempts SET state = ?, reason = ?, message = ?,
		exit_code = COALESCE(?, exit_code),
		node = CASE WHEN CAST(? AS TEXT) = '' THEN node ELSE CAST(? AS TEXT) END,
		gpus = CASE WHEN CAST(? AS INTEGER) = 1 THEN CAST(? AS TEXT) ELSE gpus END,
		started_at = COALESCE(started_at, ?), finished_at = COALESCE(?, finished_at),
		cpu_seconds = CASE WHEN CAST(? AS INTEGER) = 1 THEN CAST(? AS DOUBLE PRECISION) ELSE cpu_seconds END,
		max_rss = CASE WHEN CAST(? AS INTEGER) = 1 THEN CAST(? AS BIGINT) ELSE max_rss END,
		gpu_seconds = CASE WHEN CAST(? AS INTEGER) = 1 THEN CAST(? AS DOUBLE PRECISION) ELSE gpu_seconds END
		WHERE job_id = ? AND number = ? AND state = ?`)
)

// What a transition does to cancel_requested (the values qTransition
// understands).
const (
	cancelClear = 0
	cancelSet   = 1
	cancelKeep  = 2
)

// applyChange applies one change. It returns a guardError for an outcome that
// belongs in the change's slot and any other error for a failure that must
// abort the transaction. The guard read is the only statement that waits
// for an answer before the change's updates, which PostgreSQL sends
// together when the savepoint ends.
func (s Shared) applyChange(x Exec, c *store.Change) error {
	to := c.To()
	if !c.Guarded() {
		return guardf(domain.ErrInvalid, "job %d: change has no states to guard on; give it a Move, or the states the job must be in (In)", c.JobID)
	}
	if c.Priority != "" && (!c.Move.IsZero() || c.Priority.Rank() < 0) {
		return guardf(domain.ErrInvalid, "job %d: cannot set priority %q with this change; give a known class (low, normal, high, urgent) in a change without a Move", c.JobID, c.Priority)
	}
	if err := checkTokens(c); err != nil {
		return err
	}
	var lineage []byte // the manifest's
	if m := c.Manifest; m != nil {
		if c.Attempt == nil || m.JobID != c.JobID || m.Attempt != c.Attempt.Number {
			return guardf(domain.ErrInvalid, "job %d: a manifest is recorded only with a change to its own attempt, not to job %d attempt %d", c.JobID, m.JobID, m.Attempt)
		}
		var err error
		if lineage, err = json.Marshal(m.Lineage); err != nil {
			return guardf(domain.ErrInvalid, "job %d attempt %d: encode the manifest's lineage: %v", c.JobID, m.Attempt, err)
		}
	}
	var (
		state    string
		attempts int
	)
	if err := x.QueryRow(qJobGuard, c.JobID).Scan(&state, &attempts); err != nil {
		if s.b.IsNoRows(err) {
			return guardf(store.ErrNotFound, "job %d does not exist", c.JobID)
		}
		return s.err(fmt.Sprintf("read job %d", c.JobID), err)
	}
	cur := domain.JobState(state)
	if !c.Applies(cur) {
		return guardf(store.ErrConflict, "job %d is %s, not %v", c.JobID, cur, c.Guard())
	}

	// jobWritten: the change writes the job's row, which stamps it with
	// the transaction's revision.
	jobWritten := to != "" || c.SetReason || c.RequestCancel || c.RequestPreempt || c.Priority != ""
	if to != "" {
		var started, finished any
		if to == domain.JobRunning {
			started = TimeArg(c.At)
		}
		if to.Terminal() {
			finished = TimeArg(c.At)
		}
		cancel := cancelKeep
		switch {
		case to.Terminal() || to == domain.JobQueued:
			cancel = cancelClear
		case c.RequestCancel:
			cancel = cancelSet
		}
		// A start keeps the reason of a pending request; an end or a
		// requeue clears a preemption request (cancelClear), anything
		// else keeps it (cancelKeep).
		keepReason, preempt := BoolArg(to == domain.JobRunning), cancelKeep
		if cancel == cancelClear {
			preempt = cancelClear
		}
		if err := s.queueOneRow(x, fmt.Sprintf("move job %d from %s to %s", c.JobID, cur, to), qTransition,
			string(to), keepReason, string(c.Reason), keepReason, c.Message, TimeArg(c.At), started, finished, cancel, cancel,
			preempt, BoolArg(c.CountPreemption), TimeArg(c.NextAttempt), c.JobID, state); err != nil {
			return err
		}
		attempt := 0
		if c.Attempt != nil {
			attempt = c.Attempt.Number
		}
		if err := x.Queue(fmt.Sprintf("record event of job %d", c.JobID), qEventInsert, c.JobID, attempt, TimeArg(c.At),
			state, string(to), c.Actor, string(c.Reason), c.Message); err != nil {
			return err
		}
		if to.Terminal() {
			// The job end its notifications are worked out from (notify.go),
			// committed with the end itself.
			if err := x.Queue(fmt.Sprintf("record end of job %d", c.JobID), qJobEndInsert, c.JobID, string(to), unixNanoOrZero(c.At)); err != nil {
				return err
			}
		}
	} else {
		if c.SetReason {
			if err := s.queueOneRow(x, fmt.Sprintf("set reason of job %d", c.JobID), qSetReason, string(c.Reason), c.Message, c.JobID, state); err != nil {
				return err
			}
		}
		if c.RequestCancel {
			if err := s.queueOneRow(x, fmt.Sprintf("request cancel of job %d", c.JobID), qRequestCancel, c.JobID, state); err != nil {
				return err
			}
		}
		if c.RequestPreempt {
			if err := s.queueOneRow(x, fmt.Sprintf("request preemption of job %d", c.JobID), qRequestPreempt, c.JobID, state); err != nil {
				return err
			}
		}
		if c.Priority != "" {
			if err := s.queueOneRow(x, fmt.Sprintf("set the priority of job %d", c.JobID), qSetPriority, string(c.Priority), c.JobID, state); err != nil {
				return err
			}
			// The state stays: the event says what changed beside it.
			if err := x.Queue(fmt.Sprintf("record event of job %d", c.JobID), qEventInsert, c.JobID, 0, TimeArg(c.At),
				state, state, c.Actor, string(c.Reason), c.Message); err != nil {
				return err
			}
		}
	}

	if c.Attempt != nil {
		if err := s.applyAttempt(x, c, attempts, jobWritten); err != nil {
			return err
		}
	}
	if c.Manifest != nil {
		return s.queueManifest(x, *c.Manifest, lineage)
	}
	return nil
}

// applyAttempt creates or updates the attempt of a change whose job guard
// held. jobAttempts is the job's attempt count before the change;
// jobWritten says whether the change wrote the job's row already. An
// attempt written without its job's row stamps the row too, so that the
// job's revision changes with everything showing it shows.
func (s Shared) applyAttempt(x Exec, c *store.Change, jobAttempts int, jobWritten bool) error {
	a := c.Attempt
	if a.To == "" {
		return guardf(domain.ErrInvalid, "job %d attempt %d: change has no target state", c.JobID, a.Number)
	}
	var started, finished any
	if a.To == domain.AttemptRunning {
		started = TimeArg(c.At)
	}
	if a.To.Terminal() {
		finished = TimeArg(c.At)
	}
	if a.Create {
		if a.Number != jobAttempts+1 {
			return guardf(store.ErrConflict, "job %d: cannot create attempt %d, the next attempt is %d", c.JobID, a.Number, jobAttempts+1)
		}
		if err := x.QueueCheck(func(_ int64, err error) error {
			if s.b.IsUniqueViolation(err) {
				return guardf(store.ErrConflict, "job %d: attempt %d already exists", c.JobID, a.Number)
			}
			return s.err(fmt.Sprintf("create attempt %d of job %d", a.Number, c.JobID), err)
		}, qAttemptInsert, c.JobID, a.Number, string(a.To), string(a.Reason), a.Message, exitCodeArg(a.ExitCode),
			a.Node, column.GPUs(a.GPUs), TimeArg(c.At), started, finished, BoolArg(a.Borrowed)); err != nil {
			return err
		}
		if err := s.queueOneRow(x, fmt.Sprintf("count attempt %d of job %d", a.Number, c.JobID), qBumpAttempts, c.JobID, jobAttempts); err != nil {
			return err
		}
		if a.Token != nil {
			return s.grantToken(x, c.JobID, a.Number, a.Token.Token)
		}
		return nil
	}
	if len(a.From) == 0 {
		return guardf(domain.ErrInvalid, "job %d attempt %d: change has no From states; name the states the attempt must be in", c.JobID, a.Number)
	}
	var state string
	if err := x.QueryRow(qAttemptGuard, c.JobID, a.Number).Scan(&state); err != nil {
		if s.b.IsNoRows(err) {
			return guardf(store.ErrNotFound, "job %d has no attempt %d", c.JobID, a.Number)
		}
		return s.err(fmt.Sprintf("read attempt %d of job %d", a.Number, c.JobID), err)
	}
	cur := domain.AttemptState(state)
	if !slices.Contains(a.From, cur) {
		return guardf(store.ErrConflict, "job %d attempt %d is %s, not %v", c.JobID, a.Number, cur, a.From)
	}
	var u domain.Usage
	if a.Usage != nil {
		u = *a.Usage
	}
	if err := s.queueOneRow(x, fmt.Sprintf("move job %d attempt %d from %s to %s", c.JobID, a.Number, cur, a.To), qAttemptUpdate,
		string(a.To), string(a.Reason), a.Message, exitCodeArg(a.ExitCode),
		a.Node, a.Node, BoolArg(a.GPUs != nil), column.GPUs(a.GPUs),
		started, finished, BoolArg(a.Usage != nil), u.CPUSeconds, BoolArg(a.Usage != nil), int64(u.MaxRSS),
		BoolArg(a.Usage != nil), u.GPUSeconds, c.JobID, a.Number, state); err != nil {
		return err
	}
	if !jobWritten {
		if err := x.Queue(fmt.Sprintf("stamp job %d with its attempt's write", c.JobID), qTouchJob, c.JobID); err != nil {
			return err
		}
	}
	if cur.Terminal() || !a.To.Terminal() {
		return nil
	}
	// The attempt ended: add it to the hours it held resources in and to
	// its job's totals, which the review reports read instead of it.
	action := fmt.Sprintf("add the usage of job %d attempt %d", c.JobID, a.Number)
	if err := x.Queue(action, qRollupAttempt, c.JobID, a.Number); err != nil {
		return err
	}
	if err := x.Queue(action, qJobUsage, c.JobID, a.Number); err != nil {
		return err
	}
	if a.EndTokens != nil {
		return x.Queue(fmt.Sprintf("delete the job tokens of job %d attempt %d", c.JobID, a.Number),
			qTokenDeleteOfSubj, domain.JobTokenSubject(c.JobID, a.Number))
	}
	return nil
}

// checkTokens refuses a change whose attempt's token writes do not fit it.
func checkTokens(c *store.Change) error {
	a := c.Attempt
	if a == nil {
		return nil
	}
	if a.Token != nil && !a.Create {
		return guardf(domain.ErrInvalid, "job %d attempt %d: a job token is stored only with the change that creates its attempt (Create)", c.JobID, a.Number)
	}
	if a.EndTokens != nil && !a.To.Terminal() {
		return guardf(domain.ErrInvalid, "job %d attempt %d: its job tokens end only with a change that ends the attempt, not one to %s", c.JobID, a.Number, a.To)
	}
	if t := a.Token; t != nil {
		if want := domain.JobTokenSubject(c.JobID, a.Number); t.Token.Subject != want {
			return guardf(domain.ErrInvalid, "job %d attempt %d: its job token's subject must be %q, not %q", c.JobID, a.Number, want, t.Token.Subject)
		}
		if t.Token.Hash == "" {
			return guardf(domain.ErrInvalid, "job %d attempt %d: its job token's hash is empty; store the SHA-256 of the secret", c.JobID, a.Number)
		}
	}
	return nil
}

// grantToken stores t, the job token of a new attempt, in the change that
// creates the attempt.
func (s Shared) grantToken(x Exec, jobID int64, attempt int, t store.Token) error {
	return x.QueueCheck(func(_ int64, err error) error {
		if s.b.IsUniqueViolation(err) {
			return guardf(store.ErrConflict, "job %d attempt %d: a token with the same hash already exists", jobID, attempt)
		}
		return s.err(fmt.Sprintf("store the job token of job %d attempt %d", jobID, attempt), err)
	}, qTokenInsertNoID, t.Name, t.Subject, t.Role, t.Hash, TimeArg(t.CreatedAt), TimeArg(t.ExpiresAt), TimeArg(t.RevokedAt))
}

// queueOneRow queues a guarded UPDATE that must change exactly one row; any
// other count is a guard conflict. The guard read locked the row, so this
// only fails if the guard and the update disagree.
func (s Shared) queueOneRow(x Exec, action string, q Query, args ...any) error {
	return x.QueueCheck(func(n int64, err error) error {
		if err != nil {
			return s.err(action, err)
		}
		if n != 1 {
			return guardError{fmt.Errorf("%s: the row changed underneath (%d rows matched the guard): %w", action, n, store.ErrConflict)}
		}
		return nil
	}, q, args...)
}

func exitCodeArg(code *int) any {
	if code == nil {
		return nil
	}
	return int64(*code)
}
