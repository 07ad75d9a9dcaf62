package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/column"
	"trainyard/internal/store/sqlstore"
)

const (
	insertSnapshotSQL = `INSERT INTO snapshots (hash, spec_json) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING`
	insertEventSQL    = `INSERT INTO events (job_id, attempt, at, from_state, to_state, actor, reason, message)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`
)

var (
	getJobSQL       = sqlstore.QJobGet.SQL(sqlstore.Postgres)
	jobByIdemKeySQL = sqlstore.QJobByIdemKey.SQL(sqlstore.Postgres)
)

// Names of the unique constraints CreateJob can violate.
const (
	outputDirConstraint = "jobs_output_dir_key"
	idemKeyConstraint   = "jobs_submitter_idempotency_key"
)

// nullString stores the empty string as NULL (for UNIQUE columns where empty
// means "none").
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// CreateJob stores a new queued job, its config snapshot (shared with every
// job of the same spec) and its submit event in one transaction. The audit
// record is appended in that transaction with "{id}" in its Target
// replaced by the new job's id; an idempotent replay writes none. The job's id is allocated before its row is written, so all its
// statements travel to the server in one round trip.
func (s *Store) CreateJob(ctx context.Context, p store.NewJob, audit domain.AuditRecord) (domain.Job, bool, error) {
	return s.createJob(ctx, p, audit)
}

// createJob is CreateJob, its request marked by opts too.
func (s *Store) createJob(ctx context.Context, p store.NewJob, audit domain.AuditRecord, opts ...writeOpt) (domain.Job, bool, error) {
	if err := column.CheckNewJob(p); err != nil {
		return domain.Job{}, false, err
	}
	var (
		job     domain.Job
		created bool
	)
	err := s.write(ctx, func(w *writer) error {
		job, created = domain.Job{}, false
		if p.IdempotencyKey != "" {
			existing, err := sqlstore.ScanJob(w.queryRow(jobByIdemKeySQL, p.Submitter, p.IdempotencyKey), true)
			switch {
			case err == nil:
				job = existing
				w.audit.skip = true // a replay changes nothing
				job.Code, err = w.jobCodeIn(job.ID)
				return err
			case !errors.Is(err, pgx.ErrNoRows):
				return interpretError("create job: look up idempotency key", err)
			}
		}
		j, err := w.addJob(p)
		if err != nil {
			return err
		}
		job = j
		w.audit.id = j.ID // fills "{id}" in the attached audit records' Target
		created = true
		return nil
	}, append([]writeOpt{needsJobID, withAudit(audit)}, opts...)...)
	if err != nil {
		return domain.Job{}, false, err
	}
	return job, created, nil
}

// GetJob returns the job with its Spec and SpecJSON, or store.ErrNotFound.
// It replaces the shared GetJob to read the job and its code package in
// one round trip.
func (s *Store) GetJob(ctx context.Context, id int64) (domain.Job, error) {
	if err := s.checkOpen(); err != nil {
		return domain.Job{}, err
	}
	// One round trip: the job, then its code package.
	b := &pgx.Batch{}
	b.Queue(getJobSQL, id)
	b.Queue(jobCodeSQL, id)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	j, err := sqlstore.ScanJob(br.QueryRow(), true)
	if err != nil {
		return domain.Job{}, interpretError(fmt.Sprintf("get job %d", id), err)
	}
	if j.Code, err = scanCode(br.QueryRow(), id); err != nil { // code.go
		return domain.Job{}, err
	}
	return j, nil
}

// scanJobs reads list rows (sqlstore.ListCols) into a slice sized for size
// rows, and closes rows.
func scanJobs(rows pgx.Rows, size int) ([]domain.Job, error) {
	defer rows.Close()
	jobs := sqlstore.JobsFor(size)
	scan := newJobScanner()
	for rows.Next() {
		jobs = append(jobs, domain.Job{})
		if err := scan(rows, &jobs[len(jobs)-1]); err != nil {
			return nil, err
		}
	}
	return jobs, rows.Err()
}

// LiveJobs implements store.Jobs: the live jobs and a cursor, read in one
// snapshot.
func (s *Store) LiveJobs(ctx context.Context) ([]domain.Job, store.JobCursor, error) {
	f := store.JobFilter{States: domain.LiveJobStates(), Ascending: true}
	query, args := sqlstore.ListJobsQuery(sqlstore.Postgres, f)
	countQuery, countArgs, _ := sqlstore.CountJobsQuery(sqlstore.Postgres, f)
	return s.jobsSince(ctx, "list live jobs", query.SQL(sqlstore.Postgres), args, countQuery.SQL(sqlstore.Postgres), countArgs)
}

