package sqlstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// reportKeys are the group columns of ReportTotals, by grouping, in the
// jobs table and in usage_hours.
var reportKeys = map[string][2]string{"project": {"j.project", "u.project"}, "pool": {"j.pool", "u.pool"}}

// unfinished lists the states of attempts that have not ended (constants
// written into the statement, so the attempts_state index serves them).
var unfinished = func() string {
	states := []string{}
	for _, st := range []domain.AttemptState{domain.AttemptStarting, domain.AttemptRunning} {
		states = append(states, "'"+string(st)+"'")
	}
	return "a.state IN (" + strings.Join(states, ", ") + ")"
}()

// ReportTotals implements store.Jobs. Five statements run at once, none
// of which reads the attempts that ended: the jobs submitted in the window
// and those first started in it (queue times as nearest-rank percentiles
// by window functions), both on indexes of their times; the window's
// hours of usage_hours, which hold the ended attempts; the attempts still
// running (on the state index); and the right-sizing lists, from the
// totals of the jobs whose latest attempt ended in the window (on the
// index of that time). The window's start is taken to its hour.
func (s Shared) ReportTotals(ctx context.Context, q store.ReportQuery) (store.ReportTotals, error) {
	keys, ok := reportKeys[q.By]
	if !ok {
		return store.ReportTotals{}, fmt.Errorf("report by %q: %w", q.By, store.ErrInvalid)
	}
	if !q.AllProjects && len(q.Projects) == 0 {
		return store.ReportTotals{}, nil
	}
	key, hourKey := keys[0], keys[1]
	sinceT := store.ReportSince(q.Since)
	since, until, hoursEnd := sinceT.UnixNano(), q.Until.UnixNano(), store.ReportHoursEnd(q.Until).UnixNano()
	where := func(alias string) string { return "" }
	var projects []any
	if !q.AllProjects {
		where = func(alias string) string {
			return ` AND ` + alias + `.project IN (?` + strings.Repeat(", ?", len(q.Projects)-1) + `)`
		}
		for _, p := range q.Projects {
			projects = append(projects, p)
		}
	}
	// The statements run at once, each setting its own fields of the
	// groups' rows.
	var mu sync.Mutex
	rows := map[string]*store.ReportRow{}
	row := func(g string) *store.ReportRow {
		r, ok := rows[g]
		if !ok {
			r = &store.ReportRow{Group: g}
			rows[g] = r
		}
		return r
	}
	type spendKey struct {
		group, pool string
		res         domain.Resources
		waste       bool
	}
	spend := map[spendKey]*store.SpendRow{}
	spent := func(k spendKey) *store.SpendRow {
		r, ok := spend[k]
		if !ok {
			r = &store.SpendRow{Group: k.group, Pool: k.pool, Resources: k.res, Waste: k.waste}
			spend[k] = r
		}
		return r
	}
	var over, near []store.SizedJob
	var wg sync.WaitGroup
	var errs [5]error

	// Jobs submitted in the window.
	wg.Go(func() {
		_, errs[0] = queryAll(ctx, s, "report submissions", func(rw Row) (struct{}, error) {
			var g string
			var n int64
			err := rw.Scan(&g, &n)
			mu.Lock()
			row(g).Submitted = int(n)
			mu.Unlock()
			return struct{}{}, err
		}, Q(`SELECT `+key+`, COUNT(*) FROM jobs j WHERE j.submitted_at >= ? AND j.submitted_at < ?`+where("j")+` GROUP BY 1`),
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
			mu.Lock()
			defer mu.Unlock()
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
			FROM jobs j WHERE j.started_at >= ? AND j.started_at < ?`+where("j")+`) AS t
		WHERE rn = (50 * n + 99) / 100 OR rn = (90 * n + 99) / 100 OR rn = (99 * n + 99) / 100 OR rn = n`),
			append([]any{since, until}, projects...)...)
	})

	// The ended attempts, by the hours of the window: the attempts that
	// held resources in it are those whose holding began in one of its
	// hours and those held across its start.
	wg.Go(func() {
		_, errs[2] = queryAll(ctx, s, "report hours", func(rw Row) (struct{}, error) {
			var (
				g, pool, state, reason           string
				res                              domain.Resources
				gpus, memory, nodes              int64
				started, attempts, ended, heldUS int64
				cpu, gpu                         float64
			)
			if err := rw.Scan(&g, &pool, &gpus, &res.CPUs, &memory, &nodes, &state, &reason,
				&started, &attempts, &ended, &heldUS, &cpu, &gpu); err != nil {
				return struct{}{}, err
			}
			res.GPUs, res.Memory, res.Nodes = int(gpus), domain.ByteSize(memory), int(nodes)
			st := domain.AttemptState(state)
			mu.Lock()
			defer mu.Unlock()
			r := row(g)
			r.Started += int(started)
			r.Ended += int(ended)
			r.CPUUsed += time.Duration(cpu * float64(time.Second))
			r.GPUUsed += time.Duration(gpu * float64(time.Second))
			if ended > 0 && st != domain.AttemptSucceeded {
				i := slices.IndexFunc(r.Failures, func(f store.ReasonCount) bool { return f.State == st && f.Reason == domain.Reason(reason) })
				if i < 0 {
					i = len(r.Failures)
					r.Failures = append(r.Failures, store.ReasonCount{State: st, Reason: domain.Reason(reason)})
				}
				r.Failures[i].N += int(ended)
			}
			if attempts > 0 {
				sr := spent(spendKey{g, pool, res, st.Wasted()})
				sr.Attempts += int(attempts)
				sr.Held += time.Duration(heldUS) * time.Microsecond
			}
			return struct{}{}, nil
		}, Q(`SELECT `+hourKey+`, u.pool, u.req_gpus, u.req_cpus, u.req_memory, u.req_nodes, u.state, u.reason,
			CAST(SUM(u.started) AS BIGINT), CAST(SUM(u.spent) + SUM(CASE WHEN u.hour = ? THEN u.carried ELSE 0 END) AS BIGINT),
			CAST(SUM(u.ended) AS BIGINT), CAST(SUM(u.held_us) AS BIGINT),
			CAST(SUM(u.cpu_seconds) AS DOUBLE PRECISION), CAST(SUM(u.gpu_seconds) AS DOUBLE PRECISION)
		FROM usage_hours u WHERE u.hour >= ? AND u.hour < ?`+where("u")+`
		GROUP BY `+hourKey+`, u.pool, u.req_gpus, u.req_cpus, u.req_memory, u.req_nodes, u.state, u.reason`),
			append([]any{since, since, hoursEnd}, projects...)...)
	})

	// The attempts still running, held up to the window's end.
	wg.Go(func() {
		_, errs[3] = queryAll(ctx, s, "report running attempts", func(rw Row) (struct{}, error) {
			var (
				g, pool             string
				res                 domain.Resources
				gpus, memory, nodes int64
				n, started, heldUS  int64
			)
			if err := rw.Scan(&g, &pool, &gpus, &res.CPUs, &memory, &nodes, &n, &started, &heldUS); err != nil {
				return struct{}{}, err
			}
			res.GPUs, res.Memory, res.Nodes = int(gpus), domain.ByteSize(memory), int(nodes)
			mu.Lock()
			defer mu.Unlock()
			row(g).Started += int(started)
			sr := spent(spendKey{g, pool, res, false})
			sr.Attempts += int(n)
			sr.Running += int(n)
			sr.Held += time.Duration(heldUS) * time.Microsecond
			return struct{}{}, nil
		}, Q(`SELECT `+key+`, j.pool, j.req_gpus, j.req_cpus, j.req_memory, j.req_nodes, COUNT(*),
			CAST(SUM(CASE WHEN a.started_at >= ? AND a.started_at < ? THEN 1 ELSE 0 END) AS BIGINT),
			CAST(SUM(CAST(? AS BIGINT) / 1000 - (CASE WHEN a.started_at < ? THEN ? ELSE a.started_at END) / 1000) AS BIGINT)
		FROM attempts a JOIN jobs j ON j.id = a.job_id
		WHERE `+unfinished+` AND a.finished_at IS NULL AND a.started_at IS NOT NULL AND a.started_at <= ?`+where("j")+`
		GROUP BY `+key+`, j.pool, j.req_gpus, j.req_cpus, j.req_memory, j.req_nodes`),
			append([]any{since, until, until, since, since, until}, projects...)...)
	})

	// The right-sizing lists: jobs whose latest attempt ended in the
	// window, judged by all their ended attempts.
	wg.Go(func() { over, near, errs[4] = s.reportSized(ctx, q, since, until, where("j"), projects) })
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return store.ReportTotals{}, err
	}

	out := store.ReportTotals{Oversized: over, NearMemory: near}
	for _, r := range rows {
		// The first attempts that started in the window are the jobs that
		// first started in it; every attempt that ended is succeeded or
		// one of the failures.
		r.Retries, r.Succeeded = r.Started-r.Queue.N, r.Ended
		slices.SortFunc(r.Failures, func(a, b store.ReasonCount) int {
			return cmp.Or(cmp.Compare(b.N, a.N), strings.Compare(string(a.State), string(b.State)), strings.Compare(string(a.Reason), string(b.Reason)))
		})
		for _, f := range r.Failures {
			r.Succeeded -= f.N
			if f.State == domain.AttemptPreempted {
				r.Preempted += f.N
			}
		}
		out.Rows = append(out.Rows, *r)
	}
	slices.SortFunc(out.Rows, func(a, b store.ReportRow) int { return strings.Compare(a.Group, b.Group) })
	for _, sr := range spend {
		sr.HeldIn = []time.Duration{sr.Held}
		out.Spend = append(out.Spend, *sr)
	}
	slices.SortFunc(out.Spend, func(a, b store.SpendRow) int {
		return cmp.Or(strings.Compare(a.Group, b.Group), strings.Compare(a.Pool, b.Pool), cmp.Compare(a.Resources.GPUs, b.Resources.GPUs),
			cmp.Compare(a.Resources.CPUs, b.Resources.CPUs), cmp.Compare(a.Resources.Memory, b.Resources.Memory),
			cmp.Compare(a.Resources.Nodes, b.Resources.Nodes), boolCompare(a.Waste, b.Waste))
	})
	return out, nil
}

func boolCompare(a, b bool) int {
	switch {
	case a == b:
		return 0
	case b:
		return -1
	}
	return 1
}

// reportSized reads the two right-sizing lists in one statement from the
// jobs' usage totals: those that used under q.Under of the CPUs they held
// (most idle CPU time first) and those that peaked at q.Near of their
// memory limit or more (closest first), each cut to q.Limit.
func (s Shared) reportSized(ctx context.Context, q store.ReportQuery, since, until int64, where string, projects []any) (over, near []store.SizedJob, err error) {
	nodes := `(CASE WHEN j.req_nodes > 1 THEN j.req_nodes ELSE 1 END)`
	// Idle CPU-seconds: held seconds × CPUs × nodes − used CPU-seconds.
	idle := `(j.held_us / 1e6 * j.req_cpus * ` + nodes + ` - j.used_cpu_seconds)`
	cols := `j.id, j.name, j.project, j.pool, j.submitter, j.req_gpus, j.req_cpus, j.req_memory, j.req_nodes,
		j.held_us, j.used_cpu_seconds, j.peak_rss`
	ended := `j.usage_at > ? AND j.usage_at <= ?` + where
	query := Q(`SELECT * FROM (SELECT 'o', ` + cols + ` FROM jobs j
			WHERE ` + ended + ` AND j.req_cpus >= ? AND j.held_us >= ?
			AND j.used_cpu_seconds < j.held_us / 1e6 * j.req_cpus * ` + nodes + ` * CAST(? AS DOUBLE PRECISION)
			ORDER BY ` + idle + ` DESC, j.id LIMIT ?) AS o
		UNION ALL SELECT * FROM (SELECT 'm', ` + cols + ` FROM jobs j
			WHERE ` + ended + ` AND j.req_memory > 0 AND j.peak_rss >= j.req_memory * CAST(? AS DOUBLE PRECISION)
			ORDER BY CAST(j.peak_rss AS DOUBLE PRECISION) / j.req_memory DESC, j.id LIMIT ?) AS m`)
	args := append([]any{since, until}, projects...)
	args = append(args, q.MinCPUs, q.MinRun.Microseconds(), q.Under, q.Limit, since, until)
	args = append(append(args, projects...), q.Near, q.Limit)
	_, err = queryAll(ctx, s, "report right-sizing", func(rw Row) (struct{}, error) {
		var (
			kind                string
			j                   store.SizedJob
			gpus, memory, nodes int64
			us, rss             int64
			cpu                 float64
		)
		if err := rw.Scan(&kind, &j.JobID, &j.Name, &j.Project, &j.Pool, &j.Submitter, &gpus, &j.Resources.CPUs, &memory, &nodes,
			&us, &cpu, &rss); err != nil {
			return struct{}{}, err
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
