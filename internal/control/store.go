package control

import (
	"context"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// Store is what the control loop reads and writes: the live jobs and their
// attempts, the pools and quotas it schedules against, attempts' health and
// progress, checkpoints and manifests. It is declared here, where it is
// used, so that the loop's reach into the store is visible and a test
// double implements only this; cmd/trainyard hands it the whole store.
type Store interface {
	ActiveAttempts(ctx context.Context) ([]domain.Attempt, error)
	ActiveGrants(ctx context.Context, now time.Time) ([]domain.QuotaRequest, error)
	ActiveHealth(ctx context.Context) ([]store.AttemptHealth, error)
	AppendPoints(ctx context.Context, points []domain.MetricPoint) error
	Apply(ctx context.Context, changes []store.Change) ([]error, error)
	AttemptHealth(ctx context.Context, jobID int64, attempt int) (store.AttemptHealth, error)
	AttemptSpans(ctx context.Context, since time.Time) ([]store.AttemptSpan, error)
	RunningSpans(ctx context.Context) ([]store.AttemptSpan, error)
	SpendTotals(ctx context.Context, q store.SpendQuery) ([]store.SpendRow, error)
	ChangedJobsWith(ctx context.Context, since store.JobCursor) (store.JobChanges, error)
	GetEnv(ctx context.Context, name string, version int) (domain.Environment, error)
	GetJob(ctx context.Context, id int64) (domain.Job, error)
	GetPool(ctx context.Context, name string) (domain.Pool, error)
	ListAttempts(ctx context.Context, jobID int64) ([]domain.Attempt, error)
	ListBudgets(ctx context.Context) ([]domain.Budget, error)
	ListCheckpoints(ctx context.Context, jobID int64, withDeleted bool) ([]domain.CheckpointRecord, error)
	ListJobs(ctx context.Context, f store.JobFilter) ([]domain.Job, error)
	ListPools(ctx context.Context) ([]domain.Pool, error)
	ListProjects(ctx context.Context) ([]domain.Project, error)
	ListQuotas(ctx context.Context, project, pool string) ([]domain.Quota, error)
	ListRequests(ctx context.Context, project, pool string) ([]domain.QuotaRequest, error)
	LiveJobs(ctx context.Context) ([]domain.Job, store.JobCursor, error)
	LiveJobRevs(ctx context.Context) ([]store.JobRev, store.JobCursor, error)
	JobsByID(ctx context.Context, ids []int64) ([]domain.Job, error)
	MarkCheckpointCopied(ctx context.Context, jobID int64, name, sha256 string, at time.Time) error
	MarkCheckpointDeleted(ctx context.Context, jobID int64, name string, at time.Time, audit *domain.AuditRecord) error
	MarkCheckpointRestored(ctx context.Context, jobID int64, name string) error
	MarkCheckpointResumed(ctx context.Context, jobID int64, name string, attempt int) error
	MarkCheckpointSuspect(ctx context.Context, jobID int64, name, why string) error
	MarkHealthFailed(ctx context.Context, jobID int64, attempt int, reason domain.Reason, message string) error
	PreemptedAttempts(ctx context.Context, since time.Time) ([]domain.Attempt, error)
	RateHistory(ctx context.Context, pools ...string) ([]store.RateChange, error)
	RecordCheckpoint(ctx context.Context, c domain.CheckpointRecord) (bool, error)
	RecordManifest(ctx context.Context, m domain.Manifest) error
	RecordProgress(ctx context.Context, jobID int64, attempt int, at time.Time) error
	QueryMetrics(ctx context.Context, jobID int64, key string, maxPoints int) (map[string][]domain.MetricPoint, error)
	SettingsRev(ctx context.Context) (int64, error)
	// Sweeps and dependencies: workflow.go.
	store.Workflows
}

var _ Store = store.Store(nil)
