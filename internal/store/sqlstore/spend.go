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

// wasteStates are the attempt states whose spend bought nothing that
// lasts (cost.Span.Waste).
var wasteStates = []domain.AttemptState{domain.AttemptPreempted, domain.AttemptFailed, domain.AttemptLost, domain.AttemptTimedOut}

// SpendTotals implements store.Jobs: the database sums each group's held
// time by pool and resource shape, so a report over a million attempts
// reads a few rows. Each attempt's time is clipped to [Since, Until] and
// counted in whole milliseconds; zero-length finished attempts count as
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
	args := []any{}
	for _, st := range wasteStates {
		args = append(args, string(st))
	}
	// end and start of each attempt inside the window, in nanoseconds.
	end := `(CASE WHEN a.finished_at IS NULL OR a.finished_at > ? THEN ? ELSE a.finished_at END)`
	start := `(CASE WHEN a.started_at < ? THEN ? ELSE a.started_at END)`
	args = append(args, until, until, since, since, until, since)
	where := `a.started_at IS NOT NULL AND a.started_at <= ? AND (a.finished_at IS NULL OR (a.finished_at > ? AND a.finished_at > a.started_at))`
	if !q.AllProjects {
		where += ` AND j.project IN (?` + strings.Repeat(", ?", len(q.Projects)-1) + `)`
		for _, p := range q.Projects {
			args = append(args, p)
		}
	}
	nkey := strings.Count(key, ",") + 1
	groupBy := make([]string, 0, nkey+6)
	for i := range nkey + 6 {
		groupBy = append(groupBy, strconv.Itoa(i+1))
	}
	query := Q(`SELECT ` + key + `, j.pool, j.req_gpus, j.req_cpus, j.req_memory, j.req_nodes,
		CASE WHEN a.state IN (?, ?, ?, ?) THEN 1 ELSE 0 END,
		COUNT(*), CAST(SUM(CASE WHEN a.finished_at IS NULL THEN 1 ELSE 0 END) AS BIGINT),
		CAST(SUM((` + end + ` - ` + start + `) / 1000000) AS BIGINT)
		FROM attempts a JOIN jobs j ON j.id = a.job_id
		WHERE ` + where + `
		GROUP BY ` + strings.Join(groupBy, ", "))
	return queryAll(ctx, s, "sum spend", func(row Row) (store.SpendRow, error) {
		var (
			r                                  store.SpendRow
			gpus, memory, nodes, waste, heldMS int64
			attempts, running                  int64
			id                                 int64
			name                               string
		)
		dest := []any{&r.Group}
		if q.By == "job" {
			dest = []any{&id, &name}
		}
		dest = append(dest, &r.Pool, &gpus, &r.Resources.CPUs, &memory, &nodes, &waste, &attempts, &running, &heldMS)
		if err := row.Scan(dest...); err != nil {
			return r, err
		}
		if q.By == "job" {
			r.Group = strconv.FormatInt(id, 10)
			if name != "" {
				r.Group += " " + name
			}
		}
		r.Resources.GPUs, r.Resources.Memory, r.Resources.Nodes = int(gpus), domain.ByteSize(memory), int(nodes)
		r.Waste, r.Attempts, r.Running = waste != 0, int(attempts), int(running)
		r.Held = time.Duration(heldMS) * time.Millisecond
		return r, nil
	}, query, args...)
}
