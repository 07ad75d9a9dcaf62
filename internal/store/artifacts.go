package store

import (
	"context"
	"time"

	"trainyard/internal/domain"
)

// Artifacts records manifests of jobs' outputs and their checkpoints.
type Artifacts interface {
	// RecordManifest stores the manifest of one attempt; recording the same
	// attempt again replaces it (the attempt's end is handled again after a
	// restart).
	RecordManifest(ctx context.Context, m domain.Manifest) error
	// GetManifest returns the manifest of one attempt, or of the job's
	// latest recorded attempt when attempt is 0. None is ErrNotFound.
	GetManifest(ctx context.Context, jobID int64, attempt int) (domain.Manifest, error)
	// RecordCheckpoint registers a complete checkpoint; registering a name
	// the job already has changes nothing and reports false.
	RecordCheckpoint(ctx context.Context, c domain.CheckpointRecord) (bool, error)
	// ListCheckpoints returns a job's checkpoints (every job's when jobID is
	// 0), oldest first; deleted ones only when withDeleted.
	ListCheckpoints(ctx context.Context, jobID int64, withDeleted bool) ([]domain.CheckpointRecord, error)
	// MarkCheckpointDeleted records that a checkpoint was removed.
	MarkCheckpointDeleted(ctx context.Context, jobID int64, name string, at time.Time) error
}
