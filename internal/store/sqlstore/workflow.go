package sqlstore

import (
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
)

// InsertWaitSQL records one dependency of a new job (both backends'
// placeholders are written by their CreateJob).
const InsertWaitSQL = `INSERT INTO job_waits (job_id, on_job, on_sweep, on_cond) VALUES (?, ?, ?, ?)`

// NewJobState is the state, reason and message a new job is stored with:
// held when p.Held says so, queued otherwise.
func NewJobState(p store.NewJob) (domain.JobState, domain.Reason, string) {
	if p.Held != nil {
		return domain.JobHeld, p.Held.Reason, p.Held.Message
	}
	return domain.JobQueued, domain.ReasonSubmitted, ""
}

// SweepArgs are the values of a sweeps row for sw, in the order name,
// project, submitter, created_at, method, members, max_parallel,
// spec_json, idempotency_key.
func SweepArgs(sw domain.Sweep) ([]any, error) {
	spec, err := json.Marshal(sw.Spec)
	if err != nil {
		return nil, fmt.Errorf("encode sweep: %w", err)
	}
	return []any{sw.Name, sw.Project, sw.Submitter, TimeArg(sw.CreatedAt), sw.Method, sw.Members, sw.MaxParallel, string(spec), sw.IdempotencyKey}, nil
}

const sweepCols = `id, name, project, submitter, created_at, method, members, max_parallel, spec_json, canceled_at, canceled_by, idempotency_key`

var (
	qSweepGet = Q(`SELECT ` + sweepCols + ` FROM sweeps WHERE id = ?`)
	// QSweepByKey finds a submitter's sweep by its idempotency key.
	QSweepByKey  = Q(`SELECT ` + sweepCols + ` FROM sweeps WHERE submitter = ? AND idempotency_key = ?`)
	qSweepJobs   = Q(`SELECT id, state FROM jobs WHERE sweep_id = ? ORDER BY id`)
	qSweepCancel = Q(`UPDATE sweeps SET canceled_at = ?, canceled_by = ? WHERE id = ? AND canceled_at IS NULL`)
	qSweepCounts = Q(`SELECT state, COUNT(*) FROM jobs WHERE sweep_id = ? GROUP BY state`)
	// qSweepNext: a sweep's members held for its max_parallel, oldest first.
	qSweepNext     = Q(`SELECT id FROM jobs WHERE sweep_id = ? AND state = 'held' AND reason = ? ORDER BY id LIMIT ?`)
	qSweepOf       = Q(`SELECT sweep_id FROM jobs WHERE id = ?`)
	qWaitsOf       = Q(`SELECT on_job, on_sweep, on_cond FROM job_waits WHERE job_id = ? ORDER BY on_job, on_sweep`)
	qWaitingJobs   = Q(`SELECT id FROM jobs WHERE state = 'held' AND reason = ? ORDER BY id`)
	qRunningSweeps = Q(`SELECT DISTINCT sweep_id FROM jobs WHERE state = 'running' AND sweep_id IS NOT NULL ORDER BY sweep_id`)
	qWaitingSweeps = Q(`SELECT DISTINCT sweep_id FROM jobs WHERE state = 'held' AND reason = ? AND sweep_id IS NOT NULL ORDER BY sweep_id`)
)

// SweepByKey reads the answer to QSweepByKey: the submitter's sweep with
// the key, or nil when there is none (the row's error is noRows, the
// driver's).
func SweepByKey(row Row, noRows error) (*domain.Sweep, error) {
	sw, err := scanSweep(row)
	switch {
	case err == nil:
		return &sw, nil
	case errors.Is(err, noRows):
		return nil, nil
	}
	return nil, err
}

