package sqlite

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/column"
)

// jobCols are the jobs columns every job query reads, in scanJob order.
const jobCols = `jobs.id, jobs.name, jobs.project, jobs.pool, jobs.state, jobs.reason, jobs.message,
	jobs.priority, jobs.submitter, jobs.submitted_at, jobs.updated_at, jobs.started_at, jobs.finished_at,
	jobs.spec_hash, jobs.output_dir, jobs.attempts, jobs.next_attempt_at, jobs.cancel_requested,
	jobs.idempotency_key, jobs.req_gpus, jobs.req_cpus, jobs.req_memory, jobs.req_nodes,
	jobs.req_timeout_ns, jobs.preemptible, jobs.preempt_requested, jobs.preemptions, jobs.rerun_of`

// fullJobSelect reads jobs with their config snapshot.
const fullJobSelect = `SELECT ` + jobCols + `, snapshots.spec_json
	FROM jobs JOIN snapshots ON snapshots.hash = jobs.spec_hash`

// listCols are jobCols for queries over jobs alone.
var listCols = strings.ReplaceAll(jobCols, "jobs.", "")

const (
	getJobSQL         = fullJobSelect + ` WHERE jobs.id = ?`
	jobByIdemKeySQL   = fullJobSelect + ` WHERE jobs.submitter = ? AND jobs.idempotency_key = ?`
	insertSnapshotSQL = `INSERT INTO snapshots (hash, spec_json) VALUES (?, ?) ON CONFLICT (hash) DO NOTHING`
	insertJobSQL      = `INSERT INTO jobs (name, project, pool, state, reason, message, priority, submitter,
		submitted_at, updated_at, spec_hash, idempotency_key, req_gpus, req_cpus, req_memory, req_nodes,
		req_timeout_ns, preemptible, rerun_of, rev)
		VALUES (?, ?, ?, ?, ?, '', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	setOutputDirSQL = `UPDATE jobs SET output_dir = ?, rev = ? WHERE id = ?`
	insertEventSQL  = `INSERT INTO events (job_id, attempt, at, from_state, to_state, actor, reason, message)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
)

// rowScanner is *sql.Row or *sql.Rows.
type rowScanner interface {
	Scan(dest ...any) error
}

// scanJob reads one row of jobCols, followed by spec_json when withSpec.
func scanJob(sc rowScanner, withSpec bool) (domain.Job, error) {
	var (
		j                                              domain.Job
		submitted, updated, started, finished, nextAtt sql.NullInt64
		outputDir                                      sql.NullString
		cancel, attempts, gpus, memory, nodes          int64
		timeout, preemptible, preemptReq, preemptions  int64
		state, reason, priority                        string
		specJSON                                       []byte
		rerunOf                                        sql.NullInt64
	)
	// Plain string destinations: database/sql converts named string types
	// through reflection, which is measurably slower on list queries.
	dest := []any{&j.ID, &j.Name, &j.Project, &j.Pool, &state, &reason, &j.Message,
		&priority, &j.Submitter, &submitted, &updated, &started, &finished,
		&j.SpecHash, &outputDir, &attempts, &nextAtt, &cancel, &j.IdempotencyKey,
		&gpus, &j.Resources.CPUs, &memory, &nodes, &timeout, &preemptible, &preemptReq, &preemptions, &rerunOf}
	if withSpec {
		dest = append(dest, &specJSON)
	}
	if err := sc.Scan(dest...); err != nil {
		return domain.Job{}, err
	}
	j.State, j.Reason, j.Priority = domain.JobState(state), domain.Reason(reason), domain.Priority(priority)
	j.Attempts = int(attempts)
	j.Resources.GPUs, j.Resources.Memory, j.Resources.Nodes = int(gpus), domain.ByteSize(memory), int(nodes)
	j.Timeout, j.Preemptible = domain.Duration(timeout), preemptible != 0
	j.PreemptRequested, j.Preemptions = preemptReq != 0, int(preemptions)
	j.SubmittedAt = timeOf(submitted)
	j.UpdatedAt = timeOf(updated)
	j.StartedAt = timeOf(started)
	j.FinishedAt = timeOf(finished)
	j.NextAttempt = timeOf(nextAtt)
	j.OutputDir = outputDir.String
	j.CancelRequested = cancel != 0
	j.RerunOf = rerunOf.Int64
	if withSpec {
		j.SpecJSON = specJSON
		if err := json.Unmarshal(specJSON, &j.Spec); err != nil {
			return domain.Job{}, fmt.Errorf("decode config snapshot %s of job %d: %w", j.SpecHash, j.ID, err)
		}
	}
	return j, nil
}

