package sqlite

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/column"
	"trainyard/internal/store/sqlstore"
)

const (
	insertSnapshotSQL = `INSERT INTO snapshots (hash, spec_json) VALUES (?, ?) ON CONFLICT (hash) DO NOTHING`
	insertJobSQL      = `INSERT INTO jobs (id, name, project, pool, state, reason, message, priority, submitter,
		submitted_at, updated_at, spec_hash, output_dir, idempotency_key, req_gpus, req_cpus, req_memory, req_nodes,
		req_timeout_ns, preemptible, rerun_of, sweep_id, rev)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	insertEventSQL = `INSERT INTO events (job_id, attempt, at, from_state, to_state, actor, reason, message)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
	// lastJobIDSQL is the highest job id ever handed out: AUTOINCREMENT
	// keeps it in sqlite_sequence (deleted jobs' ids are never reused).
	lastJobIDSQL = `SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'jobs'), 0),
		COALESCE((SELECT MAX(id) FROM jobs), 0))`
)

// nextJobID hands out the id of a new job in the running transaction. The
// first call of a transaction reads the highest id ever used; later ones
// count on from it. CreateJob is the only writer of jobs rows, so ids
// handed out here are unused; one whose request rolls back is skipped, as
// AUTOINCREMENT skips an id whose insert rolled back.
func (w *writer) nextJobID() (int64, error) {
	if w.jobID == 0 {
		if err := w.queryRow(lastJobIDSQL).Scan(&w.jobID); err != nil {
			return 0, interpretError("create job: read the last job id", err)
		}
	}
	w.jobID++
	return w.jobID, nil
}

// jobByIdemKeySQL finds a submitter's job by its idempotency key.
var jobByIdemKeySQL = sqlstore.QJobByIdemKey.SQL(sqlstore.SQLite)

// CreateJob stores a new queued job, its config snapshot (shared with every
// job of the same spec) and its submit event in one transaction. The audit
// record is appended in that transaction with "{id}" in its Target
// replaced by the new job's id; an idempotent replay writes none.
func (s *Store) CreateJob(ctx context.Context, p store.NewJob, audit domain.AuditRecord) (domain.Job, bool, error) {
	return s.createJob(ctx, p, audit, nil)
}

// createJob is CreateJob; look, when not nil, runs in the write request
// once it is known to store a new job, before it does.
func (s *Store) createJob(ctx context.Context, p store.NewJob, audit domain.AuditRecord, look func(w *writer) error) (domain.Job, bool, error) {
	if err := column.CheckNewJob(p); err != nil {
		return domain.Job{}, false, err
	}
	var (
		job     domain.Job
		created bool
	)
	err := s.write(ctx, func(w *writer) error {
		job, created = domain.Job{}, false
		w.repeats.keep = true // it adds at most one job, reported below
		if p.IdempotencyKey != "" {
			existing, err := sqlstore.ScanJob(w.queryRow(jobByIdemKeySQL, p.Submitter, p.IdempotencyKey), true)
			switch {
			case err == nil:
				job = existing
				w.audit.skip = true // a replay changes nothing
				job.Code, err = w.jobCodeIn(job.ID)
				return err
			case !errors.Is(err, sql.ErrNoRows):
				return interpretError("create job: look up idempotency key", err)
			}
		}
		if look != nil {
			if err := look(w); err != nil {
				return err
			}
		}
		j, err := w.addJob(p)
		if err != nil {
			return err
		}
		job = j
		w.audit.id = j.ID // fills "{id}" in the attached audit records' Target
		w.repeats.created = p.Submitter
		// As a look reads it (sqlstore.SameSpecRow).
		w.repeats.createdJob = domain.Job{ID: j.ID, Submitter: p.Submitter, SpecHash: p.SpecHash,
			State: j.State, SubmittedAt: j.SubmittedAt, IdempotencyKey: p.IdempotencyKey}
		created = true
		return nil
	}, withAudit(audit), createsJob)
	if err != nil {
		return domain.Job{}, false, err
	}
	return job, created, nil
}