func scanSweep(row Row) (domain.Sweep, error) {
	var (
		sw       domain.Sweep
		created  int64
		canceled sql.NullInt64
		spec     string
	)
	if err := row.Scan(&sw.ID, &sw.Name, &sw.Project, &sw.Submitter, &created, &sw.Method, &sw.Members, &sw.MaxParallel,
		&spec, &canceled, &sw.CanceledBy, &sw.IdempotencyKey); err != nil {
		return domain.Sweep{}, err
	}
	sw.CreatedAt = TimeOf(sql.NullInt64{Int64: created, Valid: true})
	sw.CanceledAt = TimeOf(canceled)
	if err := json.Unmarshal([]byte(spec), &sw.Spec); err != nil {
		return domain.Sweep{}, fmt.Errorf("decode sweep %d: %w", sw.ID, err)
	}
	sw.Objective = sw.Spec.Objective
	return sw, nil
}

// GetSweep returns the sweep or store.ErrNotFound.
func (s Shared) GetSweep(ctx context.Context, id int64) (domain.Sweep, error) {
	return queryOne(ctx, s, fmt.Sprintf("get sweep %d", id), scanSweep, qSweepGet, id)
}

// ListSweeps returns sweeps newest first.
func (s Shared) ListSweeps(ctx context.Context, f store.SweepFilter) ([]domain.Sweep, error) {
	q, args := sweepListQuery(f)
	return queryAll(ctx, s, "list sweeps", scanSweep, q, args...)
}

// sweepListQuery is ListSweeps' statement for f: every condition, the
// caller's visibility too, in SQL, so that LIMIT counts what is returned.
func sweepListQuery(f store.SweepFilter) (Query, []any) {
	var conds []string
	var args []any
	if f.Project != "" {
		conds, args = append(conds, "project = ?"), append(args, f.Project)
	}
	if f.BeforeID > 0 {
		conds, args = append(conds, "id < ?"), append(args, f.BeforeID)
	}
	if f.Restrict {
		var vis []string
		if len(f.Projects) > 0 {
			vis = append(vis, "project IN (?"+strings.Repeat(", ?", len(f.Projects)-1)+")")
			for _, p := range f.Projects {
				args = append(args, p)
			}
		}
		if f.Submitter != "" {
			vis, args = append(vis, "submitter = ?"), append(args, f.Submitter)
		}
		if len(vis) == 0 {
			vis = []string{"1 = 0"}
		}
		conds = append(conds, "("+strings.Join(vis, " OR ")+")")
	}
	text := "SELECT " + sweepCols + " FROM sweeps"
	if len(conds) > 0 {
		text += " WHERE " + strings.Join(conds, " AND ")
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 1 << 30
	}
	return Q(text + " ORDER BY id DESC LIMIT ?"), append(args, limit)
}

// CancelSweep marks the sweep canceled (once), with audit.
func (s Shared) CancelSweep(ctx context.Context, id int64, by string, at time.Time, audit domain.AuditRecord) error {
	return s.b.Write(ctx, func(x Exec) error {
		return x.Queue(fmt.Sprintf("cancel sweep %d", id), qSweepCancel, TimeArg(at), by, id)
	}, audit)
}

// SweepJobs returns a sweep's members in index order, with their ids and
// states only: what a repeated submit (an idempotency key) answers.
func (s Shared) SweepJobs(ctx context.Context, id int64) ([]domain.Job, error) {
	return queryAll(ctx, s, fmt.Sprintf("list the members of sweep %d", id), func(r Row) (domain.Job, error) {
		var j domain.Job
		var state string
		err := r.Scan(&j.ID, &state)
		j.State = domain.JobState(state)
		return j, err
	}, qSweepJobs, id)
}

// SweepCounts counts a sweep's members by state.
func (s Shared) SweepCounts(ctx context.Context, id int64) (map[domain.JobState]int, error) {
	type count struct {
		state string
		n     int
	}
	rows, err := queryAll(ctx, s, fmt.Sprintf("count the members of sweep %d", id), func(r Row) (count, error) {
		var c count
		err := r.Scan(&c.state, &c.n)
		return c, err
	}, qSweepCounts, id)
	if err != nil {
		return nil, err
	}
	out := make(map[domain.JobState]int, len(rows))
	for _, c := range rows {
		out[domain.JobState(c.state)] = c.n
	}
	return out, nil
}

