package sqlstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// spendKeys are the group columns of SpendTotals, by grouping.
var spendKeys = map[string]string{"project": "j.project", "pool": "j.pool", "user": "j.submitter", "job": "j.id, j.name"}

// waste holds for an attempt whose spend bought nothing that lasts
// (domain.WastedStates, constants written into the statement).
var waste = func() string {
	states := make([]string, len(domain.WastedStates))
	for i, st := range domain.WastedStates {
		states[i] = "'" + string(st) + "'"
	}
	return "a.state IN (" + strings.Join(states, ", ") + ")"
}()

// SpendTotals implements store.Jobs: the database sums each group's held
// time by pool and resource shape, so a report over a million attempts
// reads a few rows. Each attempt's time is clipped to [Since, Until],
// each end counted in whole microseconds; zero-length finished attempts
// count as none, as in cost.Report. With Splits, each attempt is matched
// to the pieces of the window it overlaps (one, or two for the few that
// run across a split), its time clipped to each (so the pieces sum to the
// whole exactly), and the sums are by piece too; an attempt counts in the
// piece it started in.
func (s Shared) SpendTotals(ctx context.Context, q store.SpendQuery) ([]store.SpendRow, error) {
	key, ok := spendKeys[q.By]
	if !ok {
		return nil, fmt.Errorf("sum spend by %q: %w", q.By, store.ErrInvalid)
	}
	if !q.AllProjects && len(q.Projects) == 0 {
		return nil, nil
	}
	since, until := q.Since.UnixNano(), q.Until.UnixNano()
	bounds := []int64{since}
	for _, t := range q.Splits {
		n := t.UnixNano()
		if n <= bounds[len(bounds)-1] || n >= until {
			return nil, fmt.Errorf("sum spend: split %s is not inside the window and after the one before: %w", t, store.ErrInvalid)
		}
		bounds = append(bounds, n)
	}
	bounds = append(bounds, until)
	pieces := len(bounds) - 1
	// Each attempt's time inside [lo, hi], in whole microseconds (a month
	// of 3 million attempts held at once still sums in 64 bits); the
	// filters below make it positive.
	held := `((CASE WHEN a.finished_at IS NULL OR a.finished_at > {hi} THEN {hi} ELSE a.finished_at END) / 1000
		- (CASE WHEN a.started_at < {lo} THEN {lo} ELSE a.started_at END) / 1000)`
	var args []any
	// Without splits: the window's bounds as arguments, and no pieces.
	from, piece, overlap, first := "attempts a", "", "", ""
	if pieces == 1 {
		held = strings.NewReplacer("{lo}", "?", "{hi}", "?").Replace(held)
		args = append(args, until, until, since, since) // us_ok
		args = append(args, until, until, since, since) // us_waste
	} else {
		// The pieces as a table: idx, lo, hi, and top, the bound of the
		// start of an attempt in it (the window's end is inclusive, for
		// attempts that start at it and run). A subquery, not a CTE:
		// PostgreSQL runs a query with a CTE scan without parallel
		// workers.
		values := make([]string, pieces)
		for i := range pieces {
			values[i] = fmt.Sprintf("SELECT %d AS idx, CAST(? AS BIGINT) AS lo, CAST(? AS BIGINT) AS hi, CAST(? AS BIGINT) AS top", i)
			top := bounds[i+1]
			if i == pieces-1 {
				top++
			}
			args = append(args, bounds[i], bounds[i+1], top)
		}
		pieceTable := `(` + strings.Join(values, " UNION ALL ") + `) AS p`
		// SQLite makes the left table of a CROSS JOIN the outer loop: the
		// attempts are read once, each matched to the few pieces.
		from = `attempts a CROSS JOIN ` + pieceTable
		held = strings.NewReplacer("{lo}", "p.lo", "{hi}", "p.hi").Replace(held)
		piece = ", p.idx"
		overlap = ` AND a.started_at < p.top AND (a.finished_at IS NULL OR a.finished_at > p.lo)`
		first = "(p.idx = 0 OR a.started_at >= p.lo)"
	}
	counts := `SUM(CASE WHEN ` + waste + ` THEN 0 ELSE 1 END) AS n_ok,
			SUM(CASE WHEN ` + waste + ` THEN 1 ELSE 0 END) AS n_waste,
			SUM(CASE WHEN a.finished_at IS NULL THEN 1 ELSE 0 END) AS running`
	if first != "" {
		counts = `SUM(CASE WHEN ` + first + ` AND NOT ` + waste + ` THEN 1 ELSE 0 END) AS n_ok,
			SUM(CASE WHEN ` + first + ` AND ` + waste + ` THEN 1 ELSE 0 END) AS n_waste,
			SUM(CASE WHEN ` + first + ` AND a.finished_at IS NULL THEN 1 ELSE 0 END) AS running`
	}
	// The attempts are summed per job (and piece) first, then the jobs'
	// sums by group and resource shape (and piece).
	args = append(args, until, since) // the window
	where := ""
	if !q.AllProjects {
		where = ` WHERE j.project IN (?` + strings.Repeat(", ?", len(q.Projects)-1) + `)`
		for _, p := range q.Projects {
			args = append(args, p)
		}
	}
	nkey := strings.Count(key, ",") + 1
	cols := nkey + 5
	if piece != "" {
		cols++
	}
	groupBy := make([]string, 0, cols)
	for i := range cols {
		groupBy = append(groupBy, strconv.Itoa(i+1))
	}
	xPiece := strings.ReplaceAll(piece, "p.idx", "x.piece")
	query := Q(`SELECT ` + key + `, j.pool, j.req_gpus, j.req_cpus, j.req_memory, j.req_nodes` + xPiece + `,
		CAST(SUM(x.n_ok) AS BIGINT), CAST(SUM(x.n_waste) AS BIGINT), CAST(SUM(x.running) AS BIGINT),
		CAST(SUM(x.us_ok) AS BIGINT), CAST(SUM(x.us_waste) AS BIGINT)
		FROM (SELECT a.job_id AS job_id` + strings.ReplaceAll(piece, "p.idx", "p.idx AS piece") + `,
			` + counts + `,
			SUM(CASE WHEN ` + waste + ` THEN 0 ELSE ` + held + ` END) AS us_ok,
			SUM(CASE WHEN ` + waste + ` THEN ` + held + ` ELSE 0 END) AS us_waste
			FROM ` + from + `
			WHERE a.started_at IS NOT NULL AND a.started_at <= ? AND (a.finished_at IS NULL OR (a.finished_at > ? AND a.finished_at > a.started_at))` + overlap + `
			GROUP BY a.job_id` + piece + `) AS x
		{THENJOIN} jobs j ON j.id = x.job_id` + where + `
		GROUP BY ` + strings.Join(groupBy, ", "))
	// A row of the query: the ok and the waste sums of one group, shape
	// and piece.
	type sum struct {
		row     store.SpendRow
		piece   int
		n, us   int64
		running int64
	}
	got, err := queryAll(ctx, s, "sum spend", func(row Row) ([2]sum, error) {
		var (
			r                                   store.SpendRow
			gpus, memory, nodes, idx            int64
			nOK, nWaste, running, usOK, usWaste int64
			id                                  int64
			name                                string
		)
		dest := []any{&r.Group}
		if q.By == "job" {
			dest = []any{&id, &name}
		}
		dest = append(dest, &r.Pool, &gpus, &r.Resources.CPUs, &memory, &nodes)
		if piece != "" {
			dest = append(dest, &idx)
		}
		dest = append(dest, &nOK, &nWaste, &running, &usOK, &usWaste)
		if err := row.Scan(dest...); err != nil {
			return [2]sum{}, err
		}
		if q.By == "job" {
			r.Group = strconv.FormatInt(id, 10)
			if name != "" {
				r.Group += " " + name
			}
		}
		r.Resources.GPUs, r.Resources.Memory, r.Resources.Nodes = int(gpus), domain.ByteSize(memory), int(nodes)
		w := r
		w.Waste = true
		return [2]sum{{r, int(idx), nOK, usOK, running}, {w, int(idx), nWaste, usWaste, 0}}, nil
	}, query, args...)
	if err != nil {
		return nil, err
	}
	// One row per group, shape and waste, with its pieces.
	type rowKey struct {
		group, pool string
		res         domain.Resources
		waste       bool
	}
	var out []store.SpendRow
	at := map[rowKey]int{}
	for _, g := range got {
		for _, x := range g {
			k := rowKey{x.row.Group, x.row.Pool, x.row.Resources, x.row.Waste}
			i, ok := at[k]
			if !ok {
				i = len(out)
				at[k] = i
				x.row.HeldIn = make([]time.Duration, pieces)
				out = append(out, x.row)
			}
			r := &out[i]
			d := time.Duration(x.us) * time.Microsecond
			r.HeldIn[x.piece] += d
			r.Held += d
			r.Attempts += int(x.n)
			r.Running += int(x.running)
		}
	}
	kept := out[:0]
	for _, r := range out {
		if r.Attempts > 0 {
			kept = append(kept, r)
		}
	}
	return kept, nil
}

// AttemptTimes implements store.Jobs: the times of the started attempts
// of jobIDs, in one query by the attempts' primary key, without the jobs'
// columns (the caller has the jobs), so that pricing a page of a list
// reads a few integers per attempt.
func (s Shared) AttemptTimes(ctx context.Context, jobIDs []int64) ([]store.AttemptTime, error) {
	if len(jobIDs) == 0 {
		return nil, nil
	}
	args := make([]any, len(jobIDs))
	for i, id := range jobIDs {
		args[i] = id
	}
	q := Q(`SELECT job_id, number, started_at, finished_at FROM attempts
		WHERE job_id IN (?` + strings.Repeat(", ?", len(jobIDs)-1) + `) AND started_at IS NOT NULL
		ORDER BY job_id, number`)
	return queryAll(ctx, s, "read the attempt times of jobs", func(row Row) (store.AttemptTime, error) {
		var (
			a                 store.AttemptTime
			number            int64
			started, finished NullInt
		)
		err := row.Scan(&a.JobID, &number, &started, &finished)
		a.Attempt, a.StartedAt, a.FinishedAt = int(number), started.Time(), finished.Time()
		return a, err
	}, q, args...)
}
