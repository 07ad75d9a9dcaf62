package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

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

const (
	getJobSQL         = fullJobSelect + ` WHERE jobs.id = $1`
	jobByIdemKeySQL   = fullJobSelect + ` WHERE jobs.submitter = $1 AND jobs.idempotency_key = $2`
	insertSnapshotSQL = `INSERT INTO snapshots (hash, spec_json) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING`
	insertEventSQL    = `INSERT INTO events (job_id, attempt, at, from_state, to_state, actor, reason, message)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`
)

// Names of the unique constraints CreateJob can violate.
const (
	outputDirConstraint = "jobs_output_dir_key"
	idemKeyConstraint   = "jobs_submitter_idempotency_key"
)

// scanJob reads one row of jobCols, followed by spec_json when withSpec.
func scanJob(sc rowScanner, withSpec bool) (domain.Job, error) {
	var (
		j                                              domain.Job
		submitted, updated, started, finished, nextAtt pgtype.Int8
		outputDir                                      pgtype.Text
		cancel, attempts, preemptible, preemptReq      int32
		preemptions                                    int32
		gpus, memory, nodes, timeout                   int64
		state, reason, priority                        string
		specJSON                                       string
		rerunOf                                        pgtype.Int8
	)
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
		j.SpecJSON = []byte(specJSON)
		if err := json.Unmarshal(j.SpecJSON, &j.Spec); err != nil {
			return domain.Job{}, fmt.Errorf("decode config snapshot %s of job %d: %w", j.SpecHash, j.ID, err)
		}
	}
	return j, nil
}

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
			case !errors.Is(err, pgx.ErrNoRows):
				return interpretError("create job: look up idempotency key", err)
			}
		}
		id, err := w.nextJobID()
		if err != nil {
			return err
		}
		var dir string
		if p.OutputDir != nil {
			dir = p.OutputDir(id)
		}
		at := timeArg(p.SubmittedAt)
		r := p.Spec.Resources
		b := &w.bulk
		b.addSnapshot(p.SpecHash, string(p.SpecJSON))
		b.jobID = append(b.jobID, id)
		b.jobName, b.jobProject, b.jobPool = append(b.jobName, p.Spec.Name), append(b.jobProject, p.Spec.Project), append(b.jobPool, p.Spec.Pool)
		b.jobState, b.jobReason = append(b.jobState, string(domain.JobQueued)), append(b.jobReason, string(domain.ReasonSubmitted))
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
		b.jobRerun, b.jobDir = append(b.jobRerun, rerun), append(b.jobDir, dirArg)
		b.addEvent(id, 0, at, "", string(domain.JobQueued), p.Actor, string(domain.ReasonSubmitted), "")
		if c := p.Code; c != nil {
			b.codeJob, b.codeSHA = append(b.codeJob, id), append(b.codeSHA, c.SHA256)
			b.codeCommit, b.codeDirty = append(b.codeCommit, c.Commit), append(b.codeDirty, boolArg(c.Dirty))
		}
		w.audit.id = id // fills "{id}" in the attached audit records' Target
		sub := normTime(p.SubmittedAt)
		job = domain.Job{
			ID: id, Name: p.Spec.Name, Project: p.Spec.Project, Pool: p.Spec.Pool,
			State: domain.JobQueued, Reason: domain.ReasonSubmitted, Priority: p.Spec.Policy.Priority,
			Submitter: p.Submitter, SubmittedAt: sub, UpdatedAt: sub,
			Resources: p.Spec.Resources, Timeout: p.Spec.Policy.Timeout, Preemptible: p.Spec.Policy.Preemptible, Spec: p.Spec,
			SpecJSON: bytes.Clone(p.SpecJSON), SpecHash: p.SpecHash,
			OutputDir: dir, IdempotencyKey: p.IdempotencyKey, Code: cloneCode(p.Code), RerunOf: p.RerunOf,
		}
		created = true
		return nil
	}, needsJobID, withAudit(audit))
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
	// One round trip: the job, then its code package.
	b := &pgx.Batch{}
	b.Queue(getJobSQL, id)
	b.Queue(jobCodeSQL, id)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	j, err := scanJob(br.QueryRow(), true)
	if err != nil {
		return domain.Job{}, interpretError(fmt.Sprintf("get job %d", id), err)
	}
	if j.Code, err = scanCode(br.QueryRow(), id); err != nil { // code.go
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
	// Size the result once: a list of every live job (the control loop
	// reads one a minute) would otherwise grow, and be copied, many times.
	size := f.Limit
	if size == 0 {
		if q, args, ok := countJobsQuery(f); ok {
			if err := s.pool.QueryRow(ctx, q, args...).Scan(&size); err != nil {
				return nil, interpretError("list jobs", err)
			}
		}
	}
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, interpretError("list jobs", err)
	}
	jobs, err := scanJobs(rows, size)
	if err != nil {
		return nil, interpretError("list jobs", err)
	}
	return jobs, nil
}

