// Package apitypes defines the JSON wire types of the /api/v1 HTTP API, shared
// by the server, the Go client, the CLI and the web UI. Field names are part of
// the public contract: add fields, never rename or remove them.
//
// It imports the standard library only.
package apitypes

import (
	"encoding/json"
	"fmt"
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
	// Template, instead of Spec, names a job template: "name" or
	// "name@version" (templates.go); Project is its project (default: the
	// one project that has a template of that name) and Vars its variables.
	Template string            `json:"template,omitempty"`
	Project  string            `json:"project,omitempty"`
	Vars     map[string]string `json:"vars,omitempty"`
	// Code is the code package to run from (code.go); nil: none.
	Code *CodeRef `json:"code,omitempty"`
	// AllowDuplicate submits the job even when it repeats a live or recent
	// job of the same user and spec on a server that refuses repeats.
	AllowDuplicate bool `json:"allow_duplicate,omitempty"`
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
	Preemptions int      `json:"preemptions"`
	SpecHash    string   `json:"spec_hash,omitempty"`
	Code        *CodeRef `json:"code,omitempty"` // the code package it runs from, in GET and submit answers
	RerunOf     int64    `json:"rerun_of,omitempty"`
	// Cost, in GET /jobs/{id} and in lists when its pool has rates, is
	// what its attempts cost so far (each at the rates in force while it
	// ran), and CostPerHour, in GET /jobs/{id}, what its running attempt
	// costs per hour ("0.00" when none runs), in Currency.
	Cost        string `json:"cost,omitempty"`
	CostPerHour string `json:"cost_per_hour,omitempty"`
	Currency    string `json:"currency,omitempty"`
	// Sizing, in GET /jobs/{id} once an attempt of a minute or more ended,
	// is its request against what its ended attempts used.
	Sizing      *Sizing         `json:"sizing,omitempty"`
	Spec        json.RawMessage `json:"spec,omitempty"` // the immutable canonical snapshot
	Attempts    []Attempt       `json:"attempts,omitempty"`
	Transitions []Transition    `json:"transitions,omitempty"`
	// Created is false when an Idempotency-Key matched an earlier submit.
	Created *bool `json:"created,omitempty"`
	// Warnings, in a submit's answer, tell the submitter what to check
	// (a repeat of a live or recent job of the same spec).
	Warnings []string `json:"warnings,omitempty"`
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
	// GPUSeconds is how much of its GPUs it used (utilisation-weighted, from
	// the GPU sampler's readings); 0 without readings.
	GPUSeconds float64 `json:"gpu_seconds,omitempty"`
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

// HoldRequest is the optional body of POST /api/v1/jobs/{id}/hold.
type HoldRequest struct {
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
	// Class classifies a failure ("out-of-memory", "missing-dependency", …;
	// see docs/concepts.md); empty unless the job failed. Message then
	// holds the one-sentence diagnosis.
	Class string `json:"class,omitempty"`
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
// invalid_spec, invalid_request, not_found, conflict, not_started (a 409:
// the server has not recorded the attempt's start yet; report again),
// unauthorized, forbidden, internal.
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
	Priorities []string `json:"priorities,omitempty"`
	Borrowing  bool     `json:"borrowing"`
	Preemption bool     `json:"preemption"`
	// LogLimit bounds the log of one attempt of a job in the pool, e.g.
	// "2GiB": the default for jobs without policy.log_limit and the
	// ceiling for those with one. Empty or "0": the server's log_limit.
	LogLimit string `json:"log_limit,omitempty"`
	// Rates price the pool's use in the server's currency; absent rates
	// are free.
	Rates PoolRates `json:"rates,omitzero"`
	// IdleStop stops a running job whose GPUs all stay under Below
	// utilisation for For (reason Idle, not retried); absent: off.
	IdleStop *PoolIdleStop `json:"idle_stop,omitempty"`
	Capacity PoolCapacity  `json:"capacity,omitzero"`
	// BeyondHardware, set by the server, says what the pool's nodes declare
	// beyond the hardware detected on the machine that runs its jobs, e.g.
	// "declares 4 GPUs, 16 CPUs; this machine has 0 GPUs, 2 CPUs"; empty
	// when they fit. Simulated says the server config marks that as
	// intended (inventory.simulated, docs/pools.md). Both are ignored on PUT.
	BeyondHardware string `json:"beyond_hardware,omitempty"`
	Simulated      bool   `json:"simulated,omitempty"`
	// Open, set by the server, says no project has a quota in the pool:
	// every project may run any job there, sharing it by fair share
	// (docs/pools.md). Ignored on PUT.
	Open      bool      `json:"open,omitempty"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// PoolIdleStop is a pool's idle-accelerator stop.
type PoolIdleStop struct {
	// Below is the GPU utilisation, a 0–1 ratio (0.05 is 5%), under which
	// a GPU counts as idle.
	Below float64 `json:"below"`
	// For is how long every GPU of a job must stay idle, e.g. "30m".
	For string `json:"for"`
}

// Node is one node of a pool.
type Node struct {
	Name   string  `json:"name"`
	CPUs   float64 `json:"cpus"`
	Memory string  `json:"memory"` // e.g. "256GiB"
	GPUs   []int   `json:"gpus"`   // device indices
}

// PoolRates are a pool's prices as decimal amounts ("2.10", at most six
// decimal places, 0 or more); an absent or empty rate is free.
type PoolRates struct {
	// Currency, set by the server, is the server-wide currency the rates
	// are in (server config currency, default USD). On PUT it may be left
	// out; any other value than the server's is refused, as rates cannot
	// be in another currency.
	Currency      string `json:"currency,omitempty"`
	GPUHour       Amount `json:"gpu_hour,omitempty"`        // per GPU per hour held
	CPUHour       Amount `json:"cpu_hour,omitempty"`        // per CPU per hour held
	MemoryGiBHour Amount `json:"memory_gib_hour,omitempty"` // per GiB of memory per hour held
	// Stored outputs and checkpoints per GiB-month, per storage tier.
	LocalGiBMonth  Amount `json:"local_gib_month,omitempty"`
	ObjectGiBMonth Amount `json:"object_gib_month,omitempty"`
}

// Amount is a decimal amount of money as text ("2.10"). The server writes
// it as a JSON string; it also reads a JSON number, keeping its digits
// exactly as written, so config files may say gpu_hour: 2.10.
type Amount string

// UnmarshalJSON reads a string, or a number's literal text.
func (a *Amount) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*a = Amount(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("an amount must be a decimal such as 2.10, got %s", b)
	}
	*a = Amount(n)
	return nil
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

// QuotaRequest is a compute request (R37): more of a pool for a project until
// a date. Status is pending, approved, denied or expired (an approved grant
// past its date). Body of POST /api/v1/quota-requests (project, pool, gpus,
// cpus, memory, jobs, until, reason) and the element of its list.
type QuotaRequest struct {
	ID        int64      `json:"id,omitempty"`
	Project   string     `json:"project"`
	Pool      string     `json:"pool"`
	GPUs      int        `json:"gpus"`
	CPUs      float64    `json:"cpus"`
	Memory    string     `json:"memory,omitempty"`
	Jobs      int        `json:"jobs"`
	Until     time.Time  `json:"until"`
	Reason    string     `json:"reason"`
	Requester string     `json:"requester,omitempty"`
	Status    string     `json:"status,omitempty"`
	Decider   string     `json:"decider,omitempty"`
	DecidedAt *time.Time `json:"decided_at,omitempty"`
	Note      string     `json:"note,omitempty"`
	CreatedAt time.Time  `json:"created_at,omitzero"`
}

// QuotaRequestList is the body of GET /api/v1/quota-requests, newest first.
type QuotaRequestList struct {
	Requests []QuotaRequest `json:"requests"`
}

// Decision is the body of POST /api/v1/quota-requests/{id}/approve and /deny.
type Decision struct {
	Note string `json:"note,omitempty"`
}

// ---- Identity: users, roles, tokens. ----

// RoleBinding is one role a user holds: a global role (admin,
// resource-admin, auditor; no project) or a project role (lead, member,
// viewer) in Project. It is also the body of POST /api/v1/users/{name}/roles.
type RoleBinding struct {
	Role    string `json:"role"`
	Project string `json:"project,omitempty"`
}

// User is a user with its roles; the body of POST /api/v1/users is
// {"name": "..."}.
type User struct {
	Name      string        `json:"name"`
	Roles     []RoleBinding `json:"roles"`
	CreatedAt time.Time     `json:"created_at,omitzero"`
}

// UserList is the body of GET /api/v1/users, sorted by name.
type UserList struct {
	Users []User `json:"users"`
}

// RoleChange is the answer of granting or revoking a role.
type RoleChange struct {
	User    string      `json:"user"`
	Role    RoleBinding `json:"role"`
	Changed bool        `json:"changed"` // false: the user already held it
}

// TokenRequest is the body of POST /api/v1/tokens. User defaults to the
// caller; Expires is a duration such as "30d" or "12h", or "never"
// (default "90d").
type TokenRequest struct {
	User    string `json:"user,omitempty"`
	Name    string `json:"name,omitempty"`
	Expires string `json:"expires,omitempty"`
}

// Token describes an API token. Token, the secret, is present only in the
// answer of POST /api/v1/tokens: it is shown once and stored hashed.
type Token struct {
	Token     string     `json:"token,omitempty"`
	ID        int64      `json:"id"`
	Name      string     `json:"name"`
	User      string     `json:"user"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// TokenList is the body of GET /api/v1/tokens, by id.
type TokenList struct {
	Tokens []Token `json:"tokens"`
}

// Whoami is the body of GET /api/v1/whoami: who the token acts as.
type Whoami struct {
	User      string        `json:"user,omitempty"`
	Roles     []RoleBinding `json:"roles"`
	TokenID   int64         `json:"token_id,omitempty"`
	TokenName string        `json:"token_name,omitempty"`
	ExpiresAt *time.Time    `json:"expires_at,omitempty"`
	// Job and Attempt are set for a job token: the attempt it reports for.
	Job     int64 `json:"job,omitempty"`
	Attempt int   `json:"attempt,omitempty"`
}

// Secret describes the newest version of one secret. The API never returns
// a secret's value.
type Secret struct {
	Name      string    `json:"name"`
	Project   string    `json:"project,omitempty"` // empty: a global secret
	Version   int       `json:"version"`
	KeyID     string    `json:"key_id"` // the master key that sealed it
	CreatedBy string    `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`
	// Shadowed marks a global secret that the listed project overrides
	// with its own of the same name.
	Shadowed bool `json:"shadowed,omitempty"`
}

// SecretList is the body of GET /api/v1/secrets[?project=P], sorted by
// project (global first), then name.
type SecretList struct {
	Secrets []Secret `json:"secrets"`
}

// SecretValue is the body of PUT /api/v1/secrets/{name}[?project=P]: the
// value to store as the secret's next version (at least 4 bytes).
type SecretValue struct {
	Value string `json:"value"`
}

// RotateKeyRequest is the body of POST /api/v1/secrets/rotate-key.
type RotateKeyRequest struct {
	// NewKeyFile is the path, on the server's machine, of the new master
	// key: 32 raw bytes or their base64, mode 0600.
	NewKeyFile string `json:"new_key_file"`
}

// RotateKeyResult is the answer of POST /api/v1/secrets/rotate-key.
type RotateKeyResult struct {
	OldKeyID string `json:"old_key_id"`
	NewKeyID string `json:"new_key_id"`
	Resealed int    `json:"resealed"` // stored versions re-encrypted
}

// AuditRecord is one entry of the audit log. Every field is exactly as
// hashed, so an exported log can be verified offline: Before and After are
// the compact JSON summaries as strings, not re-encoded objects, and At keeps
// its nanoseconds.
type AuditRecord struct {
	Seq      int64     `json:"seq"`
	At       time.Time `json:"at"`
	Actor    string    `json:"actor"`
	Action   string    `json:"action"`
	Target   string    `json:"target"`
	Before   string    `json:"before"`
	After    string    `json:"after"`
	Result   string    `json:"result"` // ok, denied or failed
	Detail   string    `json:"detail"`
	Client   string    `json:"client"`
	PrevHash string    `json:"prev_hash"`
	Hash     string    `json:"hash"`
}

// AuditList is the body of GET /api/v1/audit: records in log order. When
// more match, NextAfter is the cursor for the next page (?after=NextAfter).
type AuditList struct {
	Records   []AuditRecord `json:"records"`
	NextAfter int64         `json:"next_after,omitempty"`
}

// AuditVerification is the body of GET and POST /api/v1/audit/verify.
type AuditVerification struct {
	OK bool `json:"ok"`
	// Records is how many records were found intact (with a Problem, how
	// many came before it).
	Records int64 `json:"records"`
	// LastSeq and LastHash are the newest intact record: keep them
	// elsewhere to detect a later truncation of the log.
	LastSeq  int64         `json:"last_seq,omitempty"`
	LastHash string        `json:"last_hash,omitempty"`
	Problem  *AuditProblem `json:"problem,omitempty"`
	// Witness is the server's witness the log was checked against;
	// absent when the server keeps none.
	Witness *AuditWitnessHead `json:"witness,omitempty"`
}

// AuditVerifyRequest is the body of POST /api/v1/audit/verify: a witness
// file the caller kept (as GET /api/v1/audit/witness or the server's
// audit_witness file holds it).
type AuditVerifyRequest struct {
	Witness json.RawMessage `json:"witness,omitempty"`
}

// AuditWitnessHead is the head of the audit log a witness saw: the newest
// record's number, hash and time, and when the witness was written.
type AuditWitnessHead struct {
	Seq       int64     `json:"seq"`
	Hash      string    `json:"hash,omitempty"`
	At        time.Time `json:"at,omitzero"`
	WrittenAt time.Time `json:"written_at,omitzero"`
}

// AuditProblem is the first problem verification found.
type AuditProblem struct {
	// Kind is modified, missing, inserted, swapped, unlinked or
	// out_of_order (the chain is broken); truncated or rewritten (the log
	// no longer holds what a witness saw); or witness_replaced (the
	// server's witness moved backwards, was deleted or damaged).
	Kind    string `json:"kind"`
	Seq     int64  `json:"seq"`             // the record it is about
	Other   int64  `json:"other,omitempty"` // a second record involved
	Message string `json:"message"`
}

// Alert is one alert: a rule's condition that fired, and resolved once it
// cleared.
type Alert struct {
	ID         int64     `json:"id"`
	Key        string    `json:"key"`
	Rule       string    `json:"rule"`
	Severity   string    `json:"severity"`
	State      string    `json:"state"` // firing or resolved
	Summary    string    `json:"summary"`
	Resolution string    `json:"resolution,omitempty"`
	Job        int64     `json:"job,omitempty"`
	JobName    string    `json:"job_name,omitempty"`
	Attempt    int       `json:"attempt,omitempty"`
	Project    string    `json:"project,omitempty"`
	Pool       string    `json:"pool,omitempty"`
	Owner      string    `json:"owner,omitempty"`
	FiredAt    time.Time `json:"fired_at"`
	ResolvedAt time.Time `json:"resolved_at,omitzero"`
	// AckedAt, AckedBy and AckReason say who acknowledged the alert, when
	// and why (trainyard alerts ack); absent when nobody did.
	AckedAt   time.Time `json:"acked_at,omitzero"`
	AckedBy   string    `json:"acked_by,omitempty"`
	AckReason string    `json:"ack_reason,omitempty"`
}

// AlertAck is the body of POST /api/v1/alerts/{id}/ack.
type AlertAck struct {
	Reason string `json:"reason,omitempty"`
}

// AlertList is the answer of GET /api/v1/alerts.
type AlertList struct {
	Alerts []Alert `json:"alerts"`
}

// AlertTest is the body of POST /api/v1/alerts/test.
type AlertTest struct {
	Channel string `json:"channel"`
}

// Status is what GET /readyz answers with Accept: application/json: this
// replica and the one that leads (runs the scheduler).
type Status struct {
	Replica string `json:"replica"`
	Leader  string `json:"leader"` // "" while no replica leads
	Epoch   int64  `json:"epoch"`  // the leader's term
	Leading bool   `json:"leading"`
	Store   string `json:"store"`
	// Isolation says how jobs run on this replica's machine: "jobs run as
	// per-project users", or "jobs run as the server's user: not isolated".
	Isolation string `json:"isolation,omitempty"`
	// Hardware, when set, says that pools declare more than this machine
	// has: "simulated: ..." when the server config says so on purpose
	// (inventory.simulated), else a warning.
	Hardware string `json:"hardware,omitempty"`
}

// SubmitPreview answers POST /api/v1/jobs/preview: what the submit
// would store and where the job would wait. Nothing was stored.
type SubmitPreview struct {
	DryRun    bool            `json:"dry_run"` // always true
	Name      string          `json:"name"`
	Project   string          `json:"project"`
	Pool      string          `json:"pool"`
	Priority  string          `json:"priority"`
	Resources Resources       `json:"resources"`
	Timeout   string          `json:"timeout,omitempty"` // e.g. "24h"; empty: none
	SpecHash  string          `json:"spec_hash"`
	Spec      json.RawMessage `json:"spec"`            // the canonical snapshot the job would run
	Queue     *PreviewQueue   `json:"queue,omitempty"` // absent when no scheduler orders the queue
	// WorstCaseCost is the most the job may cost (its pool's rates × its
	// request × its timeout) in Currency; absent without a timeout.
	WorstCaseCost string `json:"worst_case_cost,omitempty"`
	Currency      string `json:"currency,omitempty"`
	// Budget is the project's budget in force; absent when there is none
	// or the caller may not read the project's spend.
	Budget *PreviewBudget `json:"budget,omitempty"`
}

// PreviewBudget is how a previewed job stands against its project's
// budget for the current period.
type PreviewBudget struct {
	Amount    string `json:"amount"`
	Period    string `json:"period"` // "2026-12", or "2026-12-01..2026-12-15"
	Action    string `json:"action"` // notify, block or suspend
	Spent     string `json:"spent"`
	Committed string `json:"committed"` // spent plus what running jobs may still cost
	// CommittedUnbounded: a running job has no timeout, so Committed is a floor.
	CommittedUnbounded bool `json:"committed_unbounded,omitempty"`
	// Fits is false when the budget would hold the job (BudgetExceeded);
	// Message then says why, with the numbers.
	Fits    bool   `json:"fits"`
	Message string `json:"message,omitempty"`
}

// PreviewQueue is where a previewed job would stand in its pool's queue.
type PreviewQueue struct {
	// Waiting jobs in the pool, and those of them at the job's priority or
	// above, which go first (fair share aside).
	Waiting int `json:"waiting"`
	Ahead   int `json:"ahead"`
	// AheadStart is when the last job ahead is expected to start.
	AheadStart *time.Time `json:"ahead_start,omitempty"`
}

// Sizing is a job's request against what its ended attempts used.
type Sizing struct {
	HeldSeconds float64 `json:"held_seconds"` // the ended attempts' wall time
	CPUs        float64 `json:"cpus"`         // requested, over all nodes
	UsedCPUs    float64 `json:"used_cpus"`    // CPU time used per second held
	GPUs        int     `json:"gpus,omitempty"`
	UsedGPUs    float64 `json:"used_gpus,omitempty"` // GPU time used per second held (utilisation-weighted)
	// IdleCost is what the CPUs held and not used cost ("" without rates).
	IdleCost   string `json:"idle_cost,omitempty"`
	Memory     int64  `json:"memory_bytes"`
	PeakMemory int64  `json:"peak_memory_bytes"`
	// Oversized: it used under a quarter of 2 or more CPUs; NearMemory: it
	// peaked at 90% of its memory limit or more.
	Oversized  bool `json:"oversized"`
	NearMemory bool `json:"near_memory_limit"`
}