// scanJobs reads list rows (ScanJob without spec) into a slice sized for
// size rows, and closes rows.
func scanJobs(rows *sql.Rows, size int) ([]domain.Job, error) {
	defer rows.Close()
	jobs := sqlstore.JobsFor(size)
	for rows.Next() {
		j, err := sqlstore.ScanJob(rows, false)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, rows.Err()
}

// LiveJobs implements store.Jobs: the live jobs and the newest revision,
// read in one transaction (one snapshot of the database).
func (s *Store) LiveJobs(ctx context.Context) ([]domain.Job, store.JobCursor, error) {
	f := store.JobFilter{States: domain.LiveJobStates(), Ascending: true}
	query, args := sqlstore.ListJobsQuery(sqlstore.SQLite, f)
	countQuery, countArgs, _ := sqlstore.CountJobsQuery(sqlstore.SQLite, f)
	return s.jobsSince(ctx, "list live jobs", query.SQL(sqlstore.SQLite), args, countQuery.SQL(sqlstore.SQLite), countArgs)
}

// ChangedJobs implements store.Jobs. Revisions follow commit order (one
// writer numbers its transactions), so every job written after the
// cursor's transaction has a higher one.
func (s *Store) ChangedJobs(ctx context.Context, since store.JobCursor) ([]domain.Job, store.JobCursor, error) {
	// Without ORDER BY the rev index serves the range; rows are few and
	// sorted here.
	jobs, cur, err := s.jobsSince(ctx, "list changed jobs", `SELECT `+sqlstore.ListCols+` FROM jobs WHERE rev > ?`, []any{int64(since)}, "", nil)
	slices.SortFunc(jobs, func(a, b domain.Job) int { return cmp.Compare(a.ID, b.ID) })
	return jobs, cur, err
}

// ChangedJobsWith implements store.Jobs: ChangedJobs' read, the active
// attempts of its jobs and the settings revision, in one read
// transaction.
func (s *Store) ChangedJobsWith(ctx context.Context, since store.JobCursor) (store.JobChanges, error) {
	var ch store.JobChanges
	cur, err := s.readAtRev(ctx, "list changed jobs", func(tx *sql.Tx) error {
		st, err := s.txStmt(ctx, tx, qChangedJobs)
		if err != nil {
			return err
		}
		rows, err := st.QueryContext(ctx, int64(since))
		if err != nil {
			return err
		}
		if ch.Jobs, err = scanJobs(rows, 0); err != nil {
			return err
		}
		slices.SortFunc(ch.Jobs, func(a, b domain.Job) int { return cmp.Compare(a.ID, b.ID) })
		if len(ch.Jobs) > 0 {
			ids := make([]int64, len(ch.Jobs))
			for i := range ch.Jobs {
				ids[i] = ch.Jobs[i].ID
			}
			q, args := sqlstore.ActiveAttemptsOfQuery(sqlstore.SQLite, ids)
			st, err := s.txStmt(ctx, tx, q.SQL(sqlstore.SQLite))
			if err != nil {
				return err
			}
			rows, err := st.QueryContext(ctx, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			if ch.Attempts, err = sqlstore.ScanAttempts(ch.Attempts, rows); err != nil {
				return err
			}
		}
		if st, err = s.txStmt(ctx, tx, sqlstore.QSettingsRev.SQL(sqlstore.SQLite)); err != nil {
			return err
		}
		return st.QueryRowContext(ctx).Scan(&ch.SettingsRev)
	})
	ch.Cursor = cur
	return ch, err
}

// qChangedJobs is ChangedJobs' statement. Without ORDER BY the rev index
// serves the range; rows are few and sorted after.
var qChangedJobs = `SELECT ` + sqlstore.ListCols + ` FROM jobs WHERE rev > ?`

// txStmt returns the statement of query, prepared once on the readers
// (readStmt), for tx: a read made every cycle is not parsed every cycle.
func (s *Store) txStmt(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, error) {
	st, err := s.readStmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return tx.StmtContext(ctx, st), nil
}

// jobsSince runs query, and reads the newest revision, in one read
// transaction, and returns the rows with that revision as cursor;
// countQuery, when set, sizes the result first.
func (s *Store) jobsSince(ctx context.Context, action, query string, args []any, countQuery string, countArgs []any) ([]domain.Job, store.JobCursor, error) {
	var jobs []domain.Job
	cur, err := s.readAtRev(ctx, action, func(tx *sql.Tx) error {
		size := 0
		if countQuery != "" {
			if err := tx.QueryRowContext(ctx, countQuery, countArgs...).Scan(&size); err != nil {
				return err
			}
		}
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		jobs, err = scanJobs(rows, size)
		return err
	})
	return jobs, cur, err
}

// LiveJobRevs implements store.Jobs: the live jobs' ids and revisions
// and the newest revision, in one read transaction.
func (s *Store) LiveJobRevs(ctx context.Context) ([]store.JobRev, store.JobCursor, error) {
	states := domain.LiveJobStates()
	args := make([]any, len(states))
	for i, st := range states {
		args[i] = string(st)
	}
	var revs []store.JobRev
	cur, err := s.readAtRev(ctx, "list live job revisions", func(tx *sql.Tx) error {
		// Each state's range of the (state, id) index comes in id order:
		// sorted here, not in a temporary b-tree.
		rows, err := tx.QueryContext(ctx, `SELECT id, rev FROM jobs WHERE state IN (?`+strings.Repeat(", ?", len(states)-1)+`)`, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, rev int64
			if err := rows.Scan(&id, &rev); err != nil {
				return err
			}
			revs = append(revs, store.JobRev{ID: id, Rev: store.JobCursor(rev)})
		}
		return rows.Err()
	})
	slices.SortFunc(revs, func(a, b store.JobRev) int { return cmp.Compare(a.ID, b.ID) })
	return revs, cur, err
}

// jobsByIDChunk bounds the ids of one statement of JobsByID, well below
// SQLite's limit on a statement's parameters.
const jobsByIDChunk = 500

// JobsByID implements store.Jobs, in one read transaction.
func (s *Store) JobsByID(ctx context.Context, ids []int64) ([]domain.Job, error) {
	if len(ids) == 0 {
		return nil, s.checkOpen()
	}
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	jobs := sqlstore.JobsFor(len(ids))
	_, err := s.readAtRev(ctx, "list jobs by id", func(tx *sql.Tx) error {
		for len(ids) > 0 {
			n := min(len(ids), jobsByIDChunk)
			args := make([]any, n)
			for i, id := range ids[:n] {
				args[i] = id
			}
			rows, err := tx.QueryContext(ctx, `SELECT `+sqlstore.ListCols+` FROM jobs WHERE id IN (?`+strings.Repeat(", ?", n-1)+`) ORDER BY id`, args...)
			if err != nil {
				return err
			}
			some, err := scanJobs(rows, n)
			if err != nil {
				return err
			}
			jobs = append(jobs, some...)
			ids = ids[n:]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return jobs, nil
}

// readAtRev runs read in one read transaction, after reading the newest
// revision, which it returns: every write read saw has a revision no
// greater.
func (s *Store) readAtRev(ctx context.Context, action string, read func(tx *sql.Tx) error) (store.JobCursor, error) {
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	tx, err := s.readDB.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return 0, interpretError(action, err)
	}
	defer tx.Rollback()
	var rev sql.NullInt64 // a bare MAX over the rev index reads one entry
	st, err := s.txStmt(ctx, tx, `SELECT MAX(rev) FROM jobs`)
	if err != nil {
		return 0, interpretError(action, err)
	}
	if err := st.QueryRowContext(ctx).Scan(&rev); err != nil {
		return 0, interpretError(action, err)
	}
	if err := read(tx); err != nil {
		return 0, interpretError(action, err)
	}
	return store.JobCursor(rev.Int64), nil
}

// addJob writes a new job (its snapshot, row, submit event, code package,
// dependencies) in the running transaction and returns it.
func (w *writer) addJob(p store.NewJob) (domain.Job, error) {
	// The id comes first, so the row is written once, with its output
	// directory, which names the id.
	id, err := w.nextJobID()
	if err != nil {
		return domain.Job{}, err
	}
	var dir string
	if p.OutputDir != nil {
		dir = p.OutputDir(id)
	}
	if err := w.storeSnapshot(p.SpecHash, p.SpecJSON); err != nil {
		return domain.Job{}, err
	}
	at := timeArg(p.SubmittedAt)
	r := p.Spec.Resources
	// Every argument is of a type database/sql passes on as it is
	// (string, int64, float64, nil): one of a named type would be
	// converted through reflection, and a Valuer called, on every
	// submit.
	var dirArg, rerunArg, sweepArg any
	if dir != "" {
		dirArg = dir
	}
	if p.RerunOf != 0 {
		rerunArg = p.RerunOf
	}
	if p.Sweep != 0 {
		sweepArg = p.Sweep
	}
	state, reason, msg := sqlstore.NewJobState(p)
	if _, err := w.exec(insertJobSQL, id, p.Spec.Name, p.Spec.Project, p.Spec.Pool, string(state),
		string(reason), msg, string(p.Spec.Policy.Priority), p.Submitter, at, at, p.SpecHash,
		dirArg, p.IdempotencyKey,
		int64(r.GPUs), r.CPUs, int64(r.Memory), int64(r.Nodes), int64(p.Spec.Policy.Timeout), int64(boolArg(p.Spec.Policy.Preemptible)),
		rerunArg, sweepArg, w.rev); err != nil {
		if dir != "" && isUniqueViolation(err) && strings.Contains(err.Error(), "jobs.output_dir") {
			return domain.Job{}, fmt.Errorf("create job: output directory %s is already used by another job: %w", dir, store.ErrConflict)
		}
		return domain.Job{}, interpretError("create job", err)
	}
	if _, err := w.exec(insertEventSQL, id, int64(0), at, "", string(state), p.Actor, string(reason), msg); err != nil {
		return domain.Job{}, interpretError("create job: record submit event", err)
	}
	if err := w.insertJobCode(id, p.Code); err != nil { // code.go
		return domain.Job{}, err
	}
	for _, d := range p.Waits {
		if _, err := w.exec(sqlstore.InsertWaitSQL, id, d.Job, d.Sweep, string(d.On)); err != nil {
			return domain.Job{}, interpretError("create job: record its dependencies", err)
		}
	}
	sub := normTime(p.SubmittedAt)
	return domain.Job{
		ID: id, Name: p.Spec.Name, Project: p.Spec.Project, Pool: p.Spec.Pool,
		State: state, Reason: reason, Message: msg, Priority: p.Spec.Policy.Priority,
		Submitter: p.Submitter, SubmittedAt: sub, UpdatedAt: sub,
		Resources: p.Spec.Resources, Timeout: p.Spec.Policy.Timeout, Preemptible: p.Spec.Policy.Preemptible, Spec: p.Spec, SpecJSON: bytes.Clone(p.SpecJSON), SpecHash: p.SpecHash,
		OutputDir: dir, IdempotencyKey: p.IdempotencyKey, Code: cloneCode(p.Code), RerunOf: p.RerunOf,
	}, nil
}
