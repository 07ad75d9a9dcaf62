package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

var _ store.Metrics = Shared{}

// pointsPerInsert is how many rows one SQLite INSERT statement carries (6
// parameters each, well under SQLite's parameter limit).
const pointsPerInsert = 128

// insertPointsSQL returns SQLite's INSERT statement for n rows.
func insertPointsSQL(n int) string {
	var b strings.Builder
	b.WriteString("INSERT OR IGNORE INTO metric_points (job_id, attempt, step, key, value, at) VALUES ")
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,?,?,?)")
	}
	return b.String()
}

const healthColumns = `job_id, number, started_at, last_progress_at, health_failed, health_message`

var (
	// qPointsInsertFull inserts pointsPerInsert points on SQLite; on
	// PostgreSQL qPointsInsert inserts any number of points in one
	// statement, from one array per column. Both skip duplicates.
	qPointsInsertFull = Each(insertPointsSQL(pointsPerInsert), "")
	qPointsInsert     = Each("", `INSERT INTO metric_points (job_id, attempt, step, key, value, at)
		SELECT * FROM unnest($1::bigint[], $2::int[], $3::bigint[], $4::text[], $5::float8[], $6::bigint[])
		ON CONFLICT DO NOTHING`)
	// qProgress moves one attempt's last progress to a time unless a later
	// one is stored; qProgressEach (PostgreSQL) moves each listed
	// attempt's.
	qProgress = Each(`UPDATE attempts SET last_progress_at = MAX(COALESCE(last_progress_at, 0), ?) WHERE job_id = ? AND number = ?`,
		`UPDATE attempts SET last_progress_at = GREATEST(COALESCE(last_progress_at, 0), $1) WHERE job_id = $2 AND number = $3`)
	qProgressEach = Each("", `UPDATE attempts a SET last_progress_at = GREATEST(COALESCE(a.last_progress_at, 0), v.at)
		FROM unnest($1::bigint[], $2::int[], $3::bigint[]) AS v(job_id, number, at)
		WHERE a.job_id = v.job_id AND a.number = v.number`)
	qMetricsAll = Q(`SELECT attempt, step, key, value, at FROM metric_points WHERE job_id = ? ORDER BY key, step, at`)
	qMetricsKey = Q(`SELECT attempt, step, key, value, at FROM metric_points WHERE job_id = ? AND key = ? ORDER BY step, at`)
	qHealthFail = Q(`UPDATE attempts SET health_failed = ?, health_message = ?
		WHERE job_id = ? AND number = ? AND state IN (?, ?)`)
	qHealthGet    = Q(`SELECT ` + healthColumns + ` FROM attempts WHERE job_id = ? AND number = ?`)
	qHealthActive = Q(`SELECT ` + healthColumns + ` FROM attempts WHERE state IN (?, ?) ORDER BY job_id, number`)
)

// AppendPoints stores points through the writer, so concurrent calls share
// one transaction: in multi-row INSERTs on SQLite, in one statement on
// PostgreSQL.
func (s Shared) AppendPoints(ctx context.Context, points []domain.MetricPoint) error {
	if len(points) == 0 {
		return nil
	}
	for _, p := range points {
		if p.Key == "" || p.JobID <= 0 || p.Attempt <= 0 {
			return fmt.Errorf("append metric points: a point needs a job, an attempt and a key (got job %d attempt %d key %q): %w",
				p.JobID, p.Attempt, p.Key, store.ErrInvalid)
		}
	}
	// Reported points are progress: each attempt's last progress moves to
	// its latest point.
	type ref struct {
		job     int64
		attempt int
	}
	latest := map[ref]int64{}
	var order []ref
	for _, p := range points {
		r, at := ref{p.JobID, p.Attempt}, p.At.UnixNano()
		prev, seen := latest[r]
		if !seen {
			order = append(order, r)
			prev = at
		}
		latest[r] = max(prev, at)
	}
	if s.e == Postgres {
		n := len(points)
		jobs, attempts, steps := make([]int64, n), make([]int32, n), make([]int64, n)
		keys, values, ats := make([]string, n), make([]float64, n), make([]int64, n)
		for i, p := range points {
			jobs[i], attempts[i], steps[i] = p.JobID, int32(p.Attempt), p.Step
			keys[i], values[i], ats[i] = p.Key, p.Value, p.At.UnixNano()
		}
		pj, pa, pt := make([]int64, len(order)), make([]int32, len(order)), make([]int64, len(order))
		for i, r := range order {
			pj[i], pa[i], pt[i] = r.job, int32(r.attempt), latest[r]
		}
		return s.b.Write(ctx, func(x Exec) error {
			if err := x.Queue("append metric points", qPointsInsert, jobs, attempts, steps, keys, values, ats); err != nil {
				return err
			}
			return x.Queue("record progress", qProgressEach, pj, pa, pt)
		})
	}
	return s.b.Write(ctx, func(x Exec) error {
		args := make([]any, 0, 6*min(len(points), pointsPerInsert))
		for rest := points; len(rest) > 0; {
			n := min(len(rest), pointsPerInsert)
			args = args[:0]
			for _, p := range rest[:n] {
				args = append(args, p.JobID, p.Attempt, p.Step, p.Key, p.Value, p.At.UnixNano())
			}
			q := qPointsInsertFull
			if n != pointsPerInsert {
				q = Each(insertPointsSQL(n), "")
			}
			if err := x.Queue("append metric points", q, args...); err != nil {
				return err
			}
			rest = rest[n:]
		}
		for _, r := range order {
			if err := x.Queue("record progress", qProgress, latest[r], r.job, r.attempt); err != nil {
				return err
			}
		}
		return nil
	})
}

