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
	// RecordCheckpoint registers a complete checkpoint and reports
	// whether it is new. Registering a name the job already has with the
	// same SHA256 changes nothing and reports false; with another SHA256
	// (a file saved again under the same name), or one that was deleted,
	// it is a new version: every field is replaced, ResumedBy, Suspect and
	// Deleted are cleared, and it reports true.
	RecordCheckpoint(ctx context.Context, c domain.CheckpointRecord) (bool, error)
	// MarkCheckpointResumed records that attempt was handed the job's
	// checkpoint name to resume from (ResumedBy). A name the job does not
	// have (or has deleted) is ErrNotFound.
	MarkCheckpointResumed(ctx context.Context, jobID int64, name string, attempt int) error
	// MarkCheckpointSuspect records why resuming skips the checkpoint from
	// now on (Suspect; not empty). A name the job does not have is
	// ErrNotFound.
	MarkCheckpointSuspect(ctx context.Context, jobID int64, name, why string) error
	// ListCheckpoints returns a job's checkpoints (every job's when jobID is
	// 0), oldest first; deleted ones only when withDeleted.
	ListCheckpoints(ctx context.Context, jobID int64, withDeleted bool) ([]domain.CheckpointRecord, error)
	// MarkCheckpointDeleted records that a checkpoint was removed.
	MarkCheckpointDeleted(ctx context.Context, jobID int64, name string, at time.Time, audit *domain.AuditRecord) error
}
