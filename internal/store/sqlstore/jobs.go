package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/column"
)

// JobCols are the jobs columns every job query reads, in ScanJob order.
const JobCols = `jobs.id, jobs.name, jobs.project, jobs.pool, jobs.state, jobs.reason, jobs.message,
	jobs.priority, jobs.submitter, jobs.submitted_at, jobs.updated_at, jobs.started_at, jobs.finished_at,
	jobs.spec_hash, jobs.output_dir, jobs.attempts, jobs.next_attempt_at, jobs.cancel_requested,
	jobs.idempotency_key, jobs.req_gpus, jobs.req_cpus, jobs.req_memory, jobs.req_nodes,
	jobs.req_timeout_ns, jobs.preemptible, jobs.preempt_requested, jobs.preemptions, jobs.rerun_of`

// ListCols are JobCols for queries over jobs alone.
var ListCols = strings.ReplaceAll(JobCols, "jobs.", "")

// fullJobSelect reads jobs with their config snapshot.
const fullJobSelect = `SELECT ` + JobCols + `, snapshots.spec_json
	FROM jobs JOIN snapshots ON snapshots.hash = jobs.spec_hash`

const attemptCols = `job_id, number, state, reason, message, exit_code, node, gpus, created_at, started_at, finished_at, cpu_seconds, max_rss, borrowed, gpu_seconds`

var (
	// QJobGet reads one job with its config snapshot (ScanJob withSpec).
	QJobGet = Q(fullJobSelect + ` WHERE jobs.id = ?`)
	// QJobByIdemKey finds a submitter's job by its idempotency key.
	QJobByIdemKey = Q(fullJobSelect + ` WHERE jobs.submitter = ? AND jobs.idempotency_key = ?`)

	// QJobCode reads a job's code package.
	QJobCode = Q(`SELECT sha256, git_commit, dirty FROM job_code WHERE job_id = ?`)

	qCountAllJobs      = Q(`SELECT COUNT(*) FROM jobs`)
	qJobCounts         = Q(`SELECT state, COUNT(*) FROM jobs GROUP BY state`)
	qAttemptsOfJob     = Q(`SELECT ` + attemptCols + ` FROM attempts WHERE job_id = ? ORDER BY number`)
	qActiveAttempts    = Q(`SELECT ` + attemptCols + ` FROM attempts WHERE state IN (?, ?) ORDER BY job_id, number`)
	qPreemptedAttempts = Q(`SELECT ` + attemptCols + ` FROM attempts WHERE state = ? AND finished_at >= ? ORDER BY finished_at, job_id, number`)
	qEventsOfJob       = Q(`SELECT id, job_id, attempt, at, from_state, to_state, actor, reason, message
		FROM events WHERE job_id = ? ORDER BY id`)
	qAttemptSpans = Q(`SELECT a.job_id, a.number, j.project, j.pool, j.req_gpus, j.req_cpus, j.req_memory, j.req_nodes,
	a.started_at, a.finished_at, j.submitter, j.name, a.state, a.reason, j.req_timeout_ns
	FROM attempts a JOIN jobs j ON j.id = a.job_id
	WHERE a.started_at IS NOT NULL AND (a.finished_at IS NULL OR a.finished_at >= ?)
	ORDER BY a.job_id, a.number`)
	// qRunningSpans is qAttemptSpans of the active attempts only, on the
	// state index.
	qRunningSpans = Q(`SELECT a.job_id, a.number, j.project, j.pool, j.req_gpus, j.req_cpus, j.req_memory, j.req_nodes,
	a.started_at, a.finished_at, j.submitter, j.name, a.state, a.reason, j.req_timeout_ns
	FROM attempts a JOIN jobs j ON j.id = a.job_id
	WHERE a.state IN (?, ?) AND a.started_at IS NOT NULL
	ORDER BY a.job_id, a.number`)
)

// NullInt is a nullable integer column. It scans through database/sql's
// Scanner and through pgx's Int64Scanner, which pgx's integer codecs use
// directly, before their slower fallback to sql.Scanner.
type NullInt struct {
	V     int64
	Valid bool
}

