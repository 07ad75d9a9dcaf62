package store

import (
	"context"

	"trainyard/internal/domain"
)

// Notifications stores users' default notifications and the outbox of
// job-end notifications. The outbox has two stages, so that a crash or a
// repeated transition neither loses nor repeats a notification:
//
//   - Apply records a job end (domain.JobEnd) in the same transaction as
//     a job's move to succeeded, failed or canceled, at most one per job.
//   - The notifier works out whom each job end tells (the job's notify
//     section, else its submitter's default) and calls ResolveJobEnds
//     (ResolveJobEnd for one), which queues one notification per target,
//     at most one per job and target, and removes each job end, in one
//     transaction.
//
// The notifier then delivers each queued notification and marks it.
type Notifications interface {
	// PutNotifyPref creates or replaces a user's default notification.
	PutNotifyPref(ctx context.Context, p domain.NotifyPref, audit domain.AuditRecord) error
	// GetNotifyPref returns a user's default, or ErrNotFound.
	GetNotifyPref(ctx context.Context, user string) (domain.NotifyPref, error)
	// DeleteNotifyPref removes a user's default; ErrNotFound when there
	// is none.
	DeleteNotifyPref(ctx context.Context, user string, audit domain.AuditRecord) error
	// PendingJobEnds returns up to limit job ends not yet resolved,
	// oldest first, each with what the notifier needs of its job.
	PendingJobEnds(ctx context.Context, limit int) ([]domain.JobEnd, error)
	// ResolveJobEnd queues notes (one per target; a note whose job and
	// target are already queued is skipped) and removes the job's end, in
	// one transaction. Resolving a job end already resolved queues
	// nothing new.
	ResolveJobEnd(ctx context.Context, jobID int64, notes []domain.JobNotification) error
	// ResolveJobEnds resolves several job ends as ResolveJobEnd does, in
	// one transaction, and returns each one's error in order: ErrInvalid
	// for one whose notes are refused (its end stays pending, the others
	// are resolved). The error is for the whole: nothing was written.
	ResolveJobEnds(ctx context.Context, rs []domain.JobEndResolution) ([]error, error)
	// PendingJobNotifications returns up to limit notifications neither
	// sent nor given up, oldest first.
	PendingJobNotifications(ctx context.Context, limit int) ([]domain.JobNotification, error)
	// MarkJobNotification records one delivery try: sent, failed, or
	// given up (NotificationResult). ErrNotFound: no such notification.
	MarkJobNotification(ctx context.Context, id int64, r NotificationResult) error
	// JobNotifications returns the notifications of one job, by id.
	JobNotifications(ctx context.Context, jobID int64) ([]domain.JobNotification, error)
}