// scanJobs reads list rows (jobCols) into a slice sized for size rows, and
// closes rows.
func scanJobs(rows pgx.Rows, size int) ([]domain.Job, error) {
	defer rows.Close()
	jobs := make([]domain.Job, 0, min(max(size, 16), 1<<20)+16)
	fast := newJobListScanner(rows) // fastscan.go
	for rows.Next() {
		var (
			j   domain.Job
			err error
		)
		if fast != nil {
			j, err = fast.scan(rows)
		} else {
			j, err = scanJob(rows, false)
		}
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, rows.Err()
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
	return "SELECT COUNT(*) FROM jobs WHERE state = ANY($1::text[])", []any{states}, true
}

// listJobsQuery builds the SQL for f. The text depends only on the shape of
// f (which fields are set), so prepared statements are reused across calls.
func listJobsQuery(f store.JobFilter) (string, []any) {
	states := uniqueStates(f.States)
	order := "DESC"
	if f.Ascending {
		order = "ASC"
	}
	var (
		conds []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.Project != "" {
		conds = append(conds, "project = "+arg(f.Project))
	}
	if f.Restrict { // only the jobs the caller may see
		var vis []string
		if len(f.Projects) > 0 {
			vis = append(vis, "project = ANY("+arg(f.Projects)+"::text[])")
		}
		if f.Submitter != "" {
			vis = append(vis, "submitter = "+arg(f.Submitter))
		}
		if len(vis) == 0 {
			vis = []string{"false"}
		}
		conds = append(conds, "("+strings.Join(vis, " OR ")+")")
	}
	if !f.Ascending && f.BeforeID > 0 {
		conds = append(conds, "id < "+arg(f.BeforeID))
	}
	cols := strings.ReplaceAll(jobCols, "jobs.", "")
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
	stateNames := make([]string, len(states))
	for i, st := range states {
		stateNames[i] = string(st)
	}

	if len(states) > 1 && f.Limit > 0 {
		// Pick the ids from the (state, id) index, one bounded range per
		// state, then read only the chosen rows.
		limit := arg(f.Limit)
		st := arg(stateNames)
		return "SELECT " + jobCols + " FROM (SELECT picked.id FROM unnest(" + st + "::text[]) AS s(state) CROSS JOIN LATERAL (SELECT id FROM jobs" +
			where("jobs.state = s.state") + " ORDER BY id " + order + " LIMIT " + limit + ") AS picked ORDER BY picked.id " + order +
			" LIMIT " + limit + ") AS p JOIN jobs ON jobs.id = p.id ORDER BY jobs.id " + order, args
	}

	var stateCond string
	switch len(states) {
	case 0:
	case 1:
		stateCond = "state = " + arg(stateNames[0])
	default:
		stateCond = "state = ANY(" + arg(stateNames) + "::text[])"
	}
	q := "SELECT " + cols + " FROM jobs" + where(stateCond) + " ORDER BY id " + order
	if f.Limit > 0 {
		q += " LIMIT " + arg(f.Limit)
	}
	return q, args
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
	rows, err := s.pool.Query(ctx, `SELECT state, COUNT(*) FROM jobs GROUP BY state`)
	if err != nil {
		return nil, interpretError("count jobs", err)
	}
	defer rows.Close()
	counts := make(map[domain.JobState]int, len(domain.JobStates()))
	for _, state := range domain.JobStates() {
		counts[state] = 0
	}
	for rows.Next() {
		var state string
		var n int64
		if err := rows.Scan(&state, &n); err != nil {
			return nil, interpretError("count jobs", err)
		}
		counts[domain.JobState(state)] = int(n)
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
		number, borrowed           int32
		state, reason              string
		exit                       pgtype.Int8
		gpus                       string
		created, started, finished pgtype.Int8
		maxRSS                     int64
	)
	if err := sc.Scan(&a.JobID, &number, &state, &reason, &a.Message, &exit, &a.Node, &gpus,
		&created, &started, &finished, &a.Usage.CPUSeconds, &maxRSS, &borrowed); err != nil {
		return domain.Attempt{}, err
	}
	a.Number, a.State, a.Reason = int(number), domain.AttemptState(state), domain.Reason(reason)
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
		`SELECT `+attemptCols+` FROM attempts WHERE job_id = $1 ORDER BY number`, jobID)
}

// LiveJobs implements store.Jobs: the live jobs and a cursor, read in one
// snapshot.
func (s *Store) LiveJobs(ctx context.Context) ([]domain.Job, store.JobCursor, error) {
	f := store.JobFilter{States: domain.LiveJobStates(), Ascending: true}
	query, args := listJobsQuery(f)
	countQuery, countArgs, _ := countJobsQuery(f)
	return s.jobsSince(ctx, "list live jobs", query, args, countQuery, countArgs)
}

// ChangedJobs implements store.Jobs. The cursor is the oldest transaction
// still running when the previous look was taken (pg_snapshot_xmin): every
// write that look did not see came from that transaction or a later one,
// committed since or still to commit, so reading from there misses none.
func (s *Store) ChangedJobs(ctx context.Context, since store.JobCursor) ([]domain.Job, store.JobCursor, error) {
	return s.jobsSince(ctx, "list changed jobs", `SELECT `+jobCols+` FROM jobs WHERE changed_xid >= $1::text::xid8 ORDER BY id`,
		[]any{strconv.FormatUint(uint64(since), 10)}, "", nil)
}

// jobsSince runs query in a read-only repeatable-read transaction and
// returns its rows with the transaction's snapshot xmin as cursor;
// countQuery, when set, sizes the result first.
func (s *Store) jobsSince(ctx context.Context, action, query string, args []any, countQuery string, countArgs []any) ([]domain.Job, store.JobCursor, error) {
	if err := s.checkOpen(); err != nil {
		return nil, 0, err
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, 0, interpretError(action, err)
	}
	defer tx.Rollback(ctx)
	var xmin string
	if err := tx.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text`).Scan(&xmin); err != nil {
		return nil, 0, interpretError(action, err)
	}
	cursor, err := strconv.ParseUint(xmin, 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: read snapshot xmin %q: %w", action, xmin, err)
	}
	size := 0
	if countQuery != "" {
		if err := tx.QueryRow(ctx, countQuery, countArgs...).Scan(&size); err != nil {
			return nil, 0, interpretError(action, err)
		}
	}
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		return nil, 0, interpretError(action, err)
	}
	jobs, err := scanJobs(rows, size)
	if err != nil {
		return nil, 0, interpretError(action, err)
	}
	return jobs, store.JobCursor(cursor), nil
}

// ActiveAttempts returns every starting or running attempt in (job id,
// number) order.
func (s *Store) ActiveAttempts(ctx context.Context) ([]domain.Attempt, error) {
	return s.queryAttempts(ctx, "list active attempts",
		`SELECT `+attemptCols+` FROM attempts WHERE state IN ($1, $2) ORDER BY job_id, number`,
		string(domain.AttemptStarting), string(domain.AttemptRunning))
}

// PreemptedAttempts returns the attempts that ended preempted at or after
// since, in finish order.
func (s *Store) PreemptedAttempts(ctx context.Context, since time.Time) ([]domain.Attempt, error) {
	return s.queryAttempts(ctx, "list preempted attempts",
		`SELECT `+attemptCols+` FROM attempts WHERE state = $1 AND finished_at >= $2 ORDER BY finished_at, job_id, number`,
		string(domain.AttemptPreempted), since.UnixNano())
}

func (s *Store) queryAttempts(ctx context.Context, action, query string, args ...any) ([]domain.Attempt, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, query, args...)
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
	rows, err := s.pool.Query(ctx, `SELECT id, job_id, attempt, at, from_state, to_state, actor, reason, message
		FROM events WHERE job_id = $1 ORDER BY id`, jobID)
	if err != nil {
		return nil, interpretError(action, err)
	}
	defer rows.Close()
	var out []domain.Event
	for rows.Next() {
		var (
			e                domain.Event
			attempt          int32
			at               pgtype.Int8
			from, to, reason string
		)
		if err := rows.Scan(&e.ID, &e.JobID, &attempt, &at, &from, &to, &e.Actor, &reason, &e.Message); err != nil {
			return nil, interpretError(action, err)
		}
		e.Attempt, e.At = int(attempt), timeOf(at)
		e.From, e.To, e.Reason = domain.JobState(from), domain.JobState(to), domain.Reason(reason)
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
	WHERE a.started_at IS NOT NULL AND (a.finished_at IS NULL OR a.finished_at >= $1)
	ORDER BY a.job_id, a.number`

// AttemptSpans returns the attempts that held resources at some point since
// the given time, with their job's project, pool and request.
func (s *Store) AttemptSpans(ctx context.Context, since time.Time) ([]store.AttemptSpan, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, attemptSpansSQL, since.UnixNano())
	if err != nil {
		return nil, interpretError("list attempt spans", err)
	}
	defer rows.Close()
	var out []store.AttemptSpan
	for rows.Next() {
		var (
			sp                  store.AttemptSpan
			number              int32
			gpus, memory, nodes int64
			started, finished   pgtype.Int8
		)
		if err := rows.Scan(&sp.JobID, &number, &sp.Project, &sp.Pool, &gpus, &sp.Resources.CPUs, &memory, &nodes,
			&started, &finished); err != nil {
			return nil, interpretError("list attempt spans", err)
		}
		sp.Attempt = int(number)
		sp.Resources.GPUs, sp.Resources.Memory, sp.Resources.Nodes = int(gpus), domain.ByteSize(memory), int(nodes)
		sp.StartedAt, sp.FinishedAt = timeOf(started), timeOf(finished)
		out = append(out, sp)
	}
	return out, interpretError("list attempt spans", rows.Err())
}
