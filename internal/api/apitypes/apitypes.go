// Package apitypes defines the JSON wire types of the /api/v1 HTTP API, shared
// by the server, the Go client, the CLI and the web UI. Field names are part of
// the public contract: add fields, never rename or remove them.
//
// It imports the standard library only.
package apitypes

import (
	"encoding/json"
	"time"
)

// SubmitRequest is the body of POST /api/v1/jobs.
//
// Spec is the job spec document: either a JSON object, or a JSON string holding
// the YAML/JSON text of a spec file (so parse errors can name source lines).
// Set holds "key=value" overrides applied after parsing (params.*, resources.*,
// policy.*, labels.*, name, pool, ...). The Idempotency-Key request header makes a
// repeated submit return the job created by the first.
type SubmitRequest struct {
	Spec json.RawMessage `json:"spec"`
	Set  []string        `json:"set,omitempty"`
}

// Job is a job as the API shows it. List responses leave Spec, Attempts and
// Transitions empty; GET /api/v1/jobs/{id} fills them.
type Job struct {
	ID          int64      `json:"id"`
	Name        string     `json:"name"`
	Project     string     `json:"project"`
	Pool        string     `json:"pool"`
	State       string     `json:"state"`
	Reason      string     `json:"reason,omitempty"`
	Message     string     `json:"message,omitempty"`
	Priority    string     `json:"priority"`
	Submitter   string     `json:"submitter"`
	SubmittedAt time.Time  `json:"submitted_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	StartedAt   *time.Time `json:"started_at,omitempty"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
	Resources   Resources  `json:"resources"`
	OutputDir   string     `json:"output_dir"`
	// AttemptCount is how many attempts were created so far.
	AttemptCount    int  `json:"attempt_count"`
	CancelRequested bool `json:"cancel_requested,omitempty"`
	// Preemptions counts how often the scheduler preempted the job.
	Preemptions int             `json:"preemptions"`
	SpecHash    string          `json:"spec_hash,omitempty"`
	Spec        json.RawMessage `json:"spec,omitempty"` // the immutable canonical snapshot
	Attempts    []Attempt       `json:"attempts,omitempty"`
	Transitions []Transition    `json:"transitions,omitempty"`
	// Created is false when an Idempotency-Key matched an earlier submit.
	Created *bool `json:"created,omitempty"`
}

// Resources is a job's request, in display units.
type Resources struct {
	GPUs   int     `json:"gpus"`
	CPUs   float64 `json:"cpus"`
	Memory string  `json:"memory"` // e.g. "32GiB"
	Nodes  int     `json:"nodes"`
}

