package alerting

import (
	"context"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// Store is what the alerting loop reads and writes: alerts, their
// notification outbox, and the jobs they are about. It is declared here,
// where it is used; cmd/trainyard hands it the whole store.
type Store interface {
	GetAlert(ctx context.Context, id int64) (domain.Alert, error)
	GetJob(ctx context.Context, id int64) (domain.Job, error)
	ListAlerts(ctx context.Context, f store.AlertFilter) ([]domain.Alert, error)
	MarkNotification(ctx context.Context, alertID int64, channel string, status domain.AlertState, r store.NotificationResult) error
	PendingNotifications(ctx context.Context, limit int) ([]domain.AlertNotification, error)
	RecordAlerts(ctx context.Context, transitions []store.AlertTransition) ([]domain.Alert, error)
}

var _ Store = store.Store(nil)
