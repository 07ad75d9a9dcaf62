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
	// MarkCheckpointDeleted records that a checkpoint was removed from
	// every tier.
	MarkCheckpointDeleted(ctx context.Context, jobID int64, name string, at time.Time, audit *domain.AuditRecord) error
	// ListCheckpointsAt returns the kept checkpoints (every job's)
	// registered complete at or after from and before to (At), oldest
	// first: what the lifecycle pass looks at when time moves on.
	ListCheckpointsAt(ctx context.Context, from, to time.Time) ([]domain.CheckpointRecord, error)
	// ListCheckpointsHeld returns every job's checkpoints that were kept
	// at or after since: the kept ones and those deleted since, by job,
	// then time. Storage accrual reads them.
	ListCheckpointsHeld(ctx context.Context, since time.Time) ([]domain.CheckpointRecord, error)
	// MarkCheckpointCopied records that the object store holds a verified
	// copy of the kept checkpoint's version sha256 since at (Object); an
	// Object already set is kept. A name the job does not have, or whose
	// digest is another (a newer version), is ErrNotFound.
	MarkCheckpointCopied(ctx context.Context, jobID int64, name, sha256 string, at time.Time) error
	// MarkCheckpointMoved records that the checkpoint's local copy was
	// removed at at, its object copy kept (LocalGone). One without an
	// object copy, or not kept, is ErrNotFound.
	MarkCheckpointMoved(ctx context.Context, jobID int64, name string, at time.Time, audit *domain.AuditRecord) error
	// MarkCheckpointRestored records that the checkpoint's local copy is
	// back (restored from the object store): LocalGone is cleared.
	MarkCheckpointRestored(ctx context.Context, jobID int64, name string) error
	// ManifestSizes returns the bytes each recorded manifest lists, by
	// job and attempt, for storage accrual.
	ManifestSizes(ctx context.Context) ([]ManifestSize, error)
	// RecordStorageDays stores accrued days; a (day, job, tier) already
	// stored is kept as it is, so accruing a day again changes nothing.
	RecordStorageDays(ctx context.Context, days []domain.StorageDay) error
	// ListStorageDays returns the accrued days at or after from and
	// before to, by day, job and tier.
	ListStorageDays(ctx context.Context, from, to time.Time) ([]domain.StorageDay, error)
	// LatestStorageDay is the last day accrued; zero: none.
	LatestStorageDay(ctx context.Context) (time.Time, error)
}

// ManifestSize is what one attempt's manifest lists: the job's outputs
// (checkpoints aside) from At until the next manifest.
type ManifestSize struct {
	JobID   int64
	Attempt int
	At      time.Time
	Bytes   int64
}

// RecordResume records which checkpoint attempt of job jobID resumed
// from, as its executor or its in-job agent tells (name; empty: none,
// with note saying why each candidate was skipped), and returns the words
// the attempt's start message gets: "; resuming from checkpoint NAME"
// (with "(skipped NOTE)"), "; no intact checkpoint to resume from (NOTE)",
// or "" when there is neither. The words come back even when recording
// fails (err: of MarkCheckpointResumed; ErrNotFound for a name the job
// does not have).
func RecordResume(ctx context.Context, a interface {
	MarkCheckpointResumed(ctx context.Context, jobID int64, name string, attempt int) error
}, jobID int64, attempt int, name, note string) (words string, err error) {
	if name == "" {
		if note != "" {
			return "; no intact checkpoint to resume from (" + note + ")", nil
		}
		return "", nil
	}
	err = a.MarkCheckpointResumed(ctx, jobID, name, attempt)
	words = "; resuming from checkpoint " + name
	if note != "" {
		words += " (skipped " + note + ")"
	}
	return words, err
}
