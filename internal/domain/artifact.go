package domain

import "time"

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
}

// Checkpoint files: a checkpoint is a directory under the job's checkpoint
// directory made complete by this marker file (or by an API call), or a
// single regular file (written whole, then renamed into place).
const CheckpointMarker = ".complete"

// CheckpointRecord is one registered, complete checkpoint of a job.
type CheckpointRecord struct {
	JobID   int64
	Attempt int    // the attempt that wrote it
	Name    string // its name in the checkpoint directory
	Path    string // absolute path on the server's machine
	Size    int64  // bytes, all files
	Files   int
	At      time.Time // when it was registered complete
	// Deleted is when it was removed (keep, gc); zero while it exists.
	Deleted time.Time
}