// Scan implements sql.Scanner.
func (n *NullInt) Scan(src any) error {
	switch v := src.(type) {
	case int64: // what SQLite's driver returns for an INTEGER
		*n = NullInt{V: v, Valid: true}
		return nil
	case nil:
		*n = NullInt{}
		return nil
	}
	var s sql.NullInt64
	err := s.Scan(src)
	*n = NullInt{V: s.Int64, Valid: s.Valid}
	return err
}

// ScanInt64 implements pgtype.Int64Scanner.
func (n *NullInt) ScanInt64(v pgtype.Int8) error {
	*n = NullInt{V: v.Int64, Valid: v.Valid}
	return nil
}

// Time is the time.Time of a column written by TimeArg.
func (n NullInt) Time() time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.V).UTC()
}

// NullString is a nullable text column, read as "" when NULL, through
// database/sql's Scanner or pgx's TextScanner (see NullInt).
type NullString string

// Scan implements sql.Scanner.
func (s *NullString) Scan(src any) error {
	switch v := src.(type) {
	case string:
		*s = NullString(v)
		return nil
	case nil:
		*s = ""
		return nil
	}
	var ns sql.NullString
	err := ns.Scan(src)
	*s = NullString(ns.String)
	return err
}

// ScanText implements pgtype.TextScanner.
func (s *NullString) ScanText(v pgtype.Text) error {
	*s = NullString(v.String)
	return nil
}

// ScanJob reads one row of JobCols, followed by spec_json when withSpec.
// Its destinations are plain types or scanners: both drivers convert into
// other named types through reflection, measurably slower on list reads.
func ScanJob(row Row, withSpec bool) (domain.Job, error) {
	var (
		j                                              domain.Job
		submitted, updated, started, finished, nextAtt NullInt
		outputDir                                      NullString
		cancel, attempts, gpus, memory, nodes          int64
		timeout, preemptible, preemptReq, preemptions  int64
		state, reason, priority                        string
		specJSON                                       []byte
		rerunOf                                        NullInt
	)
	dest := []any{&j.ID, &j.Name, &j.Project, &j.Pool, &state, &reason, &j.Message,
		&priority, &j.Submitter, &submitted, &updated, &started, &finished,
		&j.SpecHash, &outputDir, &attempts, &nextAtt, &cancel, &j.IdempotencyKey,
		&gpus, &j.Resources.CPUs, &memory, &nodes, &timeout, &preemptible, &preemptReq, &preemptions, &rerunOf}
	if withSpec {
		dest = append(dest, &specJSON)
	}
	if err := row.Scan(dest...); err != nil {
		return domain.Job{}, err
	}
	j.State, j.Reason, j.Priority = domain.JobState(state), domain.Reason(reason), domain.Priority(priority)
	j.Attempts = int(attempts)
	j.Resources.GPUs, j.Resources.Memory, j.Resources.Nodes = int(gpus), domain.ByteSize(memory), int(nodes)
	j.Timeout, j.Preemptible = domain.Duration(timeout), preemptible != 0
	j.PreemptRequested, j.Preemptions = preemptReq != 0, int(preemptions)
	j.SubmittedAt = submitted.Time()
	j.UpdatedAt = updated.Time()
	j.StartedAt = started.Time()
	j.FinishedAt = finished.Time()
	j.NextAttempt = nextAtt.Time()
	j.OutputDir = string(outputDir)
	j.CancelRequested = cancel != 0
	j.RerunOf = rerunOf.V
	if withSpec {
		j.SpecJSON = specJSON
		if err := json.Unmarshal(specJSON, &j.Spec); err != nil {
			return domain.Job{}, fmt.Errorf("decode config snapshot %s of job %d: %w", j.SpecHash, j.ID, err)
		}
	}
	return j, nil
}

// scanCode reads a row of QJobCode for job id; no row is no code package.
func (s Shared) scanCode(row Row, id int64) (*domain.CodeRef, error) {
	var (
		c     domain.CodeRef
		dirty int64
	)
	err := row.Scan(&c.SHA256, &c.Commit, &dirty)
	if s.b.IsNoRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, s.err(fmt.Sprintf("get code package of job %d", id), err)
	}
	c.Dirty = dirty != 0
	return &c, nil
}

