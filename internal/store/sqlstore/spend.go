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
// reads a few rows. Each attempt's time is clipped to [Since, Until] and
// counted in whole microseconds; zero-length finished attempts count as
// none, as in cost.Report.
func (s Shared) SpendTotals(ctx context.Context, q store.SpendQuery) ([]store.SpendRow, error) {
	key, ok := spendKeys[q.By]
	if !ok {
		return nil, fmt.Errorf("sum spend by %q: %w", q.By, store.ErrInvalid)
	}
	if !q.AllProjects && len(q.Projects) == 0 {
		return nil, nil
	}
	since, until := q.Since.UnixNano(), q.Until.UnixNano()
	// Each attempt's time inside the window, in whole microseconds (a
	// month of 3 million attempts held at once still sums in 64 bits).
	held := `((CASE WHEN a.finished_at IS NULL OR a.finished_at > ? THEN ? ELSE a.finished_at END)
		- (CASE WHEN a.started_at < ? THEN ? ELSE a.started_at END)) / 1000`
	var args []any
	// The attempts are summed per job first, in the order of their primary
	// key (no sort), then the jobs' sums by group and resource shape.
	args = append(args, until, until, since, since) // us_ok
	args = append(args, until, until, since, since) // us_waste
	args = append(args, until, since)               // the window
	where := ""
	if !q.AllProjects {
		where = ` WHERE j.project IN (?` + strings.Repeat(", ?", len(q.Projects)-1) + `)`
		for _, p := range q.Projects {
			args = append(args, p)
		}
	}
	nkey := strings.Count(key, ",") + 1
	groupBy := make([]string, 0, nkey+5)
	for i := range nkey + 5 {
		groupBy = append(groupBy, strconv.Itoa(i+1))
	}
	query := Q(`SELECT ` + key + `, j.pool, j.req_gpus, j.req_cpus, j.req_memory, j.req_nodes,
		CAST(SUM(x.n_ok) AS BIGINT), CAST(SUM(x.n_waste) AS BIGINT), CAST(SUM(x.running) AS BIGINT),
		CAST(SUM(x.us_ok) AS BIGINT), CAST(SUM(x.us_waste) AS BIGINT)
		FROM (SELECT a.job_id AS job_id,
			SUM(CASE WHEN ` + waste + ` THEN 0 ELSE 1 END) AS n_ok,
			SUM(CASE WHEN ` + waste + ` THEN 1 ELSE 0 END) AS n_waste,
			SUM(CASE WHEN a.finished_at IS NULL THEN 1 ELSE 0 END) AS running,
			SUM(CASE WHEN ` + waste + ` THEN 0 ELSE ` + held + ` END) AS us_ok,
			SUM(CASE WHEN ` + waste + ` THEN ` + held + ` ELSE 0 END) AS us_waste
			FROM attempts a
			WHERE a.started_at IS NOT NULL AND a.started_at <= ? AND (a.finished_at IS NULL OR (a.finished_at > ? AND a.finished_at > a.started_at))
			GROUP BY a.job_id) AS x
		JOIN jobs j ON j.id = x.job_id` + where + `
		GROUP BY ` + strings.Join(groupBy, ", "))
	type sums struct {
		ok, waste store.SpendRow
	}
	got, err := queryAll(ctx, s, "sum spend", func(row Row) (sums, error) {
		var (
			r                                   store.SpendRow
			gpus, memory, nodes                 int64
			nOK, nWaste, running, usOK, usWaste int64
			id                                  int64
			name                                string
		)
		dest := []any{&r.Group}
		if q.By == "job" {
			dest = []any{&id, &name}
		}
		dest = append(dest, &r.Pool, &gpus, &r.Resources.CPUs, &memory, &nodes, &nOK, &nWaste, &running, &usOK, &usWaste)
		if err := row.Scan(dest...); err != nil {
			return sums{}, err
		}
		if q.By == "job" {
			r.Group = strconv.FormatInt(id, 10)
			if name != "" {
				r.Group += " " + name
			}
		}
		r.Resources.GPUs, r.Resources.Memory, r.Resources.Nodes = int(gpus), domain.ByteSize(memory), int(nodes)
		w := r
		r.Attempts, r.Running, r.Held = int(nOK), int(running), time.Duration(usOK)*time.Microsecond
		w.Waste, w.Attempts, w.Held = true, int(nWaste), time.Duration(usWaste)*time.Microsecond
		return sums{r, w}, nil
	}, query, args...)
	if err != nil {
		return nil, err
	}
	var out []store.SpendRow
	for _, g := range got {
		for _, r := range []store.SpendRow{g.ok, g.waste} {
			if r.Attempts > 0 {
				out = append(out, r)
			}
		}
	}
	return out, nil
}