// CreateJob stores a new queued job, its config snapshot (shared with every
// job of the same spec) and its submit event in one transaction. The audit
// record is appended in that transaction with "{id}" in its Target
// replaced by the new job's id; an idempotent replay writes none.
func (s *Store) CreateJob(ctx context.Context, p store.NewJob, audit domain.AuditRecord) (domain.Job, bool, error) {
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
			existing, err := scanJob(w.queryRow(jobByIdemKeySQL, p.Submitter, p.IdempotencyKey), true)
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
		if _, err := w.exec(insertSnapshotSQL, p.SpecHash, p.SpecJSON); err != nil {
			return interpretError("create job: store config snapshot", err)
		}
		at := timeArg(p.SubmittedAt)
		r := p.Spec.Resources
		res, err := w.exec(insertJobSQL, p.Spec.Name, p.Spec.Project, p.Spec.Pool, domain.JobQueued,
			domain.ReasonSubmitted, p.Spec.Policy.Priority, p.Submitter, at, at, p.SpecHash, p.IdempotencyKey,
			r.GPUs, r.CPUs, int64(r.Memory), r.Nodes, int64(p.Spec.Policy.Timeout), boolArg(p.Spec.Policy.Preemptible),
			sql.NullInt64{Int64: p.RerunOf, Valid: p.RerunOf != 0}, w.rev)
		if err != nil {
			return interpretError("create job", err)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return interpretError("create job: read new id", err)
		}
		var dir string
		if p.OutputDir != nil {
			dir = p.OutputDir(id)
		}
		if dir != "" {
			if _, err := w.exec(setOutputDirSQL, dir, w.rev, id); err != nil {
				if isUniqueViolation(err) {
					return fmt.Errorf("create job: output directory %s is already used by another job: %w", dir, store.ErrConflict)
				}
				return interpretError("create job: store output directory", err)
			}
		}
		if _, err := w.exec(insertEventSQL, id, 0, at, "", domain.JobQueued, p.Actor, domain.ReasonSubmitted, ""); err != nil {
			return interpretError("create job: record submit event", err)
		}
		if err := w.insertJobCode(id, p.Code); err != nil { // code.go
			return err
		}
		w.audit.id = id // fills "{id}" in the attached audit records' Target
		sub := normTime(p.SubmittedAt)
		job = domain.Job{
			ID: id, Name: p.Spec.Name, Project: p.Spec.Project, Pool: p.Spec.Pool,
			State: domain.JobQueued, Reason: domain.ReasonSubmitted, Priority: p.Spec.Policy.Priority,
			Submitter: p.Submitter, SubmittedAt: sub, UpdatedAt: sub,
			Resources: p.Spec.Resources, Timeout: p.Spec.Policy.Timeout, Preemptible: p.Spec.Policy.Preemptible, Spec: p.Spec, SpecJSON: bytes.Clone(p.SpecJSON), SpecHash: p.SpecHash,
			OutputDir: dir, IdempotencyKey: p.IdempotencyKey, Code: cloneCode(p.Code), RerunOf: p.RerunOf,
		}
		created = true
		return nil
	}, withAudit(audit))
	if err != nil {
		return domain.Job{}, false, err
	}
	return job, created, nil
}

// GetJob returns the job with its Spec and SpecJSON, or store.ErrNotFound.
func (s *Store) GetJob(ctx context.Context, id int64) (domain.Job, error) {
	if err := s.checkOpen(); err != nil {
		return domain.Job{}, err
	}
	st, err := s.readStmt(ctx, getJobSQL)
	if err != nil {
		return domain.Job{}, interpretError(fmt.Sprintf("get job %d", id), err)
	}
	j, err := scanJob(st.QueryRowContext(ctx, id), true)
	if err != nil {
		return domain.Job{}, interpretError(fmt.Sprintf("get job %d", id), err)
	}
	if j.Code, err = s.jobCode(ctx, id); err != nil { // code.go
		return domain.Job{}, err
	}
	return j, nil
}

// ListJobs returns the jobs f selects, without Spec and SpecJSON.
//
// With several states and a limit, each state is read from the (state, id)
// index separately and the results merged, so the cost is bounded by the
// limit rather than by the number of matching jobs.
func (s *Store) ListJobs(ctx context.Context, f store.JobFilter) ([]domain.Job, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if f.Limit < 0 {
		return nil, fmt.Errorf("list jobs: limit %d is negative; use 0 for no limit: %w", f.Limit, domain.ErrInvalid)
	}
	query, args := listJobsQuery(f)
	st, err := s.readStmt(ctx, query)
	if err != nil {
		return nil, interpretError("list jobs", err)
	}
	// Size the result once: a list of every live job (the control loop
	// reads one a minute) would otherwise grow, and be copied, many times.
	size := f.Limit
	if size == 0 {
		if q, args, ok := countJobsQuery(f); ok {
			if err := s.readDB.QueryRowContext(ctx, q, args...).Scan(&size); err != nil {
				return nil, interpretError("list jobs", err)
			}
		}
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, interpretError("list jobs", err)
	}
	jobs, err := scanJobs(rows, size)
	if err != nil {
		return nil, interpretError("list jobs", err)
	}
	return jobs, nil
}

