package alerting

import (
	"context"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// Store is what the alerting loop reads and writes: alerts, their
// notification outbox, the jobs they are about, and the budgets, attempt
// spans and pool rates that price a project's spend. It is declared here,
// where it is used; cmd/trainyard hands it the whole store.
type Store interface {
	GetAlert(ctx context.Context, id int64) (domain.Alert, error)
	GetJob(ctx context.Context, id int64) (domain.Job, error)
	ListAlerts(ctx context.Context, f store.AlertFilter) ([]domain.Alert, error)
	MarkNotification(ctx context.Context, alertID int64, channel string, status domain.AlertState, r store.NotificationResult) error
	PendingNotifications(ctx context.Context, limit int) ([]domain.AlertNotification, error)
	RecordAlerts(ctx context.Context, transitions []store.AlertTransition) ([]domain.Alert, error)
	ListBudgets(ctx context.Context) ([]domain.Budget, error)
	AttemptSpans(ctx context.Context, since time.Time) ([]store.AttemptSpan, error)
	RunningSpans(ctx context.Context) ([]store.AttemptSpan, error)
	SpendTotals(ctx context.Context, q store.SpendQuery) ([]store.SpendRow, error)
	ListPools(ctx context.Context) ([]domain.Pool, error)
	ActiveHealth(ctx context.Context) ([]store.AttemptHealth, error)
	RecentRuns(ctx context.Context, submitter, name string, limit int) ([]time.Duration, error)
	RateHistory(ctx context.Context, pools ...string) ([]store.RateChange, error)
}

var _ Store = store.Store(nil)
