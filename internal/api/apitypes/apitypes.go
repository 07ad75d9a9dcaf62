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
	AttemptCount    int             `json:"attempt_count"`
	CancelRequested bool            `json:"cancel_requested,omitempty"`
	SpecHash        string          `json:"spec_hash,omitempty"`
	Spec            json.RawMessage `json:"spec,omitempty"` // the immutable canonical snapshot
	Attempts        []Attempt       `json:"attempts,omitempty"`
	Transitions     []Transition    `json:"transitions,omitempty"`
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