func scanAttempt(row Row) (domain.Attempt, error) {
	var (
		a                            domain.Attempt
		number, maxRSS, borrowed     int64
		state, reason, gpus          string
		exit, created, started, done NullInt
	)
	if err := row.Scan(&a.JobID, &number, &state, &reason, &a.Message, &exit, &a.Node, &gpus,
		&created, &started, &done, &a.Usage.CPUSeconds, &maxRSS, &borrowed, &a.Usage.GPUSeconds); err != nil {
		return domain.Attempt{}, err
	}
	a.Number, a.State, a.Reason = int(number), domain.AttemptState(state), domain.Reason(reason)
	var err error
	if a.GPUs, err = column.ParseGPUs(gpus); err != nil {
		return domain.Attempt{}, fmt.Errorf("attempt %d of job %d: %w", a.Number, a.JobID, err)
	}
	if exit.Valid {
		code := int(exit.V)
		a.ExitCode = &code
	}
	a.Usage.MaxRSS = domain.ByteSize(maxRSS)
	a.Borrowed = borrowed != 0
	a.CreatedAt, a.StartedAt, a.FinishedAt = created.Time(), started.Time(), done.Time()
	return a, nil
}

// JobListReader is a Reader that decodes list rows (ListCols) faster than
// ScanJob, as PostgreSQL's does from their wire bytes: big list reads (a
// scheduler snapshot is 100,000 rows) are dominated by decoding.
type JobListReader interface {
	// JobScanner returns a scanner for the rows of one query. It decodes
	// a row into *j, in place: a job is large, and a list read copies
	// each one only once.
	JobScanner() func(row Row, j *domain.Job) error
}

// GetJob returns the job with its Spec and SpecJSON, or store.ErrNotFound.
func (s Shared) GetJob(ctx context.Context, id int64) (domain.Job, error) {
	r, err := s.b.Reader()
	if err != nil {
		return domain.Job{}, err
	}
	j, err := ScanJob(r.QueryRow(ctx, QJobGet, id), true)
	if err != nil {
		return domain.Job{}, s.err(fmt.Sprintf("get job %d", id), err)
	}
	if j.Code, err = s.scanCode(r.QueryRow(ctx, QJobCode, id), id); err != nil {
		return domain.Job{}, err
	}
	return j, nil
}

// ListJobs returns the jobs f selects, without Spec and SpecJSON.
//
// With several states and a limit, each state is read from the (state, id)
// index separately and the results merged, so the cost is bounded by the
// limit rather than by the number of matching jobs.
func (s Shared) ListJobs(ctx context.Context, f store.JobFilter) ([]domain.Job, error) {
	r, err := s.b.Reader()
	if err != nil {
		return nil, err
	}
	if f.Limit < 0 {
		return nil, fmt.Errorf("list jobs: limit %d is negative; use 0 for no limit: %w", f.Limit, domain.ErrInvalid)
	}
	// Size the result once: a list of every live job (the control loop
	// reads one a minute) would otherwise grow, and be copied, many times.
	size := f.Limit
	if size == 0 {
		if q, args, ok := CountJobsQuery(s.e, f); ok {
			if err := r.QueryRow(ctx, q, args...).Scan(&size); err != nil {
				return nil, s.err("list jobs", err)
			}
		}
	}
	scan := func(row Row, j *domain.Job) (err error) {
		*j, err = ScanJob(row, false)
		return err
	}
	if lr, ok := r.(JobListReader); ok {
		scan = lr.JobScanner()
	}
	jobs := JobsFor(size)
	q, args := ListJobsQuery(s.e, f)
	if err := r.Query(ctx, func(row Row) error {
		jobs = append(jobs, domain.Job{})
		return scan(row, &jobs[len(jobs)-1])
	}, q, args...); err != nil {
		return nil, s.err("list jobs", err)
	}
	return jobs, nil
}

// JobsFor returns an empty slice with room for a list of size jobs (a
// count taken before the read, so with some slack), capped so a wrong count
// cannot allocate without bound.
func JobsFor(size int) []domain.Job {
	return make([]domain.Job, 0, min(max(size, 16), 1<<20)+16)
}

