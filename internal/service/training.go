package service

import (
	"context"
	"math"
	"strconv"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/logs"
)

// MaxReportPoints bounds the points of one metric report.
const MaxReportPoints = 10000

// MetricsInput is one reported step: its metrics by name.
type MetricsInput struct {
	Step    int64
	Metrics map[string]float64
}

// DefaultMetricPoints is how many points per series Metrics returns when
// the caller names no maximum; MaxMetricPoints is the most it returns.
const (
	DefaultMetricPoints = 500
	MaxMetricPoints     = 100000
)

// ReportMetrics stores training metrics of one attempt, reported through
// the API. Only that attempt's job token (or an admin) may report; the
// report also counts as the attempt's progress for its health checks.
// Metric reports are telemetry: they are not written to the audit log
// (a refused report is). It returns how many values were stored.
func (s *JobService) ReportMetrics(ctx context.Context, p Principal, jobID int64, attempt int, in []MetricsInput) (int, error) {
	job, err := s.st.GetJob(ctx, jobID)
	if err != nil {
		return 0, jobErr(jobID, err)
	}
	r := authz.Resource{Kind: "attempt", ID: domain.AttemptRef(jobID, attempt), Project: job.Project, Owner: job.Submitter}
	if err := s.authorize(ctx, p, authz.AttemptReport, r); err != nil {
		return 0, err
	}
	if attempt < 1 || attempt > job.Attempts {
		return 0, domain.Errorf(domain.ErrNotFound, "job %d has no attempt %d (it has %d); see: trainyard show %d", jobID, attempt, job.Attempts, jobID)
	}
	var errs domain.FieldErrors
	if len(in) == 0 {
		errs.Add("points", "is empty; send at least one {\"step\": N, \"metrics\": {\"loss\": 0.5}}")
	}
	if len(in) > MaxReportPoints {
		errs.Add("points", "holds %d points; send at most %d per request", len(in), MaxReportPoints)
	}
	now := s.cfg.Clock.Now().UTC()
	points := make([]domain.MetricPoint, 0, len(in))
	for i, pt := range in {
		path := "points[" + strconv.Itoa(i) + "]"
		if pt.Step < 0 {
			errs.Add(path+".step", "must be 0 or more, got %d", pt.Step)
		}
		if len(pt.Metrics) == 0 {
			errs.Add(path+".metrics", "is empty; give at least one metric, e.g. {\"loss\": 0.5}")
		}
		// A whole-number "rank" names the reporting process, as in
		// progress lines (logs.RankKey): rank N > 0 files its metrics
		// under "<key>/rankN".
		suffix, ranked := "", false
		if r, ok := pt.Metrics[logs.RankKey]; ok {
			suffix, ranked = logs.RankSuffix(r)
		}
		for k, v := range pt.Metrics {
			if ranked && k == logs.RankKey {
				continue
			}
			if k == "" || len(k) > 128 {
				errs.Add(path+".metrics", "has a metric name of %d characters; names are 1 to 128 characters", len(k))
				continue
			}
			if msg := domain.TextProblem(k, false); msg != "" {
				errs.Add(path+".metrics", "has a metric name that %s", msg)
				continue
			}
			if math.IsNaN(v) || math.IsInf(v, 0) {
				errs.Add(path+".metrics."+k, "must be a finite number")
				continue
			}
			points = append(points, domain.MetricPoint{JobID: jobID, Attempt: attempt, Step: pt.Step, Key: k + suffix, Value: v, At: now})
		}
		if len(errs) > 20 {
			break
		}
	}
	if err := errs.Err(); err != nil {
		return 0, err
	}
	// Storing the points also records the attempt's progress.
	if err := s.st.AppendPoints(ctx, points); err != nil {
		return 0, err
	}
	return len(points), nil
}

// Metrics returns a job's metric series (one key, or every key when key is
// ""), each downsampled to at most about maxPoints points (0: the default).
func (s *JobService) Metrics(ctx context.Context, p Principal, jobID int64, key string, maxPoints int) (map[string][]domain.MetricPoint, error) {
	job, err := s.st.GetJob(ctx, jobID)
	if err != nil {
		return nil, jobErr(jobID, err)
	}
	if err := s.authorize(ctx, p, authz.JobRead, jobResource(job)); err != nil {
		return nil, err
	}
	switch {
	case maxPoints == 0:
		maxPoints = DefaultMetricPoints
	case maxPoints < 3 || maxPoints > MaxMetricPoints:
		return nil, domain.FieldErrors{{Path: "max", Message: "must be between 3 and " + strconv.Itoa(MaxMetricPoints) + ", got " + strconv.Itoa(maxPoints)}}
	}
	return s.st.QueryMetrics(ctx, jobID, key, maxPoints)
}