// ChangedJobs implements store.Jobs. The cursor is the oldest transaction
// still running when the previous look was taken (pg_snapshot_xmin): every
// write that look did not see came from that transaction or a later one,
// committed since or still to commit, so reading from there misses none.
func (s *Store) ChangedJobs(ctx context.Context, since store.JobCursor) ([]domain.Job, store.JobCursor, error) {
	return s.jobsSince(ctx, "list changed jobs", `SELECT `+sqlstore.JobCols+` FROM jobs WHERE changed_xid >= $1::text::xid8 ORDER BY id`,
		[]any{strconv.FormatUint(uint64(since), 10)}, "", nil)
}

// ChangedJobsWith implements store.Jobs: ChangedJobs' read, the active
// attempts of its jobs and the settings revision, in one snapshot.
func (s *Store) ChangedJobsWith(ctx context.Context, since store.JobCursor) (store.JobChanges, error) {
	var ch store.JobChanges
	cur, err := s.readAtXmin(ctx, "list changed jobs", func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+sqlstore.JobCols+` FROM jobs WHERE changed_xid >= $1::text::xid8 ORDER BY id`,
			strconv.FormatUint(uint64(since), 10))
		if err != nil {
			return err
		}
		if ch.Jobs, err = scanJobs(rows, 0); err != nil {
			return err
		}
		if len(ch.Jobs) > 0 {
			ids := make([]int64, len(ch.Jobs))
			for i := range ch.Jobs {
				ids[i] = ch.Jobs[i].ID
			}
			q, args := sqlstore.ActiveAttemptsOfQuery(sqlstore.Postgres, ids)
			rows, err := tx.Query(ctx, q.SQL(sqlstore.Postgres), args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			if ch.Attempts, err = sqlstore.ScanAttempts(ch.Attempts, rows); err != nil {
				return err
			}
		}
		return tx.QueryRow(ctx, sqlstore.QSettingsRev.SQL(sqlstore.Postgres)).Scan(&ch.SettingsRev)
	})
	ch.Cursor = cur
	return ch, err
}

// jobsSince runs query in a read-only repeatable-read transaction and
// returns its rows with the transaction's snapshot xmin as cursor;
// countQuery, when set, sizes the result first.
func (s *Store) jobsSince(ctx context.Context, action, query string, args []any, countQuery string, countArgs []any) ([]domain.Job, store.JobCursor, error) {
	var jobs []domain.Job
	cur, err := s.readAtXmin(ctx, action, func(tx pgx.Tx) error {
		size := 0
		if countQuery != "" {
			if err := tx.QueryRow(ctx, countQuery, countArgs...).Scan(&size); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		jobs, err = scanJobs(rows, size)
		return err
	})
	return jobs, cur, err
}

// LiveJobRevs implements store.Jobs. A job's revision is its
// changed_xid plus one: ChangedJobs(c) reads changed_xid >= c.
func (s *Store) LiveJobRevs(ctx context.Context) ([]store.JobRev, store.JobCursor, error) {
	states := make([]string, 0, 3)
	for _, st := range domain.LiveJobStates() {
		states = append(states, string(st))
	}
	var revs []store.JobRev
	cur, err := s.readAtXmin(ctx, "list live job revisions", func(tx pgx.Tx) error {
		// An xid8 is a 64-bit epoch and xid, within bigint's range.
		rows, err := tx.Query(ctx, `SELECT id, changed_xid::text::bigint + 1 FROM jobs WHERE state = ANY($1::text[]) ORDER BY id`, states)
		if err != nil {
			return err
		}
		defer rows.Close()
		var id, rev int64
		_, err = pgx.ForEachRow(rows, []any{&id, &rev}, func() error {
			revs = append(revs, store.JobRev{ID: id, Rev: store.JobCursor(rev)})
			return nil
		})
		return err
	})
	return revs, cur, err
}

// JobsByID implements store.Jobs.
func (s *Store) JobsByID(ctx context.Context, ids []int64) ([]domain.Job, error) {
	if len(ids) == 0 {
		return nil, s.checkOpen()
	}
	var jobs []domain.Job
	_, err := s.readAtXmin(ctx, "list jobs by id", func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+sqlstore.ListCols+` FROM jobs WHERE id = ANY($1::bigint[]) ORDER BY id`, ids)
		if err != nil {
			return err
		}
		jobs, err = scanJobs(rows, len(ids))
		return err
	})
	if err != nil {
		return nil, err
	}
	return jobs, nil
}

