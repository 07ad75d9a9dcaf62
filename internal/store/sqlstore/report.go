package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// reportKeys are the group columns of ReportTotals, by grouping.
var reportKeys = map[string]string{"project": "j.project", "pool": "j.pool"}

// notSucceeded lists the end states other than succeeded (constants
// written into the statement, so the attempts_state index serves them).
var notSucceeded = func() string {
	states := []string{}
	for _, st := range []domain.AttemptState{domain.AttemptFailed, domain.AttemptTimedOut, domain.AttemptLost,
		domain.AttemptPreempted, domain.AttemptCanceled} {
		states = append(states, "'"+string(st)+"'")
	}
	return "a.state IN (" + strings.Join(states, ", ") + ")"
}()

// ReportTotals implements store.Jobs. Four statements, each one pass: the
// jobs submitted or first started in the window (queue times as
// nearest-rank percentiles by window functions), the attempts active in
// it summed per job and then per group, the attempts that ended in it
// other than succeeded by state and reason (on the state index), and the
// right-sizing lists from the same per-job sums.
func (s Shared) ReportTotals(ctx context.Context, q store.ReportQuery) (store.ReportTotals, error) {
	key, ok := reportKeys[q.By]
	if !ok {
		return store.ReportTotals{}, fmt.Errorf("report by %q: %w", q.By, store.ErrInvalid)
	}
	if !q.AllProjects && len(q.Projects) == 0 {
		return store.ReportTotals{}, nil
	}
	since, until := q.Since.UnixNano(), q.Until.UnixNano()
	where, projects := "", []any(nil)
	if !q.AllProjects {
		where = ` AND j.project IN (?` + strings.Repeat(", ?", len(q.Projects)-1) + `)`
		for _, p := range q.Projects {
			projects = append(projects, p)
		}
	}
	rows := map[string]*store.ReportRow{}
	row := func(g string) *store.ReportRow {
		r, ok := rows[g]
		if !ok {
			r = &store.ReportRow{Group: g}
			rows[g] = r
		}
		return r
	}

	// Jobs submitted in the window.
	_, err := queryAll(ctx, s, "report submissions", func(rw Row) (struct{}, error) {
		var g string
		var n int64
		err := rw.Scan(&g, &n)
		row(g).Submitted = int(n)
		return struct{}{}, err
	}, Q(`SELECT `+key+`, COUNT(*) FROM jobs j WHERE j.submitted_at >= ? AND j.submitted_at < ?`+where+` GROUP BY 1`),
		append([]any{since, until}, projects...)...)
	if err != nil {
		return store.ReportTotals{}, err
	}

	// Queue times of the jobs that first started in the window: the
	// nearest-rank p-th percentile of n values is the ceil(p·n/100)-th.
	_, err = queryAll(ctx, s, "report queue times", func(rw Row) (struct{}, error) {
		var g string
		var rn, n, w int64
		if err := rw.Scan(&g, &rn, &n, &w); err != nil {
			return struct{}{}, err
		}
		qt := &row(g).Queue
		qt.N = int(n)
		d := time.Duration(max(w, 0))
		for _, p := range []struct {
			pct int64
			to  *time.Duration
		}{{50, &qt.P50}, {90, &qt.P90}, {99, &qt.P99}, {100, &qt.Max}} {
			if rn == (p.pct*n+99)/100 {
				*p.to = d
			}
		}
		return struct{}{}, nil
	}, Q(`SELECT g, rn, n, w FROM (SELECT `+key+` AS g, j.started_at - j.submitted_at AS w,
			ROW_NUMBER() OVER (PARTITION BY `+key+` ORDER BY j.started_at - j.submitted_at) AS rn,
			COUNT(*) OVER (PARTITION BY `+key+`) AS n
			FROM jobs j WHERE j.started_at >= ? AND j.started_at < ?`+where+`) AS t
		WHERE rn = (50 * n + 99) / 100 OR rn = (90 * n + 99) / 100 OR rn = (99 * n + 99) / 100 OR rn = n`),
		append([]any{since, until}, projects...)...)
	if err != nil {
		return store.ReportTotals{}, err
	}

	// Attempts active in the window, summed per job in one pass (see
	// reportAttempts), then per group and into the right-sizing lists.
	over, near, err := s.reportAttempts(ctx, q, key, where, projects, row)
	if err != nil {
		return store.ReportTotals{}, err
	}

	// The attempts that ended in the window other than succeeded.
	_, err = queryAll(ctx, s, "report failures", func(rw Row) (struct{}, error) {
		var g, state, reason string
		var n int64
		err := rw.Scan(&g, &state, &reason, &n)
		r := row(g)
		r.Failures = append(r.Failures, store.ReasonCount{State: domain.AttemptState(state), Reason: domain.Reason(reason), N: int(n)})
		return struct{}{}, err
	}, Q(`SELECT `+key+`, a.state, a.reason, COUNT(*) FROM attempts a JOIN jobs j ON j.id = a.job_id
		WHERE `+notSucceeded+` AND a.finished_at > ? AND a.finished_at <= ?`+where+`
		GROUP BY 1, 2, 3 ORDER BY 1, 4 DESC, 2, 3`),
		append([]any{since, until}, projects...)...)
	if err != nil {
		return store.ReportTotals{}, err
	}

	out := store.ReportTotals{}
	for _, r := range rows {
		out.Rows = append(out.Rows, *r)
	}
	slices.SortFunc(out.Rows, func(a, b store.ReportRow) int { return strings.Compare(a.Group, b.Group) })
	out.Oversized, out.NearMemory = over, near
	return out, nil
}

