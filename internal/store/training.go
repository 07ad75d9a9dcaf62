package store

import (
	"context"
	"time"

	"trainyard/internal/domain"
)

// Metrics stores training metrics and the health state of attempts.
type Metrics interface {
	// AppendPoints stores points as given (the caller checks the job and
	// attempt); a point equal in job, attempt, key, step and time to a
	// stored one is skipped. Each attempt's last progress time moves to its
	// latest point (as RecordProgress). Calls made at the same time share
	// one transaction.
	AppendPoints(ctx context.Context, points []domain.MetricPoint) error
	// QueryMetrics returns a job's series by key (every key when key is
	// ""), ordered by step then time. When a series holds more than
	// maxPoints points (maxPoints > 0), it is downsampled: steps are cut
	// into buckets and each bucket keeps its last, lowest and highest
	// point, so a series returns at most about maxPoints points.
	QueryMetrics(ctx context.Context, jobID int64, key string, maxPoints int) (map[string][]domain.MetricPoint, error)
	// RecordProgress sets the attempt's last progress time to at unless a
	// later one is stored. A missing attempt is ErrNotFound.
	RecordProgress(ctx context.Context, jobID int64, attempt int, at time.Time) error
	// MarkHealthFailed remembers why the control loop stops an active
	// attempt (HealthCheckFailed or Stalled), so that its end maps to that
	// reason even after a restart. An attempt no longer active is
	// ErrConflict.
	MarkHealthFailed(ctx context.Context, jobID int64, attempt int, reason domain.Reason, message string) error
	// AttemptHealth returns the health state of one attempt.
	AttemptHealth(ctx context.Context, jobID int64, attempt int) (AttemptHealth, error)
	// ActiveHealth returns the health state of every starting or running
	// attempt, in (job, attempt) order.
	ActiveHealth(ctx context.Context) ([]AttemptHealth, error)
}

// AttemptHealth is what the health checks need of one attempt.
type AttemptHealth struct {
	JobID          int64
	Attempt        int
	StartedAt      time.Time // zero until running
	LastProgressAt time.Time // zero: no progress reported yet
	// HealthFailed and HealthMessage are set by MarkHealthFailed.
	HealthFailed  domain.Reason
	HealthMessage string
}
