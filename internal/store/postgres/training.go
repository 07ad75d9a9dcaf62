package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

const (
	// insertPointsSQL inserts any number of points in one statement, from
	// one array per column, skipping duplicates.
	insertPointsSQL = `INSERT INTO metric_points (job_id, attempt, step, key, value, at)
		SELECT * FROM unnest($1::bigint[], $2::int[], $3::bigint[], $4::text[], $5::float8[], $6::bigint[])
		ON CONFLICT DO NOTHING`
	// progressSQL moves each listed attempt's last progress to its time
	// unless a later one is stored.
	progressSQL = `UPDATE attempts a SET last_progress_at = GREATEST(COALESCE(a.last_progress_at, 0), v.at)
		FROM unnest($1::bigint[], $2::int[], $3::bigint[]) AS v(job_id, number, at)
		WHERE a.job_id = v.job_id AND a.number = v.number`
)

// AppendPoints stores points through the writer, so concurrent calls share
// one transaction; all rows go in one statement.
func (s *Store) AppendPoints(ctx context.Context, points []domain.MetricPoint) error {
	if len(points) == 0 {
		return nil
	}
	for _, p := range points {
		if p.Key == "" || p.JobID <= 0 || p.Attempt <= 0 {
			return fmt.Errorf("append metric points: a point needs a job, an attempt and a key (got job %d attempt %d key %q): %w",
				p.JobID, p.Attempt, p.Key, store.ErrInvalid)
		}
	}
	n := len(points)
	jobs, attempts, steps := make([]int64, n), make([]int32, n), make([]int64, n)
	keys, values, ats := make([]string, n), make([]float64, n), make([]int64, n)
	type ref struct {
		job     int64
		attempt int
	}
	latest := map[ref]int64{}
	var order []ref
	for i, p := range points {
		jobs[i], attempts[i], steps[i] = p.JobID, int32(p.Attempt), p.Step
		keys[i], values[i], ats[i] = p.Key, p.Value, p.At.UnixNano()
		r := ref{p.JobID, p.Attempt}
		prev, seen := latest[r]
		if !seen {
			order = append(order, r)
			prev = ats[i]
		}
		latest[r] = max(prev, ats[i])
	}
	pj, pa, pt := make([]int64, len(order)), make([]int32, len(order)), make([]int64, len(order))
	for i, r := range order {
		pj[i], pa[i], pt[i] = r.job, int32(r.attempt), latest[r]
	}
	return s.write(ctx, func(w *writer) error {
		w.queue("append metric points", insertPointsSQL, jobs, attempts, steps, keys, values, ats)
		// Reported points are progress: move each attempt's last progress.
		w.queue("record progress", progressSQL, pj, pa, pt)
		return nil
	})
}

// QueryMetrics returns a job's series, downsampled to about maxPoints each.
func (s *Store) QueryMetrics(ctx context.Context, jobID int64, key string, maxPoints int) (map[string][]domain.MetricPoint, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT attempt, step, key, value, at FROM metric_points
		WHERE job_id = $1 AND ($2 = '' OR key = $2) ORDER BY key, step, at`, jobID, key)
	if err != nil {
		return nil, interpretError("query metrics", err)
	}
	defer rows.Close()
	out := map[string][]domain.MetricPoint{}
	for rows.Next() {
		p := domain.MetricPoint{JobID: jobID}
		var (
			attempt int32
			at      int64
		)
		if err := rows.Scan(&attempt, &p.Step, &p.Key, &p.Value, &at); err != nil {
			return nil, interpretError("query metrics", err)
		}
		p.Attempt, p.At = int(attempt), unixNano(at)
		out[p.Key] = append(out[p.Key], p)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("query metrics", err)
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
// value, in their original order (the SQLite backend's rule). A series of
// maxPoints or fewer is returned as is.
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
func (s *Store) RecordProgress(ctx context.Context, jobID int64, attempt int, at time.Time) error {
	action := fmt.Sprintf("record progress of attempt %s", domain.AttemptRef(jobID, attempt))
	return s.write(ctx, func(w *writer) error {
		tag, err := w.exec(`UPDATE attempts SET last_progress_at = GREATEST(COALESCE(last_progress_at, 0), $1)
			WHERE job_id = $2 AND number = $3`, at.UnixNano(), jobID, attempt)
		if err != nil {
			return interpretError(action, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%s: no such attempt: %w", action, store.ErrNotFound)
		}
		return nil
	})
}

// MarkHealthFailed records why an active attempt is being stopped.
func (s *Store) MarkHealthFailed(ctx context.Context, jobID int64, attempt int, reason domain.Reason, message string) error {
	action := fmt.Sprintf("mark attempt %s %s", domain.AttemptRef(jobID, attempt), reason)
	return s.write(ctx, func(w *writer) error {
		tag, err := w.exec(`UPDATE attempts SET health_failed = $1, health_message = $2
			WHERE job_id = $3 AND number = $4 AND state IN ($5, $6)`,
			string(reason), message, jobID, attempt, string(domain.AttemptStarting), string(domain.AttemptRunning))
		if err != nil {
			return interpretError(action, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%s: the attempt is missing or no longer active: %w", action, store.ErrConflict)
		}
		return nil
	})
}

const healthCols = `job_id, number, started_at, last_progress_at, health_failed, health_message`

func scanHealth(sc rowScanner) (store.AttemptHealth, error) {
	var (
		h                 store.AttemptHealth
		number            int32
		started, progress pgtype.Int8
		reason            string
	)
	if err := sc.Scan(&h.JobID, &number, &started, &progress, &reason, &h.HealthMessage); err != nil {
		return h, err
	}
	h.Attempt = int(number)
	h.StartedAt, h.LastProgressAt, h.HealthFailed = timeOf(started), timeOf(progress), domain.Reason(reason)
	return h, nil
}

// AttemptHealth returns one attempt's health state, or ErrNotFound.
func (s *Store) AttemptHealth(ctx context.Context, jobID int64, attempt int) (store.AttemptHealth, error) {
	action := fmt.Sprintf("read health of attempt %s", domain.AttemptRef(jobID, attempt))
	if err := s.checkOpen(); err != nil {
		return store.AttemptHealth{}, err
	}
	h, err := scanHealth(s.pool.QueryRow(ctx, `SELECT `+healthCols+` FROM attempts WHERE job_id = $1 AND number = $2`, jobID, attempt))
	if err != nil {
		return store.AttemptHealth{}, interpretError(action, err)
	}
	return h, nil
}

// ActiveHealth returns the health state of every active attempt.
func (s *Store) ActiveHealth(ctx context.Context) ([]store.AttemptHealth, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+healthCols+` FROM attempts WHERE state IN ($1, $2) ORDER BY job_id, number`,
		string(domain.AttemptStarting), string(domain.AttemptRunning))
	if err != nil {
		return nil, interpretError("list attempt health", err)
	}
	defer rows.Close()
	var out []store.AttemptHealth
	for rows.Next() {
		h, err := scanHealth(rows)
		if err != nil {
			return nil, interpretError("list attempt health", err)
		}
		out = append(out, h)
	}
	return out, interpretError("list attempt health", rows.Err())
}
