package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

var _ store.Metrics = (*Store)(nil)

// pointsPerInsert is how many rows one INSERT statement carries (6
// parameters each, well under SQLite's parameter limit).
const pointsPerInsert = 128

// insertPointsSQL returns the INSERT statement for n rows.
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

var insertPointsFull = insertPointsSQL(pointsPerInsert)

// AppendPoints stores points through the writer, so concurrent calls share
// one transaction; rows go in multi-row INSERTs.
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
	return s.write(ctx, func(w *writer) error {
		args := make([]any, 0, 6*min(len(points), pointsPerInsert))
		for rest := points; len(rest) > 0; {
			n := min(len(rest), pointsPerInsert)
			args = args[:0]
			for _, p := range rest[:n] {
				args = append(args, p.JobID, p.Attempt, p.Step, p.Key, p.Value, p.At.UnixNano())
			}
			q := insertPointsFull
			if n != pointsPerInsert {
				q = insertPointsSQL(n)
			}
			if _, err := w.exec(q, args...); err != nil {
				return interpretError("append metric points", err)
			}
			rest = rest[n:]
		}
		// Reported points are progress: move each attempt's last progress.
		type ref struct {
			job     int64
			attempt int
		}
		latest := map[ref]int64{}
		for _, p := range points {
			r := ref{p.JobID, p.Attempt}
			latest[r] = max(latest[r], p.At.UnixNano())
		}
		for r, at := range latest {
			if _, err := w.exec(`UPDATE attempts SET last_progress_at = MAX(COALESCE(last_progress_at, 0), ?) WHERE job_id = ? AND number = ?`,
				at, r.job, r.attempt); err != nil {
				return interpretError("record progress", err)
			}
		}
		return nil
	})
}

// QueryMetrics returns a job's series, downsampled to about maxPoints each.
func (s *Store) QueryMetrics(ctx context.Context, jobID int64, key string, maxPoints int) (map[string][]domain.MetricPoint, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	q := `SELECT attempt, step, key, value, at FROM metric_points WHERE job_id = ? ORDER BY key, step, at`
	args := []any{jobID}
	if key != "" {
		q = `SELECT attempt, step, key, value, at FROM metric_points WHERE job_id = ? AND key = ? ORDER BY step, at`
		args = append(args, key)
	}
	st, err := s.readStmt(ctx, q)
	if err != nil {
		return nil, interpretError("query metrics", err)
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, interpretError("query metrics", err)
	}
	defer rows.Close()
	out := map[string][]domain.MetricPoint{}
	for rows.Next() {
		p := domain.MetricPoint{JobID: jobID}
		var at int64
		if err := rows.Scan(&p.Attempt, &p.Step, &p.Key, &p.Value, &at); err != nil {
			return nil, interpretError("query metrics", err)
		}
		p.At = time.Unix(0, at).UTC()
		out[p.Key] = append(out[p.Key], p)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("query metrics", err)
	}
	if maxPoints > 0 {
		for k, series := range out {
			out[k] = Downsample(series, maxPoints)
		}
	}
	return out, nil
}

// Downsample reduces a series ordered by (step, time) to at most maxPoints
// points: it cuts the step range into maxPoints/3 equal buckets and keeps,
// per bucket, the last point and the points with the lowest and highest
// value, in their original order. A series of maxPoints or fewer is
// returned as is.
func Downsample(series []domain.MetricPoint, maxPoints int) []domain.MetricPoint {
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
		last := j - 1
		keep := []int{minI, maxI, last}
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
		res, err := w.exec(`UPDATE attempts SET last_progress_at = MAX(COALESCE(last_progress_at, 0), ?) WHERE job_id = ? AND number = ?`,
			at.UnixNano(), jobID, attempt)
		if err != nil {
			return interpretError(action, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%s: no such attempt: %w", action, store.ErrNotFound)
		}
		return nil
	})
}

// MarkHealthFailed records why an active attempt is being stopped.
func (s *Store) MarkHealthFailed(ctx context.Context, jobID int64, attempt int, reason domain.Reason, message string) error {
	action := fmt.Sprintf("mark attempt %s %s", domain.AttemptRef(jobID, attempt), reason)
	return s.write(ctx, func(w *writer) error {
		res, err := w.exec(`UPDATE attempts SET health_failed = ?, health_message = ?
			WHERE job_id = ? AND number = ? AND state IN (?, ?)`,
			string(reason), message, jobID, attempt, string(domain.AttemptStarting), string(domain.AttemptRunning))
		if err != nil {
			return interpretError(action, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%s: the attempt is missing or no longer active: %w", action, store.ErrConflict)
		}
		return nil
	})
}

const healthCols = `job_id, number, started_at, last_progress_at, health_failed, health_message`

func scanHealth(sc rowScanner) (store.AttemptHealth, error) {
	var h store.AttemptHealth
	var started, progress sql.NullInt64
	var reason string
	if err := sc.Scan(&h.JobID, &h.Attempt, &started, &progress, &reason, &h.HealthMessage); err != nil {
		return h, err
	}
	h.StartedAt, h.LastProgressAt, h.HealthFailed = timeOf(started), timeOf(progress), domain.Reason(reason)
	return h, nil
}

// AttemptHealth returns one attempt's health state, or ErrNotFound.
func (s *Store) AttemptHealth(ctx context.Context, jobID int64, attempt int) (store.AttemptHealth, error) {
	action := fmt.Sprintf("read health of attempt %s", domain.AttemptRef(jobID, attempt))
	if err := s.checkOpen(); err != nil {
		return store.AttemptHealth{}, err
	}
	st, err := s.readStmt(ctx, `SELECT `+healthCols+` FROM attempts WHERE job_id = ? AND number = ?`)
	if err != nil {
		return store.AttemptHealth{}, interpretError(action, err)
	}
	h, err := scanHealth(st.QueryRowContext(ctx, jobID, attempt))
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
	st, err := s.readStmt(ctx, `SELECT `+healthCols+` FROM attempts WHERE state IN (?, ?) ORDER BY job_id, number`)
	if err != nil {
		return nil, interpretError("list attempt health", err)
	}
	rows, err := st.QueryContext(ctx, string(domain.AttemptStarting), string(domain.AttemptRunning))
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
