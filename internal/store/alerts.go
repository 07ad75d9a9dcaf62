package store

import (
	"context"
	"time"

	"trainyard/internal/domain"
)

// Alerts stores alerts and their notifications as an outbox: a transition
// and the notifications it owes commit together, and a sender marks each
// delivery, so a restart neither loses nor repeats one.
type Alerts interface {
	// RecordAlerts applies transitions in order. A firing alert is stored
	// unless one with the same key already fires (then it is skipped); a
	// resolved alert resolves the firing alert with its key (none: skipped).
	// Each stored transition queues one notification per channel in its
	// Notify list. It returns the alerts as stored, with ids, skipping the
	// ones that changed nothing.
	RecordAlerts(ctx context.Context, transitions []AlertTransition) ([]domain.Alert, error)
	// ListAlerts returns alerts, newest first.
	ListAlerts(ctx context.Context, f AlertFilter) ([]domain.Alert, error)
	// PendingNotifications returns up to limit notifications neither sent
	// nor given up, oldest first, each with its alert.
	PendingNotifications(ctx context.Context, limit int) ([]domain.AlertNotification, error)
	// MarkNotification records one delivery try of the alert's status to
	// channel: sent (SentAt set), failed (Tries and LastError updated), or
	// given up. A notification that was never queued is ErrNotFound.
	MarkNotification(ctx context.Context, alertID int64, channel string, status domain.AlertState, r NotificationResult) error
	// GetAlert returns one alert (ErrNotFound: none with that id).
	GetAlert(ctx context.Context, id int64) (domain.Alert, error)
	// AckAlert records that by acknowledged the firing alert id at at,
	// and gives up its undelivered firing notifications: an acknowledged
	// alert is not notified again. It returns the alert as stored;
	// ErrNotFound when there is no such alert, ErrConflict when it is
	// resolved or already acknowledged.
	AckAlert(ctx context.Context, id int64, by, reason string, at time.Time, audit domain.AuditRecord) (domain.Alert, error)
}

// AlertTransition is one alert firing or resolving, and the channels to
// notify of it.
type AlertTransition struct {
	Alert  domain.Alert
	Notify []string
}

// AlertFilter selects alerts for ListAlerts.
type AlertFilter struct {
	State domain.AlertState // "": any
	JobID int64             // 0: any
	Limit int               // 0: 100
}

// NotificationResult is the outcome of one delivery try.
type NotificationResult struct {
	At     time.Time
	Sent   bool
	Error  string // when not sent
	GiveUp bool   // no further tries
}