// QueryMetrics returns a job's series, downsampled to about maxPoints each.
func (s Shared) QueryMetrics(ctx context.Context, jobID int64, key string, maxPoints int) (map[string][]domain.MetricPoint, error) {
	r, err := s.b.Reader()
	if err != nil {
		return nil, err
	}
	q, args := qMetricsAll, []any{jobID}
	if key != "" {
		q, args = qMetricsKey, append(args, key)
	}
	out := map[string][]domain.MetricPoint{}
	if err := r.Query(ctx, func(row Row) error {
		p := domain.MetricPoint{JobID: jobID}
		var at int64
		if err := row.Scan(&p.Attempt, &p.Step, &p.Key, &p.Value, &at); err != nil {
			return err
		}
		p.At = time.Unix(0, at).UTC()
		out[p.Key] = append(out[p.Key], p)
		return nil
	}, q, args...); err != nil {
		return nil, s.err("query metrics", err)
	}
	if maxPoints > 0 {
		for k, series := range out {
			out[k] = downsample(series, maxPoints)
		}
	}
	return out, nil
}

// downsample reduces a series ordered by (step, time) to at most maxPoints
// points: it cuts the step range into maxPoints/3 equal buckets and keeps,
// per bucket, the last point and the points with the lowest and highest
// value, in their original order. A series of maxPoints or fewer is
// returned as is.
func downsample(series []domain.MetricPoint, maxPoints int) []domain.MetricPoint {
	if maxPoints <= 0 || len(series) <= maxPoints {
		return series
	}
	buckets := int64(max(maxPoints/3, 1))
	lo, hi := series[0].Step, series[len(series)-1].Step
	span := hi - lo + 1
	bucketOf := func(step int64) int64 {
		return int64(float64(step-lo) / float64(span) * float64(buckets))
	}
	out := make([]domain.MetricPoint, 0, maxPoints)
	for i := 0; i < len(series); {
		b := bucketOf(series[i].Step)
		j, minI, maxI := i, i, i
		for ; j < len(series) && bucketOf(series[j].Step) == b; j++ {
			if series[j].Value < series[minI].Value {
				minI = j
			}
			if series[j].Value > series[maxI].Value {
				maxI = j
			}
		}
		keep := []int{minI, maxI, j - 1}
		// Keep the original order and drop duplicates.
		for a := 0; a < len(keep); a++ {
			for c := a + 1; c < len(keep); c++ {
				if keep[c] < keep[a] {
					keep[a], keep[c] = keep[c], keep[a]
				}
			}
		}
		for n, k := range keep {
			if n == 0 || k != keep[n-1] {
				out = append(out, series[k])
			}
		}
		i = j
	}
	return out
}

// RecordProgress moves the attempt's last progress time forward.
func (s Shared) RecordProgress(ctx context.Context, jobID int64, attempt int, at time.Time) error {
	action := fmt.Sprintf("record progress of attempt %s", domain.AttemptRef(jobID, attempt))
	return s.b.Write(ctx, func(x Exec) error {
		n, err := x.Exec(qProgress, at.UnixNano(), jobID, attempt)
		if err != nil {
			return s.err(action, err)
		}
		if n == 0 {
			return fmt.Errorf("%s: no such attempt: %w", action, store.ErrNotFound)
		}
		return nil
	})
}

// MarkHealthFailed records why an active attempt is being stopped.
func (s Shared) MarkHealthFailed(ctx context.Context, jobID int64, attempt int, reason domain.Reason, message string) error {
	action := fmt.Sprintf("mark attempt %s %s", domain.AttemptRef(jobID, attempt), reason)
	return s.b.Write(ctx, func(x Exec) error {
		n, err := x.Exec(qHealthFail, string(reason), message, jobID, attempt, string(domain.AttemptStarting), string(domain.AttemptRunning))
		if err != nil {
			return s.err(action, err)
		}
		if n == 0 {
			return fmt.Errorf("%s: the attempt is missing or no longer active: %w", action, store.ErrConflict)
		}
		return nil
	})
}

func scanHealth(row Row) (store.AttemptHealth, error) {
	var (
		h                 store.AttemptHealth
		started, progress sql.NullInt64
		reason            string
	)
	if err := row.Scan(&h.JobID, &h.Attempt, &started, &progress, &reason, &h.HealthMessage); err != nil {
		return h, err
	}
	h.StartedAt, h.LastProgressAt, h.HealthFailed = TimeOf(started), TimeOf(progress), domain.Reason(reason)
	return h, nil
}

// AttemptHealth returns one attempt's health state, or ErrNotFound.
func (s Shared) AttemptHealth(ctx context.Context, jobID int64, attempt int) (store.AttemptHealth, error) {
	r, err := s.b.Reader()
	if err != nil {
		return store.AttemptHealth{}, err
	}
	h, err := scanHealth(r.QueryRow(ctx, qHealthGet, jobID, attempt))
	if err != nil {
		return store.AttemptHealth{}, s.err(fmt.Sprintf("read health of attempt %s", domain.AttemptRef(jobID, attempt)), err)
	}
	return h, nil
}

// ActiveHealth returns the health state of every active attempt.
func (s Shared) ActiveHealth(ctx context.Context) ([]store.AttemptHealth, error) {
	return queryAll(ctx, s, "list attempt health", scanHealth, qHealthActive, string(domain.AttemptStarting), string(domain.AttemptRunning))
}