// scanJobs reads list rows (scanJob without spec) into a slice sized for
// size rows, and closes rows.
func scanJobs(rows *sql.Rows, size int) ([]domain.Job, error) {
	defer rows.Close()
	jobs := make([]domain.Job, 0, min(max(size, 16), 1<<20)+16)
	for rows.Next() {
		j, err := scanJob(rows, false)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, rows.Err()
}

// listJobsQuery builds the SQL for f. The text depends only on the shape of
// f (how many states, which fields are set), so prepared statements are
// reused across calls.
func listJobsQuery(f store.JobFilter) (string, []any) {
	states := uniqueStates(f.States)
	order := "DESC"
	if f.Ascending {
		order = "ASC"
	}
	var conds []string
	var args []any
	if f.Project != "" {
		conds = append(conds, "project = ?")
		args = append(args, f.Project)
	}
	if f.Restrict { // only the jobs the caller may see
		var vis []string
		if len(f.Projects) > 0 {
			vis = append(vis, "project IN (?"+strings.Repeat(", ?", len(f.Projects)-1)+")")
			for _, p := range f.Projects {
				args = append(args, p)
			}
		}
		if f.Submitter != "" {
			vis = append(vis, "submitter = ?")
			args = append(args, f.Submitter)
		}
		if len(vis) == 0 {
			vis = []string{"0"}
		}
		conds = append(conds, "("+strings.Join(vis, " OR ")+")")
	}
	if !f.Ascending && f.BeforeID > 0 {
		conds = append(conds, "id < ?")
		args = append(args, f.BeforeID)
	}
	cols := listCols
	where := func(extra string) string {
		all := conds
		if extra != "" {
			all = append([]string{extra}, conds...)
		}
		if len(all) == 0 {
			return ""
		}
		return " WHERE " + strings.Join(all, " AND ")
	}
	limit := ""
	if f.Limit > 0 {
		limit = " LIMIT ?"
	}

	if len(states) > 1 && f.Limit > 0 {
		// Pick the ids from the covering (state, id) index, one bounded
		// range per state, then read only the chosen rows.
		parts := make([]string, len(states))
		var all []any
		for i, st := range states {
			parts[i] = "SELECT id FROM (SELECT id FROM jobs" + where("state = ?") +
				" ORDER BY id " + order + limit + ")"
			all = append(all, st)
			all = append(all, args...)
			all = append(all, f.Limit)
		}
		all = append(all, f.Limit)
		return "SELECT " + cols + " FROM (" + strings.Join(parts, " UNION ALL ") + " ORDER BY id " + order + limit +
			") AS picked JOIN jobs USING (id) ORDER BY id " + order, all
	}

	var stateCond string
	switch len(states) {
	case 0:
	case 1:
		stateCond = "state = ?"
	default:
		stateCond = "state IN (?" + strings.Repeat(", ?", len(states)-1) + ")"
	}
	var all []any
	for _, st := range states {
		all = append(all, st)
	}
	all = append(all, args...)
	if f.Limit > 0 {
		all = append(all, f.Limit)
	}
	return "SELECT " + cols + " FROM jobs" + where(stateCond) + " ORDER BY id " + order + limit, all
}

// countJobsQuery counts what an unpaged listJobsQuery(f) returns, to size
// its result; ok is false for a filter it does not cover.
func countJobsQuery(f store.JobFilter) (string, []any, bool) {
	states, ok := column.CountableStates(f)
	switch {
	case !ok:
		return "", nil, false
	case len(states) == 0:
		return "SELECT COUNT(*) FROM jobs", nil, true
	}
	args := make([]any, len(states))
	for i, st := range states {
		args[i] = st
	}
	return "SELECT COUNT(*) FROM jobs WHERE state IN (?" + strings.Repeat(", ?", len(states)-1) + ")", args, true
}

// uniqueStates returns states sorted and without duplicates.
func uniqueStates(states []domain.JobState) []domain.JobState {
	if len(states) <= 1 {
		return states
	}
	out := slices.Clone(states)
	slices.Sort(out)
	return slices.Compact(out)
}

// CountJobs counts jobs per state; every known state is present, zero or not.
func (s *Store) CountJobs(ctx context.Context) (map[domain.JobState]int, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	st, err := s.readStmt(ctx, `SELECT state, COUNT(*) FROM jobs GROUP BY state`)
	if err != nil {
		return nil, interpretError("count jobs", err)
	}
	rows, err := st.QueryContext(ctx)
	if err != nil {
		return nil, interpretError("count jobs", err)
	}
	defer rows.Close()
	counts := make(map[domain.JobState]int, len(domain.JobStates()))
	for _, state := range domain.JobStates() {
		counts[state] = 0
	}
	for rows.Next() {
		var state domain.JobState
		var n int
		if err := rows.Scan(&state, &n); err != nil {
			return nil, interpretError("count jobs", err)
		}
		counts[state] = n
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("count jobs", err)
	}
	return counts, nil
}

const attemptCols = `job_id, number, state, reason, message, exit_code, node, gpus, created_at, started_at, finished_at, cpu_seconds, max_rss, borrowed`

func scanAttempt(sc rowScanner) (domain.Attempt, error) {
	var (
		a                          domain.Attempt
		exit                       sql.NullInt64
		gpus                       string
		created, started, finished sql.NullInt64
		maxRSS, borrowed           int64
	)
	if err := sc.Scan(&a.JobID, &a.Number, &a.State, &a.Reason, &a.Message, &exit, &a.Node, &gpus,
		&created, &started, &finished, &a.Usage.CPUSeconds, &maxRSS, &borrowed); err != nil {
		return domain.Attempt{}, err
	}
	var err error
	if a.GPUs, err = column.ParseGPUs(gpus); err != nil {
		return domain.Attempt{}, fmt.Errorf("attempt %d of job %d: %w", a.Number, a.JobID, err)
	}
	a.ExitCode = exitCodeOf(exit)
	a.Usage.MaxRSS = domain.ByteSize(maxRSS)
	a.Borrowed = borrowed != 0
	a.CreatedAt = timeOf(created)
	a.StartedAt = timeOf(started)
	a.FinishedAt = timeOf(finished)
	return a, nil
}

// ListAttempts returns a job's attempts in number order (none for a job that
// does not exist).
func (s *Store) ListAttempts(ctx context.Context, jobID int64) ([]domain.Attempt, error) {
	return s.queryAttempts(ctx, fmt.Sprintf("list attempts of job %d", jobID),
		`SELECT `+attemptCols+` FROM attempts WHERE job_id = ? ORDER BY number`, jobID)
}

// LiveJobs implements store.Jobs: the live jobs and the newest revision,
// read in one transaction (one snapshot of the database).
func (s *Store) LiveJobs(ctx context.Context) ([]domain.Job, store.JobCursor, error) {
	f := store.JobFilter{States: domain.LiveJobStates(), Ascending: true}
	query, args := listJobsQuery(f)
	countQuery, countArgs, _ := countJobsQuery(f)
	return s.jobsSince(ctx, "list live jobs", query, args, countQuery, countArgs)
}

// ChangedJobs implements store.Jobs. Revisions follow commit order (one
// writer numbers its transactions), so every job written after the
// cursor's transaction has a higher one.
func (s *Store) ChangedJobs(ctx context.Context, since store.JobCursor) ([]domain.Job, store.JobCursor, error) {
	// Without ORDER BY the rev index serves the range; rows are few and
	// sorted here.
	jobs, cur, err := s.jobsSince(ctx, "list changed jobs", `SELECT `+listCols+` FROM jobs WHERE rev > ?`, []any{int64(since)}, "", nil)
	slices.SortFunc(jobs, func(a, b domain.Job) int { return cmp.Compare(a.ID, b.ID) })
	return jobs, cur, err
}

// jobsSince runs query, and reads the newest revision, in one read
// transaction, and returns the rows with that revision as cursor;
// countQuery, when set, sizes the result first.
func (s *Store) jobsSince(ctx context.Context, action, query string, args []any, countQuery string, countArgs []any) ([]domain.Job, store.JobCursor, error) {
	if err := s.checkOpen(); err != nil {
		return nil, 0, err
	}
	tx, err := s.readDB.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, 0, interpretError(action, err)
	}
	defer tx.Rollback()
	var rev sql.NullInt64 // a bare MAX over the rev index reads one entry
	if err := tx.QueryRowContext(ctx, `SELECT MAX(rev) FROM jobs`).Scan(&rev); err != nil {
		return nil, 0, interpretError(action, err)
	}
	size := 0
	if countQuery != "" {
		if err := tx.QueryRowContext(ctx, countQuery, countArgs...).Scan(&size); err != nil {
			return nil, 0, interpretError(action, err)
		}
	}
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, 0, interpretError(action, err)
	}
	jobs, err := scanJobs(rows, size)
	if err != nil {
		return nil, 0, interpretError(action, err)
	}
	return jobs, store.JobCursor(rev.Int64), nil
}