// CountJobsQuery counts what an unpaged ListJobsQuery(e, f) returns, to
// size its result; ok is false for a filter it does not cover.
func CountJobsQuery(e Engine, f store.JobFilter) (Query, []any, bool) {
	states, ok := column.CountableStates(f)
	switch {
	case !ok:
		return Query{}, nil, false
	case len(states) == 0:
		return qCountAllJobs, nil, true
	case e == Postgres:
		return postgresOnly("SELECT COUNT(*) FROM jobs WHERE state = ANY($1::text[])"), []any{states}, true
	}
	args := make([]any, len(states))
	for i, st := range states {
		args[i] = st
	}
	return sqliteOnly("SELECT COUNT(*) FROM jobs WHERE state IN (?" + strings.Repeat(", ?", len(states)-1) + ")"), args, true
}

// ListJobsQuery builds the list query of f in engine e's SQL: SQLite binds
// each state and project alone and merges per-state ranges with UNION ALL,
// PostgreSQL binds arrays and merges with LATERAL. Both builders live here,
// beside CountJobsQuery, which must count what they list, and the
// backends' LiveJobs use them too. The text depends only on the shape of f
// (how many states, which fields are set), so prepared statements are
// reused across calls.
func ListJobsQuery(e Engine, f store.JobFilter) (Query, []any) {
	if e == Postgres {
		return pgListJobsQuery(f)
	}
	return liteListJobsQuery(f)
}

// ListJobIDsQuery is ListJobsQuery reading only the jobs' ids, for a
// store that has their rows in memory (SQLite only).
func ListJobIDsQuery(f store.JobFilter) (Query, []any) {
	return liteJobsQuery(f, true)
}

func liteListJobsQuery(f store.JobFilter) (Query, []any) {
	return liteJobsQuery(f, false)
}