// Attempt is one run of a job.
type Attempt struct {
	Number     int        `json:"number"`
	State      string     `json:"state"`
	Reason     string     `json:"reason,omitempty"`
	Message    string     `json:"message,omitempty"`
	ExitCode   *int       `json:"exit_code"`
	Node       string     `json:"node,omitempty"`
	GPUs       []int      `json:"gpus,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	Usage      *Usage     `json:"usage,omitempty"` // set once the attempt has ended
}

// Usage is what an attempt's processes consumed.
type Usage struct {
	CPUSeconds  float64 `json:"cpu_seconds"`
	MaxRSSBytes int64   `json:"max_rss_bytes"`
}

// Transition is one recorded state change.
type Transition struct {
	At      time.Time `json:"at"`
	From    string    `json:"from"`
	To      string    `json:"to"`
	Attempt int       `json:"attempt,omitempty"`
	Actor   string    `json:"actor"`
	Reason  string    `json:"reason,omitempty"`
	Message string    `json:"message,omitempty"`
}

// JobList is the body of GET /api/v1/jobs. Jobs are newest first. When more
// remain, NextCursor is set: pass it as ?cursor= to get the next page.
type JobList struct {
	Jobs       []Job  `json:"jobs"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// CancelRequest is the optional body of POST /api/v1/jobs/{id}/cancel.
type CancelRequest struct {
	Reason string `json:"reason,omitempty"`
}

// Why is the body of GET /api/v1/jobs/{id}/why: the current pending or failure
// reason with the evidence behind it.
type Why struct {
	ID       int64    `json:"id"`
	State    string   `json:"state"`
	Reason   string   `json:"reason,omitempty"`
	Message  string   `json:"message,omitempty"`
	Evidence []string `json:"evidence,omitempty"` // facts: exit codes, log tails, numbers
	Hint     string   `json:"hint,omitempty"`     // what to do next
}

// Version is the body of GET /api/v1/version.
type Version struct {
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
	Store   string `json:"store,omitempty"`
}

// Error is the body of every non-2xx response.
type Error struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody says what went wrong. Code is stable and machine-readable:
// invalid_spec, invalid_request, not_found, conflict, unauthorized, forbidden,
// internal.
type ErrorBody struct {
	Code    string       `json:"code"`
	Message string       `json:"message"`
	Fields  []FieldError `json:"fields,omitempty"`
}

// FieldError is one invalid field, with its path in the spec ("resources.gpus").
type FieldError struct {
	Path    string `json:"path"`
	Message string `json:"message"`
	Line    int    `json:"line,omitempty"`
}

// Pool is a pool as the API shows it, and the body of PUT
// /api/v1/pools/{name} (which creates or replaces the whole pool). Capacity,
// CreatedAt and UpdatedAt are computed by the server and ignored on PUT.
type Pool struct {
	Name     string `json:"name"`
	Executor string `json:"executor,omitempty"` // "local" (the default)
	GPUType  string `json:"gpu_type,omitempty"` // informational, e.g. "a100-80g"
	Nodes    []Node `json:"nodes"`
	// Shape limits of one job; 0 means only capacity limits it.
	MaxGPUsPerJob  int    `json:"max_gpus_per_job"`
	MaxNodesPerJob int    `json:"max_nodes_per_job"`
	MaxTimeout     string `json:"max_timeout,omitempty"` // e.g. "24h"; empty: no limit
	// MaxRunning caps concurrently active jobs; 0 means no cap.
	MaxRunning int `json:"max_running"`
	// Priorities lists the classes the pool accepts; empty accepts all.
	Priorities []string     `json:"priorities,omitempty"`
	Borrowing  bool         `json:"borrowing"`
	Preemption bool         `json:"preemption"`
	Capacity   PoolCapacity `json:"capacity,omitzero"`
	CreatedAt  time.Time    `json:"created_at,omitzero"`
	UpdatedAt  time.Time    `json:"updated_at,omitzero"`
}

// Node is one node of a pool.
type Node struct {
	Name   string  `json:"name"`
	CPUs   float64 `json:"cpus"`
	Memory string  `json:"memory"` // e.g. "256GiB"
	GPUs   []int   `json:"gpus"`   // device indices
}

// PoolCapacity is the sum of a pool's nodes.
type PoolCapacity struct {
	GPUs   int     `json:"gpus"`
	CPUs   float64 `json:"cpus"`
	Memory string  `json:"memory"`
}

// PoolList is the body of GET /api/v1/pools, sorted by name.
type PoolList struct {
	Pools []Pool `json:"pools"`
}

// Quota is what one project is guaranteed in one pool, and the body of PUT
// /api/v1/quotas/{project}/{pool} (which creates or replaces it; Project and
// Pool may be left out of the body, the path names them).
type Quota struct {
	Project string  `json:"project"`
	Pool    string  `json:"pool"`
	GPUs    int     `json:"gpus"`
	CPUs    float64 `json:"cpus"`
	Memory  string  `json:"memory"` // e.g. "128GiB"
	Jobs    int     `json:"jobs"`   // concurrent jobs; 0: no job-count limit
	// Borrow is how far above the guarantee the project may go on idle
	// capacity; that work is preemptible.
	Borrow QuotaBorrow `json:"borrow"`
	// MaxPriority is the highest class the project may use in the pool;
	// empty means normal.
	MaxPriority string    `json:"max_priority,omitempty"`
	UpdatedAt   time.Time `json:"updated_at,omitzero"`
}

// QuotaBorrow is the borrowing allowance of a quota.
type QuotaBorrow struct {
	GPUs   int     `json:"gpus"`
	CPUs   float64 `json:"cpus"`
	Memory string  `json:"memory"`
}

// QuotaList is the body of GET /api/v1/quotas, sorted by project then pool.
type QuotaList struct {
	Quotas []Quota `json:"quotas"`
}

// Project is a team that owns jobs and quotas, and the body of PUT
// /api/v1/projects/{name} ({"shares": 2}). Shares weight its fair share of
// contended capacity (default 1).
type Project struct {
	Name      string    `json:"name"`
	Shares    float64   `json:"shares"`
	CreatedAt time.Time `json:"created_at,omitzero"`
}

// ProjectList is the body of GET /api/v1/projects, sorted by name.
type ProjectList struct {
	Projects []Project `json:"projects"`
}

// QueueEntry is one waiting job as the scheduler last ordered it.
type QueueEntry struct {
	ID          int64     `json:"id"`
	Name        string    `json:"name"`
	Project     string    `json:"project"`
	Pool        string    `json:"pool"`
	Priority    string    `json:"priority"`
	Position    int       `json:"position"` // 1-based within its pool
	Reason      string    `json:"reason,omitempty"`
	Message     string    `json:"message,omitempty"`
	SubmittedAt time.Time `json:"submitted_at"`
	// EstimatedStart is when the job is expected to start; absent when it
	// cannot be estimated.
	EstimatedStart *time.Time `json:"estimated_start,omitempty"`
}

// Queue is the body of GET /api/v1/queue?pool=P: waiting jobs in scheduling
// order (every pool's when pool is not given).
type Queue struct {
	Entries []QueueEntry `json:"entries"`
}