// ActiveAttempts returns every starting or running attempt in (job id,
// number) order.
func (s *Store) ActiveAttempts(ctx context.Context) ([]domain.Attempt, error) {
	return s.queryAttempts(ctx, "list active attempts",
		`SELECT `+attemptCols+` FROM attempts WHERE state IN (?, ?) ORDER BY job_id, number`,
		domain.AttemptStarting, domain.AttemptRunning)
}

// PreemptedAttempts returns the attempts that ended preempted at or after
// since, in finish order.
func (s *Store) PreemptedAttempts(ctx context.Context, since time.Time) ([]domain.Attempt, error) {
	return s.queryAttempts(ctx, "list preempted attempts",
		`SELECT `+attemptCols+` FROM attempts WHERE state = ? AND finished_at >= ? ORDER BY finished_at, job_id, number`,
		domain.AttemptPreempted, since.UnixNano())
}

func (s *Store) queryAttempts(ctx context.Context, action, query string, args ...any) ([]domain.Attempt, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	st, err := s.readStmt(ctx, query)
	if err != nil {
		return nil, interpretError(action, err)
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, interpretError(action, err)
	}
	defer rows.Close()
	var out []domain.Attempt
	for rows.Next() {
		a, err := scanAttempt(rows)
		if err != nil {
			return nil, interpretError(action, err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError(action, err)
	}
	return out, nil
}

// ListEvents returns a job's transition events in the order they happened.
func (s *Store) ListEvents(ctx context.Context, jobID int64) ([]domain.Event, error) {
	action := fmt.Sprintf("list events of job %d", jobID)
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	st, err := s.readStmt(ctx, `SELECT id, job_id, attempt, at, from_state, to_state, actor, reason, message
		FROM events WHERE job_id = ? ORDER BY id`)
	if err != nil {
		return nil, interpretError(action, err)
	}
	rows, err := st.QueryContext(ctx, jobID)
	if err != nil {
		return nil, interpretError(action, err)
	}
	defer rows.Close()
	var out []domain.Event
	for rows.Next() {
		var e domain.Event
		var at sql.NullInt64
		if err := rows.Scan(&e.ID, &e.JobID, &e.Attempt, &at, &e.From, &e.To, &e.Actor, &e.Reason, &e.Message); err != nil {
			return nil, interpretError(action, err)
		}
		e.At = timeOf(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError(action, err)
	}
	return out, nil
}

const attemptSpansSQL = `SELECT a.job_id, a.number, j.project, j.pool, j.req_gpus, j.req_cpus, j.req_memory, j.req_nodes,
	a.started_at, a.finished_at
	FROM attempts a JOIN jobs j ON j.id = a.job_id
	WHERE a.started_at IS NOT NULL AND (a.finished_at IS NULL OR a.finished_at >= ?)
	ORDER BY a.job_id, a.number`

// AttemptSpans returns the attempts that held resources at some point since
// the given time, with their job's project, pool and request.
func (s *Store) AttemptSpans(ctx context.Context, since time.Time) ([]store.AttemptSpan, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	st, err := s.readStmt(ctx, attemptSpansSQL)
	if err != nil {
		return nil, interpretError("list attempt spans", err)
	}
	rows, err := st.QueryContext(ctx, since.UnixNano())
	if err != nil {
		return nil, interpretError("list attempt spans", err)
	}
	defer rows.Close()
	var out []store.AttemptSpan
	for rows.Next() {
		var (
			sp                  store.AttemptSpan
			gpus, memory, nodes int64
			started, finished   sql.NullInt64
		)
		if err := rows.Scan(&sp.JobID, &sp.Attempt, &sp.Project, &sp.Pool, &gpus, &sp.Resources.CPUs, &memory, &nodes,
			&started, &finished); err != nil {
			return nil, interpretError("list attempt spans", err)
		}
		sp.Resources.GPUs, sp.Resources.Memory, sp.Resources.Nodes = int(gpus), domain.ByteSize(memory), int(nodes)
		sp.StartedAt, sp.FinishedAt = timeOf(started), timeOf(finished)
		out = append(out, sp)
	}
	return out, interpretError("list attempt spans", rows.Err())
}
