package apitypes

import "time"

// ArtifactFile is one file of a job's outputs.
type ArtifactFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Lineage is what produced a job's outputs.
type Lineage struct {
	Job        int64     `json:"job"`
	Attempt    int       `json:"attempt"`
	Name       string    `json:"name"`
	Project    string    `json:"project"`
	Submitter  string    `json:"submitter"`
	SpecHash   string    `json:"spec_hash"`
	Inputs     []Input   `json:"inputs,omitempty"`
	Env        string    `json:"env"`
	EnvDigest  string    `json:"env_digest,omitempty"`
	Code       string    `json:"code,omitempty"`
	GitCommit  string    `json:"git_commit,omitempty"`
	GitDirty   bool      `json:"git_dirty,omitempty"`
	RerunOf    int64     `json:"rerun_of,omitempty"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	State      string    `json:"state"`

	// ResumedFrom is the other job's checkpoint the job started from
	// (rerun --resume); absent: none.
	ResumedFrom *ResumedFrom `json:"resumed_from,omitempty"`
}

// Input is a dataset a job read.
type Input struct {
	Name    string `json:"name"`
	Path    string `json:"path,omitempty"`
	Version string `json:"version,omitempty"`
	// FromJob is the job whose outputs the input is (inputs[].from_job).
	FromJob int64 `json:"from_job,omitempty"`
}

// Manifest is the answer of GET /api/v1/jobs/{id}/artifacts.
type Manifest struct {
	Job        int64          `json:"job"`
	Attempt    int            `json:"attempt"`
	RecordedAt time.Time      `json:"recorded_at"`
	Files      []ArtifactFile `json:"files"`
	TotalBytes int64          `json:"total_bytes"`
	Lineage    Lineage        `json:"lineage"`
}

// Checkpoint is one registered, complete checkpoint.
type Checkpoint struct {
	Name    string    `json:"name"`
	Attempt int       `json:"attempt"`
	Path    string    `json:"path"`
	Size    int64     `json:"size"`
	Files   int       `json:"files"`
	At      time.Time `json:"at"`
	// SHA256 is its digest when registered; resuming from it checks it.
	SHA256 string `json:"sha256,omitempty"`
	// ResumedBy is the latest attempt handed it to resume from.
	ResumedBy int `json:"resumed_by,omitempty"`
	// SetAside says why resuming skips it (an attempt failed right after
	// resuming from it); empty: it may be resumed from.
	SetAside string `json:"set_aside,omitempty"`
	// Tier says where it is held: local (the job's output tree), object
	// (only the object store) or both.
	Tier string `json:"tier"`
}

// CheckpointList is the answer of GET /api/v1/jobs/{id}/checkpoints.
type CheckpointList struct {
	Job         int64        `json:"job"`
	Checkpoints []Checkpoint `json:"checkpoints"`
	TotalBytes  int64        `json:"total_bytes"`
}

// CheckpointComplete is the body of POST /api/v1/jobs/{id}/attempts/{n}/checkpoints.
type CheckpointComplete struct {
	Name string `json:"name"`
}

// ResumeReport is the body of POST /api/v1/jobs/{id}/attempts/{n}/resumed:
// what the attempt's in-job agent resumed from.
type ResumeReport struct {
	// Name is the registered checkpoint the attempt resumed from; empty
	// when it resumed from none (then Note says why).
	Name string `json:"name,omitempty"`
	// Note says why the candidates before it were skipped ("step-3: its
	// digest does not match; …"); one line, at most 4096 bytes.
	Note string `json:"note,omitempty"`
}

// ResumeRecorded is the answer of POST
// /api/v1/jobs/{id}/attempts/{n}/resumed.
type ResumeRecorded struct {
	Name string `json:"name,omitempty"`
	// Message is what the attempt's start message says of it
	// ("; resuming from checkpoint step-2").
	Message string `json:"message"`
}

// OutputUpload is the answer of PUT
// /api/v1/jobs/{id}/attempts/{n}/outputs/{path}: the file written.
type OutputUpload struct {
	// Path is the file's path below the job's output directory, as sent.
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // of the bytes written, hex
}

// CheckpointUsage is one job's checkpoint space.
type CheckpointUsage struct {
	Job     int64  `json:"job"`
	Project string `json:"project"`
	Count   int    `json:"count"`
	Bytes   int64  `json:"bytes"`
	// LocalBytes and ObjectBytes are what the checkpoints take on each
	// tier (one held on both counts on both).
	LocalBytes  int64 `json:"local_bytes"`
	ObjectBytes int64 `json:"object_bytes"`
}

// CheckpointUsageList is the answer of GET /api/v1/checkpoints/usage.
type CheckpointUsageList struct {
	Jobs     []CheckpointUsage `json:"jobs"`
	Projects map[string]int64  `json:"projects"` // bytes per project
}

// GCRequest is the body of POST /api/v1/gc.
type GCRequest struct {
	DryRun bool `json:"dry_run"`
}

// GCDeletion is one file or checkpoint gc removed (or would remove).
type GCDeletion struct {
	Job    int64  `json:"job"`
	Kind   string `json:"kind"` // checkpoint (deleted from every tier), output, or move (a checkpoint moved to the object store)
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	Reason string `json:"reason"`
}

// GCReport is the answer of POST /api/v1/gc.
type GCReport struct {
	DryRun    bool         `json:"dry_run"`
	Deletions []GCDeletion `json:"deletions"`
	Bytes     int64        `json:"bytes"`
	Failed    []string     `json:"failed,omitempty"`
}