// readAtXmin runs read in a read-only repeatable-read transaction and
// returns the xmin of its snapshot: the oldest transaction then running,
// so every write read did not see has a changed_xid at least as high.
func (s *Store) readAtXmin(ctx context.Context, action string, read func(tx pgx.Tx) error) (store.JobCursor, error) {
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return 0, interpretError(action, err)
	}
	defer tx.Rollback(ctx)
	var xmin string
	if err := tx.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text`).Scan(&xmin); err != nil {
		return 0, interpretError(action, err)
	}
	cursor, err := strconv.ParseUint(xmin, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: read snapshot xmin %q: %w", action, xmin, err)
	}
	if err := read(tx); err != nil {
		return 0, interpretError(action, err)
	}
	return store.JobCursor(cursor), nil
}

// addJob buffers a new job (its snapshot, row, submit event, code package,
// dependencies) in the running transaction and returns it.
func (w *writer) addJob(p store.NewJob) (domain.Job, error) {
	id, err := w.nextJobID()
	if err != nil {
		return domain.Job{}, err
	}
	var dir string
	if p.OutputDir != nil {
		dir = p.OutputDir(id)
	}
	at := timeArg(p.SubmittedAt)
	r := p.Spec.Resources
	b := &w.bulk
	if !w.snaps.Committed(p.SpecHash) {
		b.addSnapshot(p.SpecHash, string(p.SpecJSON))
		w.snaps.Add(p.SpecHash)
	}
	b.jobID = append(b.jobID, id)
	b.jobName, b.jobProject, b.jobPool = append(b.jobName, p.Spec.Name), append(b.jobProject, p.Spec.Project), append(b.jobPool, p.Spec.Pool)
	state, reason, msg := sqlstore.NewJobState(p)
	b.jobState, b.jobReason, b.jobMessage = append(b.jobState, string(state)), append(b.jobReason, string(reason)), append(b.jobMessage, msg)
	b.jobPriority, b.jobSubmitter = append(b.jobPriority, string(p.Spec.Policy.Priority)), append(b.jobSubmitter, p.Submitter)
	b.jobAt, b.jobHash, b.jobIdem = append(b.jobAt, at), append(b.jobHash, p.SpecHash), append(b.jobIdem, p.IdempotencyKey)
	b.jobGPUs, b.jobCPUs, b.jobMem = append(b.jobGPUs, int64(r.GPUs)), append(b.jobCPUs, r.CPUs), append(b.jobMem, int64(r.Memory))
	b.jobNodes, b.jobTimeout = append(b.jobNodes, int64(r.Nodes)), append(b.jobTimeout, int64(p.Spec.Policy.Timeout))
	b.jobPreemptible = append(b.jobPreemptible, boolArg(p.Spec.Policy.Preemptible))
	var rerun *int64
	if p.RerunOf != 0 {
		rerun = &p.RerunOf
	}
	var dirArg *string
	if dir != "" {
		dirArg = &dir
	}
	var sweep *int64
	if p.Sweep != 0 {
		sweep = &p.Sweep
	}
	b.jobRerun, b.jobDir, b.jobSweep = append(b.jobRerun, rerun), append(b.jobDir, dirArg), append(b.jobSweep, sweep)
	b.addEvent(id, 0, at, "", string(state), p.Actor, string(reason), msg)
	for _, d := range p.Waits {
		b.waitJob, b.waitOnJob = append(b.waitJob, id), append(b.waitOnJob, d.Job)
		b.waitOnSweep, b.waitCond = append(b.waitOnSweep, d.Sweep), append(b.waitCond, string(d.On))
	}
	if c := p.Code; c != nil {
		b.codeJob, b.codeSHA = append(b.codeJob, id), append(b.codeSHA, c.SHA256)
		b.codeCommit, b.codeDirty = append(b.codeCommit, c.Commit), append(b.codeDirty, boolArg(c.Dirty))
	}
	sub := normTime(p.SubmittedAt)
	return domain.Job{
		ID: id, Name: p.Spec.Name, Project: p.Spec.Project, Pool: p.Spec.Pool,
		State: state, Reason: reason, Message: msg, Priority: p.Spec.Policy.Priority,
		Submitter: p.Submitter, SubmittedAt: sub, UpdatedAt: sub,
		Resources: p.Spec.Resources, Timeout: p.Spec.Policy.Timeout, Preemptible: p.Spec.Policy.Preemptible, Spec: p.Spec,
		SpecJSON: bytes.Clone(p.SpecJSON), SpecHash: p.SpecHash,
		OutputDir: dir, IdempotencyKey: p.IdempotencyKey, Code: cloneCode(p.Code), RerunOf: p.RerunOf,
	}, nil
}