func liteJobsQuery(f store.JobFilter, idsOnly bool) (Query, []any) {
	cols := ListCols
	if idsOnly {
		cols = "id"
	}
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
	if f.Owner != "" {
		conds = append(conds, "submitter = ?")
		args = append(args, f.Owner)
	}
	if f.Pool != "" {
		conds = append(conds, "pool = ?")
		args = append(args, f.Pool)
	}
	if f.NameContains != "" { // SQLite's LIKE folds ASCII letters only
		conds = append(conds, `name LIKE ? ESCAPE '\'`)
		args = append(args, containsPattern(f.NameContains))
	}
	if f.Sweep != 0 {
		conds = append(conds, "sweep_id = ?")
		args = append(args, f.Sweep)
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
	where := whereFunc(conds)
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
		picked := "(" + strings.Join(parts, " UNION ALL ") + " ORDER BY id " + order + limit + ") AS picked"
		if idsOnly {
			return sqliteOnly("SELECT id FROM " + picked + " ORDER BY id " + order), all
		}
		return sqliteOnly("SELECT " + ListCols + " FROM " + picked + " JOIN jobs USING (id) ORDER BY id " + order), all
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
	return sqliteOnly("SELECT " + cols + " FROM jobs" + where(stateCond) + " ORDER BY id " + order + limit), all
}

func pgListJobsQuery(f store.JobFilter) (Query, []any) {
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
	if f.Owner != "" {
		conds = append(conds, "submitter = "+arg(f.Owner))
	}
	if f.Pool != "" {
		conds = append(conds, "pool = "+arg(f.Pool))
	}
	if f.NameContains != "" {
		conds = append(conds, "name ILIKE "+arg(containsPattern(f.NameContains))+` ESCAPE '\'`)
	}
	if f.Sweep != 0 {
		conds = append(conds, "sweep_id = "+arg(f.Sweep))
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
	where := whereFunc(conds)
	stateNames := make([]string, len(states))
	for i, st := range states {
		stateNames[i] = string(st)
	}

	if len(states) > 1 && f.Limit > 0 {
		// Pick the ids from the (state, id) index, one bounded range per
		// state, then read only the chosen rows.
		limit := arg(f.Limit)
		st := arg(stateNames)
		return postgresOnly("SELECT " + JobCols + " FROM (SELECT picked.id FROM unnest(" + st + "::text[]) AS s(state) CROSS JOIN LATERAL (SELECT id FROM jobs" +
			where("jobs.state = s.state") + " ORDER BY id " + order + " LIMIT " + limit + ") AS picked ORDER BY picked.id " + order +
			" LIMIT " + limit + ") AS p JOIN jobs ON jobs.id = p.id ORDER BY jobs.id " + order), args
	}

	var stateCond string
	switch len(states) {
	case 0:
	case 1:
		stateCond = "state = " + arg(stateNames[0])
	default:
		stateCond = "state = ANY(" + arg(stateNames) + "::text[])"
	}
	q := "SELECT " + ListCols + " FROM jobs" + where(stateCond) + " ORDER BY id " + order
	if f.Limit > 0 {
		q += " LIMIT " + arg(f.Limit)
	}
	return postgresOnly(q), args
}

// whereFunc returns a builder of the WHERE clause of conds, with an extra
// condition first when set.
func whereFunc(conds []string) func(extra string) string {
	return func(extra string) string {
		all := conds
		if extra != "" {
			all = append([]string{extra}, conds...)
		}
		if len(all) == 0 {
			return ""
		}
		return " WHERE " + strings.Join(all, " AND ")
	}
}

// containsPattern is the LIKE pattern (with ESCAPE '\') that matches
// any text holding s: s with its wildcards (%, _) and the escape character
// itself escaped, between two %.
func containsPattern(s string) string {
	return "%" + likeEscaper.Replace(s) + "%"
}

var likeEscaper = strings.NewReplacer(`\`, `\\`, "%", `\%`, "_", `\_`)

// sqliteOnly and postgresOnly are statements built for one engine at the
// time of the call.
func sqliteOnly(text string) Query   { return fixed(text, "") }
func postgresOnly(text string) Query { return fixed("", text) }

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
func (s Shared) CountJobs(ctx context.Context) (map[domain.JobState]int, error) {
	r, err := s.b.Reader()
	if err != nil {
		return nil, err
	}
	counts := make(map[domain.JobState]int, len(domain.JobStates()))
	for _, state := range domain.JobStates() {
		counts[state] = 0
	}
	if err := r.Query(ctx, func(row Row) error {
		var (
			state string
			n     int64
		)
		err := row.Scan(&state, &n)
		counts[domain.JobState(state)] = int(n)
		return err
	}, qJobCounts); err != nil {
		return nil, s.err("count jobs", err)
	}
	return counts, nil
}

// ListAttempts returns a job's attempts in number order (none for a job that
// does not exist).
func (s Shared) ListAttempts(ctx context.Context, jobID int64) ([]domain.Attempt, error) {
	return queryAll(ctx, s, fmt.Sprintf("list attempts of job %d", jobID), scanAttempt, qAttemptsOfJob, jobID)
}

// ActiveAttempts returns every starting or running attempt in (job id,
// number) order.
func (s Shared) ActiveAttempts(ctx context.Context) ([]domain.Attempt, error) {
	return queryAll(ctx, s, "list active attempts", scanAttempt, qActiveAttempts,
		string(domain.AttemptStarting), string(domain.AttemptRunning))
}

// qActiveAttemptsOf is qActiveAttempts of some jobs: their ids are a
// JSON array (SQLite) or an array (PostgreSQL), so that the text,
// and the statement prepared from it, is one for any number of ids.
// SQLite's +state keeps its planner on the primary key, off the state
// index, which would visit every active attempt.
var qActiveAttemptsOf = Each(`SELECT `+attemptCols+` FROM attempts
	WHERE job_id IN (SELECT value FROM json_each(?)) AND +state IN (?, ?) ORDER BY job_id, number`,
	`SELECT `+attemptCols+` FROM attempts WHERE job_id = ANY($1::bigint[]) AND state IN ($2, $3) ORDER BY job_id, number`)

// ActiveAttemptsOf implements store.Jobs.
func (s Shared) ActiveAttemptsOf(ctx context.Context, ids []int64) ([]domain.Attempt, error) {
	if len(ids) == 0 {
		if _, err := s.b.Reader(); err != nil {
			return nil, err
		}
		return nil, nil
	}
	q, args := ActiveAttemptsOfQuery(s.e, ids)
	return queryAll(ctx, s, "list active attempts of jobs", scanAttempt, q, args...)
}

// ActiveAttemptsOfQuery is ActiveAttemptsOf's statement and arguments on
// engine e, for a backend that runs it in a read of its own.
func ActiveAttemptsOfQuery(e Engine, ids []int64) (Query, []any) {
	var arg any = ids
	if e == SQLite {
		b := make([]byte, 0, 2+len(ids)*8)
		b = append(b, '[')
		for i, id := range ids {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, id, 10)
		}
		arg = string(append(b, ']'))
	}
	return qActiveAttemptsOf, []any{arg, string(domain.AttemptStarting), string(domain.AttemptRunning)}
}

// ScanAttempts appends the attempts of every row of ActiveAttemptsOfQuery
// (read through either engine's driver) to dst.
func ScanAttempts(dst []domain.Attempt, rows interface {
	Row
	Next() bool
	Err() error
}) ([]domain.Attempt, error) {
	for rows.Next() {
		a, err := scanAttempt(rows)
		if err != nil {
			return dst, err
		}
		dst = append(dst, a)
	}
	return dst, rows.Err()
}

// PreemptedAttempts returns the attempts that ended preempted at or after
// since, in finish order.
func (s Shared) PreemptedAttempts(ctx context.Context, since time.Time) ([]domain.Attempt, error) {
	return queryAll(ctx, s, "list preempted attempts", scanAttempt, qPreemptedAttempts,
		string(domain.AttemptPreempted), since.UnixNano())
}

// ListEvents returns a job's transition events in the order they happened.
func (s Shared) ListEvents(ctx context.Context, jobID int64) ([]domain.Event, error) {
	return queryAll(ctx, s, fmt.Sprintf("list events of job %d", jobID), func(row Row) (domain.Event, error) {
		var (
			e                domain.Event
			attempt          int64
			at               NullInt
			from, to, reason string
		)
		err := row.Scan(&e.ID, &e.JobID, &attempt, &at, &from, &to, &e.Actor, &reason, &e.Message)
		e.Attempt, e.At = int(attempt), at.Time()
		e.From, e.To, e.Reason = domain.JobState(from), domain.JobState(to), domain.Reason(reason)
		return e, err
	}, qEventsOfJob, jobID)
}

// AttemptSpans returns the attempts that held resources at some point since
// the given time, with their job's project, pool, request, submitter and
// name, and the attempt's state.
func (s Shared) AttemptSpans(ctx context.Context, since time.Time) ([]store.AttemptSpan, error) {
	return queryAll(ctx, s, "list attempt spans", scanSpan, qAttemptSpans, since.UnixNano())
}

// RunningSpans implements store.Jobs.
func (s Shared) RunningSpans(ctx context.Context) ([]store.AttemptSpan, error) {
	return queryAll(ctx, s, "list running attempt spans", scanSpan, qRunningSpans,
		string(domain.AttemptStarting), string(domain.AttemptRunning))
}

func scanSpan(row Row) (store.AttemptSpan, error) {
	var (
		sp                          store.AttemptSpan
		number, gpus, memory, nodes int64
		timeout                     int64
		started, finished           NullInt
		state, reason               string
	)
	err := row.Scan(&sp.JobID, &number, &sp.Project, &sp.Pool, &gpus, &sp.Resources.CPUs, &memory, &nodes,
		&started, &finished, &sp.Submitter, &sp.JobName, &state, &reason, &timeout)
	sp.Timeout = domain.Duration(timeout)
	sp.State, sp.Reason = domain.AttemptState(state), domain.Reason(reason)
	sp.Attempt = int(number)
	sp.Resources.GPUs, sp.Resources.Memory, sp.Resources.Nodes = int(gpus), domain.ByteSize(memory), int(nodes)
	sp.StartedAt, sp.FinishedAt = started.Time(), finished.Time()
	return sp, err
}
