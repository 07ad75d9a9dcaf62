package sqlstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
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

// ReportTotals implements store.Jobs. Four statements, each one pass, run
// at once: the jobs submitted in the window and those first started in it
// (queue times as nearest-rank percentiles by window functions), both on
// indexes of their times; the attempts active in it, summed per job and
// from those sums per group and into the right-sizing lists; and the
// attempts that ended in it other than succeeded, by state and reason (on
// the state index).
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
	// The statements run at once, each setting its own fields of the
	// groups' rows.
	var mu sync.Mutex
	rows := map[string]*store.ReportRow{}
	row := func(g string) *store.ReportRow {
		mu.Lock()
		defer mu.Unlock()
		r, ok := rows[g]
		if !ok {
			r = &store.ReportRow{Group: g}
			rows[g] = r
		}
		return r
	}
	var wg sync.WaitGroup
	var errs [4]error

	// Jobs submitted in the window.
	wg.Go(func() {
		_, errs[0] = queryAll(ctx, s, "report submissions", func(rw Row) (struct{}, error) {
			var g string
			var n int64
			err := rw.Scan(&g, &n)
			row(g).Submitted = int(n)
			return struct{}{}, err
		}, Q(`SELECT `+key+`, COUNT(*) FROM jobs j WHERE j.submitted_at >= ? AND j.submitted_at < ?`+where+` GROUP BY 1`),
			append([]any{since, until}, projects...)...)
	})

	// Queue times of the jobs that first started in the window: the
	// nearest-rank p-th percentile of n values is the ceil(p·n/100)-th.
	wg.Go(func() {
		_, errs[1] = queryAll(ctx, s, "report queue times", func(rw Row) (struct{}, error) {
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
	})

	// Attempts active in the window, summed per job in one pass (see
	// reportAttempts), then per group and into the right-sizing lists.
	// The attempts are read in parts of the job ids, one per core, at once.
	var spend []store.SpendRow
	var over, near []store.SizedJob
	wg.Go(func() { spend, over, near, errs[2] = s.reportParts(ctx, q, key, where, projects, row) })

	// The attempts that ended in the window other than succeeded.
	wg.Go(func() {
		_, errs[3] = queryAll(ctx, s, "report failures", func(rw Row) (struct{}, error) {
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
	})
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return store.ReportTotals{}, err
	}

	out := store.ReportTotals{}
	for _, r := range rows {
		// The first attempts that started in the window are the jobs that
		// first started in it; every attempt that ended is succeeded or
		// one of the failures.
		r.Retries, r.Succeeded = r.Started-r.Queue.N, r.Ended
		for _, f := range r.Failures {
			r.Succeeded -= f.N
			if f.State == domain.AttemptPreempted {
				r.Preempted += f.N
			}
		}
		out.Rows = append(out.Rows, *r)
	}
	slices.SortFunc(out.Rows, func(a, b store.ReportRow) int { return strings.Compare(a.Group, b.Group) })
	out.Spend, out.Oversized, out.NearMemory = spend, over, near
	return out, nil
}

var qJobIDRange = Q(`SELECT COALESCE(MIN(id), 0), COALESCE(MAX(id), 0) FROM jobs`)

// reportParts runs reportAttempts over parts of the job ids at once
// (q.Parts, or as many as there are cores, up to 4, for a history of some
// size) and
// merges them: the group sums add, the spend rows of the same group,
// pool, shape and waste add, and the lists are cut to q.Limit again in
// the statement's order.
func (s Shared) reportParts(ctx context.Context, q store.ReportQuery, key, where string, projects []any,
	row func(string) *store.ReportRow) (spend []store.SpendRow, over, near []store.SizedJob, err error) {
	ids, err := queryOne(ctx, s, "report job ids", func(r Row) (ids [2]int64, err error) {
		return ids, r.Scan(&ids[0], &ids[1])
	}, qJobIDRange)
	if err != nil {
		return nil, nil, nil, err
	}
	lo, hi := ids[0], ids[1]
	parts := q.Parts
	switch {
	case parts > 0:
	case hi-lo < 10_000:
		parts = 1
	default:
		parts = min(runtime.GOMAXPROCS(0), 4)
	}
	type result struct {
		groups     map[string]*store.ReportRow
		spend      []store.SpendRow
		over, near []store.SizedJob
		err        error
	}
	results := make([]result, parts)
	var wg sync.WaitGroup
	width := (hi - lo + int64(parts)) / int64(parts)
	for i := range parts {
		part := [2]int64{lo + int64(i)*width, lo + int64(i+1)*width}
		if i == parts-1 {
			part[1] = hi + 1
		}
		wg.Go(func() {
			r := &results[i]
			r.groups = map[string]*store.ReportRow{}
			r.spend, r.over, r.near, r.err = s.reportAttempts(ctx, q, key, where, projects, part, r.groups)
		})
	}
	wg.Wait()
	type spendKey struct {
		group, pool string
		res         domain.Resources
		waste       bool
	}
	at := map[spendKey]int{}
	for _, r := range results {
		if r.err != nil {
			return nil, nil, nil, r.err
		}
		for g, sum := range r.groups {
			t := row(g)
			t.Started += sum.Started
			t.Ended += sum.Ended
			t.CPUUsed += sum.CPUUsed
			t.GPUUsed += sum.GPUUsed
		}
		for _, sr := range r.spend {
			k := spendKey{sr.Group, sr.Pool, sr.Resources, sr.Waste}
			i, ok := at[k]
			if !ok {
				at[k] = len(spend)
				spend = append(spend, sr)
				continue
			}
			t := &spend[i]
			t.Attempts += sr.Attempts
			t.Running += sr.Running
			t.Held += sr.Held
			for p := range t.HeldIn {
				t.HeldIn[p] += sr.HeldIn[p]
			}
		}
		over, near = append(over, r.over...), append(near, r.near...)
	}
	idle := func(j store.SizedJob) float64 {
		return float64(j.Held.Microseconds())/1e6*j.Resources.CPUs*float64(max(j.Resources.Nodes, 1)) - j.CPUUsed.Seconds()
	}
	slices.SortStableFunc(over, func(a, b store.SizedJob) int {
		if c := cmp.Compare(idle(b), idle(a)); c != 0 {
			return c
		}
		return cmp.Compare(a.JobID, b.JobID)
	})
	ratio := func(j store.SizedJob) float64 { return float64(j.MaxRSS) / float64(j.Resources.Memory) }
	slices.SortStableFunc(near, func(a, b store.SizedJob) int {
		if c := cmp.Compare(ratio(b), ratio(a)); c != 0 {
			return c
		}
		return cmp.Compare(a.JobID, b.JobID)
	})
	return spend, over[:min(len(over), q.Limit)], near[:min(len(near), q.Limit)], nil
}

// reportAttempts reads the attempts active in the window once: summed
// per job (joined to the job's group and request) into a materialized
// table, from which one statement takes the group sums by resource shape
// (with the spend sums of SpendTotals, to the same rules) and the two
// right-sizing lists. An attempt "ended" in the window when it finished
// inside it; the lists judge a job by its attempts that ended in it (their
// time clipped to the window, in whole microseconds). It counts what
// cannot be had otherwise: attempts started and ended, their CPU time and
// held time and memory peaks; retries, successes and preemptions follow
// from the other statements (ReportTotals).
func (s Shared) reportAttempts(ctx context.Context, q store.ReportQuery, key, where string, projects []any, ids [2]int64,
	groups map[string]*store.ReportRow) (spend []store.SpendRow, over, near []store.SizedJob, err error) {
	since, until := q.Since.UnixNano(), q.Until.UnixNano()
	var args []any
	arg := func(vs ...any) { args = append(args, vs...) }
	ended := `a.finished_at <= ?`
	// What SpendTotals counts: attempts that held resources for some time
	// in the window, each clipped to it, in whole microseconds.
	spent := `(a.started_at <= ? AND (a.finished_at IS NULL OR a.finished_at > a.started_at))`
	clipped := `((CASE WHEN a.finished_at IS NULL OR a.finished_at > ? THEN ? ELSE a.finished_at END)
		- (CASE WHEN a.started_at < ? THEN ? ELSE a.started_at END)) / 1000`
	// Each attempt's flags and clipped time are computed once, in a
	// subquery the planner keeps ({NOFLAT}); the sums multiply them.
	perJob := `SELECT t.job_id AS job_id, SUM(t.st) AS started, SUM(t.e) AS ended, SUM(t.e * t.cpu) AS cpu, SUM(t.e * t.gpu) AS gpu,
			SUM(t.e * t.h) AS us, MAX(t.e * t.rss) AS rss,
			SUM(t.sp * (1 - t.w)) AS n_ok, SUM(t.sp * t.w) AS n_waste, SUM(t.sp * t.r) AS running,
			SUM(t.sp * (1 - t.w) * t.h) AS us_ok, SUM(t.sp * t.w * t.h) AS us_waste
		FROM (SELECT a.job_id AS job_id,
			CASE WHEN a.started_at >= ? AND a.started_at < ? THEN 1 ELSE 0 END AS st,
			CASE WHEN ` + ended + ` THEN 1 ELSE 0 END AS e,
			CASE WHEN a.finished_at IS NULL THEN 1 ELSE 0 END AS r,
			CASE WHEN ` + spent + ` THEN 1 ELSE 0 END AS sp,
			CASE WHEN ` + waste + ` THEN 1 ELSE 0 END AS w,
			` + clipped + ` AS h, a.cpu_seconds AS cpu, a.gpu_seconds AS gpu, a.max_rss AS rss
			FROM attempts a
			WHERE a.job_id >= ? AND a.job_id < ? AND a.started_at IS NOT NULL AND a.started_at <= ? AND (a.finished_at IS NULL OR a.finished_at > ?)
			{BYJOB}{NOFLAT}) AS t
		GROUP BY t.job_id`
	arg(since, until, until, until, until, until, since, since, ids[0], ids[1], until, since)
	arg(projects...)
	nodes := `(CASE WHEN x.req_nodes > 1 THEN x.req_nodes ELSE 1 END)`
	// Idle CPU-seconds: held seconds × CPUs × nodes − used CPU-seconds.
	idle := `(x.us / 1e6 * x.req_cpus * ` + nodes + ` - x.cpu)`
	zero := `CAST(0 AS BIGINT)`
	job := `x.id, x.name, x.project, x.pool, x.submitter, x.req_gpus, x.req_cpus, x.req_memory, x.req_nodes,
		x.started, x.ended, x.cpu, x.gpu, x.us, x.rss, ` + strings.Repeat(zero+", ", 4) + zero
	query := Q(`WITH x AS MATERIALIZED (SELECT ` + key + ` AS g, j.id AS id, j.name AS name, j.project AS project, j.pool AS pool,
			j.submitter AS submitter, j.req_gpus AS req_gpus, j.req_cpus AS req_cpus, j.req_memory AS req_memory,
			j.req_nodes AS req_nodes, CAST(y.started AS BIGINT) AS started, CAST(y.ended AS BIGINT) AS ended,
			CAST(y.cpu AS DOUBLE PRECISION) AS cpu, CAST(y.gpu AS DOUBLE PRECISION) AS gpu, CAST(y.us AS BIGINT) AS us, CAST(y.rss AS BIGINT) AS rss,
			CAST(y.n_ok AS BIGINT) AS n_ok, CAST(y.n_waste AS BIGINT) AS n_waste, CAST(y.running AS BIGINT) AS running,
			CAST(y.us_ok AS BIGINT) AS us_ok, CAST(y.us_waste AS BIGINT) AS us_waste
			FROM (` + perJob + `) AS y {THENJOIN} jobs j ON j.id = y.job_id WHERE 1 = 1` + where + `)
		SELECT 'g', x.g, ` + zero + `, '', '', x.pool, '', x.req_gpus, x.req_cpus, x.req_memory, x.req_nodes,
			CAST(SUM(x.started) AS BIGINT), CAST(SUM(x.ended) AS BIGINT), CAST(SUM(x.cpu) AS DOUBLE PRECISION),
			CAST(SUM(x.gpu) AS DOUBLE PRECISION), ` + zero + `, ` + zero + `, CAST(SUM(x.n_ok) AS BIGINT), CAST(SUM(x.n_waste) AS BIGINT), CAST(SUM(x.running) AS BIGINT),
			CAST(SUM(x.us_ok) AS BIGINT), CAST(SUM(x.us_waste) AS BIGINT)
			FROM x GROUP BY x.g, x.pool, x.req_gpus, x.req_cpus, x.req_memory, x.req_nodes
		UNION ALL SELECT * FROM (SELECT 'o', '', ` + job + ` FROM x
			WHERE x.req_cpus >= ? AND x.us >= ? AND x.cpu < x.us / 1e6 * x.req_cpus * ` + nodes + ` * CAST(? AS DOUBLE PRECISION)
			ORDER BY ` + idle + ` DESC, x.id LIMIT ?) AS o
		UNION ALL SELECT * FROM (SELECT 'm', '', ` + job + ` FROM x
			WHERE x.req_memory > 0 AND x.rss >= x.req_memory * CAST(? AS DOUBLE PRECISION)
			ORDER BY CAST(x.rss AS DOUBLE PRECISION) / x.req_memory DESC, x.id LIMIT ?) AS m`)
	arg(q.MinCPUs, q.MinRun.Microseconds(), q.Under, q.Limit, q.Near, q.Limit)
	_, err = queryAll(ctx, s, "report attempts", func(rw Row) (struct{}, error) {
		var (
			kind, g                             string
			j                                   store.SizedJob
			gpus, memory, nodes                 int64
			started, ended                      int64
			cpu, gpu                            float64
			us, rss                             int64
			nOK, nWaste, running, usOK, usWaste int64
		)
		if err := rw.Scan(&kind, &g, &j.JobID, &j.Name, &j.Project, &j.Pool, &j.Submitter, &gpus, &j.Resources.CPUs, &memory, &nodes,
			&started, &ended, &cpu, &gpu, &us, &rss, &nOK, &nWaste, &running, &usOK, &usWaste); err != nil {
			return struct{}{}, err
		}
		j.Resources.GPUs, j.Resources.Memory, j.Resources.Nodes = int(gpus), domain.ByteSize(memory), int(nodes)
		switch kind {
		case "g":
			r, seen := groups[g]
			if !seen {
				r = &store.ReportRow{Group: g}
				groups[g] = r
			}
			r.Started += int(started)
			r.Ended += int(ended)
			r.CPUUsed += time.Duration(cpu * float64(time.Second))
			r.GPUUsed += time.Duration(gpu * float64(time.Second))
			held, heldWaste := time.Duration(usOK)*time.Microsecond, time.Duration(usWaste)*time.Microsecond
			ok := store.SpendRow{Group: g, Pool: j.Pool, Resources: j.Resources, Attempts: int(nOK), Running: int(running),
				Held: held, HeldIn: []time.Duration{held}}
			wasted := store.SpendRow{Group: g, Pool: j.Pool, Resources: j.Resources, Waste: true, Attempts: int(nWaste),
				Held: heldWaste, HeldIn: []time.Duration{heldWaste}}
			for _, sr := range []store.SpendRow{ok, wasted} {
				if sr.Attempts > 0 {
					spend = append(spend, sr)
				}
			}
		case "o":
			j.Held, j.CPUUsed, j.MaxRSS = time.Duration(us)*time.Microsecond, time.Duration(cpu*float64(time.Second)), domain.ByteSize(rss)
			over = append(over, j)
		default:
			j.Held, j.CPUUsed, j.MaxRSS = time.Duration(us)*time.Microsecond, time.Duration(cpu*float64(time.Second)), domain.ByteSize(rss)
			near = append(near, j)
		}
		return struct{}{}, nil
	}, query, args...)
	return spend, over, near, err
}