// HeldSweepMembers returns up to limit ids of the sweep's members held
// with reason, oldest first.
func (s Shared) HeldSweepMembers(ctx context.Context, id int64, reason domain.Reason, limit int) ([]int64, error) {
	return s.ids(ctx, fmt.Sprintf("list the held members of sweep %d", id), qSweepNext, id, string(reason), limit)
}

// SweepOf returns the sweep job id is a member of (0: none).
func (s Shared) SweepOf(ctx context.Context, id int64) (int64, error) {
	sw, err := queryOne(ctx, s, fmt.Sprintf("read the sweep of job %d", id), func(r Row) (sql.NullInt64, error) {
		var n sql.NullInt64
		err := r.Scan(&n)
		return n, err
	}, qSweepOf, id)
	return sw.Int64, err
}

// WaitsOf returns job id's dependencies.
func (s Shared) WaitsOf(ctx context.Context, id int64) ([]domain.Dependency, error) {
	return queryAll(ctx, s, fmt.Sprintf("read the dependencies of job %d", id), func(r Row) (domain.Dependency, error) {
		var d domain.Dependency
		var on string
		err := r.Scan(&d.Job, &d.Sweep, &on)
		d.On = domain.DependOn(on)
		return d, err
	}, qWaitsOf, id)
}

// idChunk bounds the ids of one IN list.
const idChunk = 500

// WaitersOn returns the ids of the jobs whose after: names one of ids (a
// sweep of ids, when sweep), ascending, each once.
func (s Shared) WaitersOn(ctx context.Context, ids []int64, sweep bool) ([]int64, error) {
	col := "on_job"
	if sweep {
		col = "on_sweep"
	}
	return s.idsIn(ctx, "list the jobs waiting for others", "SELECT DISTINCT job_id FROM job_waits WHERE "+col+" IN ", ids)
}

// SweepsOf returns the sweeps any of ids is a member of, ascending, each
// once.
func (s Shared) SweepsOf(ctx context.Context, ids []int64) ([]int64, error) {
	return s.idsIn(ctx, "read the sweeps of jobs", "SELECT DISTINCT sweep_id FROM jobs WHERE sweep_id IS NOT NULL AND id IN ", ids)
}

// idsIn runs prefix + "(ids…)", a chunk of ids at a time, and returns the
// ids it selects, ascending, each once.
func (s Shared) idsIn(ctx context.Context, action, prefix string, ids []int64) ([]int64, error) {
	var out []int64
	for chunk := range slices.Chunk(ids, idChunk) {
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		got, err := s.ids(ctx, action, Q(prefix+"(?"+strings.Repeat(", ?", len(chunk)-1)+")"), args...)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// WaitingJobs returns the ids of the jobs held for a dependency.
func (s Shared) WaitingJobs(ctx context.Context) ([]int64, error) {
	return s.ids(ctx, "list the waiting jobs", qWaitingJobs, string(domain.ReasonDependency))
}

// WaitingSweeps returns the ids of the sweeps with members held for their
// max_parallel.
func (s Shared) WaitingSweeps(ctx context.Context) ([]int64, error) {
	return s.ids(ctx, "list the sweeps with waiting members", qWaitingSweeps, string(domain.ReasonSweepLimit))
}

// RunningSweeps returns the ids of the sweeps with running members.
func (s Shared) RunningSweeps(ctx context.Context) ([]int64, error) {
	return s.ids(ctx, "list the sweeps with running members", qRunningSweeps)
}

func (s Shared) ids(ctx context.Context, action string, q Query, args ...any) ([]int64, error) {
	return queryAll(ctx, s, action, func(r Row) (int64, error) {
		var id int64
		err := r.Scan(&id)
		return id, err
	}, q, args...)
}