// reportAttempts reads the attempts active in the window once: summed
// per job (joined to the job's group and request) into a materialized
// table, from which one statement takes the group sums and the two
// right-sizing lists. An attempt "ended" in the window when it finished
// inside it; the lists judge a job by its attempts that ended in it (their
// time clipped to the window, in whole microseconds).
func (s Shared) reportAttempts(ctx context.Context, q store.ReportQuery, key, where string, projects []any,
	row func(string) *store.ReportRow) (over, near []store.SizedJob, err error) {
	since, until := q.Since.UnixNano(), q.Until.UnixNano()
	ended := `a.finished_at <= ?`
	held := `((a.finished_at - (CASE WHEN a.started_at < ? THEN ? ELSE a.started_at END)) / 1000)`
	perJob := `SELECT a.job_id AS job_id,
			SUM(CASE WHEN a.started_at >= ? THEN 1 ELSE 0 END) AS started,
			SUM(CASE WHEN a.started_at >= ? AND a.number > 1 THEN 1 ELSE 0 END) AS retries,
			SUM(CASE WHEN ` + ended + ` THEN 1 ELSE 0 END) AS ended,
			SUM(CASE WHEN ` + ended + ` AND a.state = '` + string(domain.AttemptSucceeded) + `' THEN 1 ELSE 0 END) AS succeeded,
			SUM(CASE WHEN ` + ended + ` AND a.state = '` + string(domain.AttemptPreempted) + `' THEN 1 ELSE 0 END) AS preempted,
			SUM(CASE WHEN ` + ended + ` THEN a.cpu_seconds ELSE 0 END) AS cpu,
			SUM(CASE WHEN ` + ended + ` AND a.finished_at > a.started_at THEN ` + held + ` ELSE 0 END) AS us,
			MAX(CASE WHEN ` + ended + ` THEN a.max_rss ELSE 0 END) AS rss
			FROM attempts a
			WHERE a.started_at IS NOT NULL AND a.started_at < ? AND (a.finished_at IS NULL OR a.finished_at > ?)
			GROUP BY a.job_id`
	args := []any{since, since, until, until, until, until, until, since, since, until, until, since}
	nodes := `(CASE WHEN x.req_nodes > 1 THEN x.req_nodes ELSE 1 END)`
	// Idle CPU-seconds: held seconds × CPUs × nodes − used CPU-seconds.
	idle := `(x.us / 1e6 * x.req_cpus * ` + nodes + ` - x.cpu)`
	cols := `x.id, x.name, x.project, x.pool, x.submitter, x.req_gpus, x.req_cpus, x.req_memory, x.req_nodes,
		x.started, x.retries, x.ended, x.succeeded, x.preempted, x.cpu, x.us, x.rss`
	query := Q(`WITH x AS MATERIALIZED (SELECT ` + key + ` AS g, j.id AS id, j.name AS name, j.project AS project, j.pool AS pool,
			j.submitter AS submitter, j.req_gpus AS req_gpus, j.req_cpus AS req_cpus, j.req_memory AS req_memory,
			j.req_nodes AS req_nodes, CAST(y.started AS BIGINT) AS started, CAST(y.retries AS BIGINT) AS retries,
			CAST(y.ended AS BIGINT) AS ended, CAST(y.succeeded AS BIGINT) AS succeeded,
			CAST(y.preempted AS BIGINT) AS preempted, CAST(y.cpu AS DOUBLE PRECISION) AS cpu,
			CAST(y.us AS BIGINT) AS us, CAST(y.rss AS BIGINT) AS rss
			FROM (` + perJob + `) AS y JOIN jobs j ON j.id = y.job_id WHERE 1 = 1` + where + `)
		SELECT 'g', x.g, CAST(0 AS BIGINT), '', '', '', '', CAST(0 AS BIGINT), CAST(0 AS DOUBLE PRECISION), CAST(0 AS BIGINT), CAST(0 AS BIGINT),
			CAST(SUM(x.started) AS BIGINT), CAST(SUM(x.retries) AS BIGINT), CAST(SUM(x.ended) AS BIGINT),
			CAST(SUM(x.succeeded) AS BIGINT), CAST(SUM(x.preempted) AS BIGINT), CAST(SUM(x.cpu) AS DOUBLE PRECISION),
			CAST(0 AS BIGINT), CAST(0 AS BIGINT)
			FROM x GROUP BY x.g
		UNION ALL SELECT * FROM (SELECT 'o', '', ` + cols + ` FROM x
			WHERE x.req_cpus >= ? AND x.us >= ? AND x.cpu < x.us / 1e6 * x.req_cpus * ` + nodes + ` * CAST(? AS DOUBLE PRECISION)
			ORDER BY ` + idle + ` DESC, x.id LIMIT ?) AS o
		UNION ALL SELECT * FROM (SELECT 'm', '', ` + cols + ` FROM x
			WHERE x.req_memory > 0 AND x.rss >= x.req_memory * CAST(? AS DOUBLE PRECISION)
			ORDER BY CAST(x.rss AS DOUBLE PRECISION) / x.req_memory DESC, x.id LIMIT ?) AS m`)
	args = append(args, projects...)
	args = append(args, q.MinCPUs, q.MinRun.Microseconds(), q.Under, q.Limit, q.Near, q.Limit)
	_, err = queryAll(ctx, s, "report attempts", func(rw Row) (struct{}, error) {
		var (
			kind, g                                       string
			j                                             store.SizedJob
			gpus, memory, nodes                           int64
			started, retries, ended, succeeded, preempted int64
			cpu                                           float64
			us, rss                                       int64
		)
		if err := rw.Scan(&kind, &g, &j.JobID, &j.Name, &j.Project, &j.Pool, &j.Submitter, &gpus, &j.Resources.CPUs, &memory, &nodes,
			&started, &retries, &ended, &succeeded, &preempted, &cpu, &us, &rss); err != nil {
			return struct{}{}, err
		}
		switch kind {
		case "g":
			r := row(g)
			r.Started, r.Retries, r.Ended, r.Succeeded, r.Preempted = int(started), int(retries), int(ended), int(succeeded), int(preempted)
			r.CPUUsed = time.Duration(cpu * float64(time.Second))
			return struct{}{}, nil
		}
		j.Resources.GPUs, j.Resources.Memory, j.Resources.Nodes = int(gpus), domain.ByteSize(memory), int(nodes)
		j.Held, j.CPUUsed, j.MaxRSS = time.Duration(us)*time.Microsecond, time.Duration(cpu*float64(time.Second)), domain.ByteSize(rss)
		if kind == "o" {
			over = append(over, j)
		} else {
			near = append(near, j)
		}
		return struct{}{}, nil
	}, query, args...)
	return over, near, err
}
