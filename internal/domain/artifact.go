package domain

import (
	"strings"
	"time"
)

// ArtifactFile is one file of a job's outputs, as recorded in a manifest.
type ArtifactFile struct {
	Path   string // relative to the output directory, with forward slashes
	Size   int64
	SHA256 string // hex
}

// Manifest lists what a job's output directory held when an attempt ended,
// with the lineage that produced it. Checkpoints are listed separately.
type Manifest struct {
	JobID   int64
	Attempt int
	At      time.Time
	Files   []ArtifactFile // by path
	Lineage Lineage
}

// Lineage is what produced a job's outputs.
type Lineage struct {
	JobID      int64     `json:"job"`
	Attempt    int       `json:"attempt"`
	Name       string    `json:"name"`
	Project    string    `json:"project"`
	Submitter  string    `json:"submitter"`
	SpecHash   string    `json:"spec_hash"`
	Inputs     []Input   `json:"inputs,omitempty"`
	Env        string    `json:"env"`                  // name@version as resolved
	EnvDigest  string    `json:"env_digest,omitempty"` // the environment definition's digest
	Code       string    `json:"code,omitempty"`       // code package sha256
	GitCommit  string    `json:"git_commit,omitempty"`
	GitDirty   bool      `json:"git_dirty,omitempty"`
	RerunOf    int64     `json:"rerun_of,omitempty"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	State      string    `json:"state"` // the attempt's final state

	// ResumedFrom is the other job's checkpoint the job started from
	// (its spec's resume); nil: none.
	ResumedFrom *ResumeFrom `json:"resumed_from,omitempty"`
}

// Checkpoint completion. A checkpoint is an entry directly below the job's
// checkpoint directory (TRAINYARD_CHECKPOINT_DIR) that the job made
// complete; nothing else there is one (a config file, a log, a half-written
// save), so nothing else is registered, pruned or handed to a later
// attempt:
//
//   - a directory holding CheckpointMarker as a regular file, written after
//     the data (or by the API's complete call, the SDK's checkpoint_done);
//   - a Hugging Face Trainer directory "checkpoint-N" holding
//     HFTrainerState, which the Trainer writes after the weights;
//   - a regular file NAME beside a regular file NAME+CheckpointMarker
//     (the SDK's save_checkpoint writes the data to a temporary name,
//     fsyncs, renames it to NAME, then writes the marker);
//   - a regular file whose bytes are one whole zip archive: the format of
//     torch.save since PyTorch 1.6 (and so of Lightning's .ckpt files),
//     whose central directory is written last, so a save cut short is no
//     zip.
//
// Hidden names, names ending in .tmp and the NAME.complete markers are
// never checkpoints.
const CheckpointMarker = ".complete"

// IsCheckpointName reports whether name can be a checkpoint's: one entry
// directly below the checkpoint directory (no slash), not hidden, not
// ending in .tmp (being written) nor in CheckpointMarker (the marker of a
// file checkpoint).
func IsCheckpointName(name string) bool {
	return name != "" && !strings.HasPrefix(name, ".") && !strings.HasSuffix(name, ".tmp") &&
		!strings.HasSuffix(name, CheckpointMarker) && !strings.Contains(name, "/")
}

// HFTrainerState is the file a Hugging Face Trainer checkpoint directory
// (checkpoint-N) holds once it is saved.
const HFTrainerState = "trainer_state.json"

// CheckpointRecord is one registered, complete checkpoint of a job.
type CheckpointRecord struct {
	JobID   int64
	Attempt int    // the attempt that wrote it
	Name    string // its name in the checkpoint directory
	Path    string // absolute path on the server's machine
	Size    int64  // bytes, all files
	Files   int
	At      time.Time // when it was registered complete
	// SHA256 is the digest of its content when it was registered (hex;
	// see executor.Outputs.Digest); resuming from it checks it again. Empty
	// for checkpoints registered before digests were kept.
	SHA256 string
	// ResumedBy is the latest attempt that was handed it to resume from
	// (TRAINYARD_RESUME_FROM); 0: none.
	ResumedBy int
	// Suspect, when not empty, says why resuming skips it: an attempt
	// failed right after resuming from it ("attempt 3 failed right after
	// resuming from it: exit code 1"). A new version of it clears this.
	Suspect string
	// Deleted is when it was removed from every tier (keep, gc); zero
	// while it exists.
	Deleted time.Time
	// Object is when a copy in the object store was verified to hold
	// its digest; zero: the object tier holds none.
	Object time.Time
	// LocalGone is when its local copy was removed with the object copy
	// kept (moved by a lifecycle policy); zero while the local copy is
	// there.
	LocalGone time.Time
}

// Storage tiers of outputs and checkpoints: the local disk of the job's
// output tree, and the object store (object_store in the server config).
const (
	TierLocal  = "local"
	TierObject = "object"
)

// OnLocal reports whether the checkpoint's local copy is there.
func (c CheckpointRecord) OnLocal() bool { return c.LocalGone.IsZero() }

// OnObject reports whether the object store holds a verified copy.
func (c CheckpointRecord) OnObject() bool { return !c.Object.IsZero() }

// Tier names where the checkpoint is held: local, object or both.
func (c CheckpointRecord) Tier() string {
	switch {
	case c.OnLocal() && c.OnObject():
		return "both"
	case c.OnObject():
		return TierObject
	}
	return TierLocal
}
