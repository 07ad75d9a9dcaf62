package domain

import "time"

// Job is a submitted job as stored. Spec is the immutable config snapshot.
type Job struct {
	ID          int64
	Name        string
	Project     string
	Pool        string
	State       JobState
	Reason      Reason
	Message     string
	Priority    Priority
	Submitter   string
	SubmittedAt time.Time
	UpdatedAt   time.Time
	StartedAt   time.Time // first attempt's start; zero if never started
	FinishedAt  time.Time // zero until terminal
	// Resources is the request, copied from Spec so that list rows (which
	// carry no Spec) have it too.
	Resources   Resources
	Spec        Spec
	SpecJSON    []byte // canonical JSON of Spec, exactly as stored
	SpecHash    string // "sha256:<hex>" of SpecJSON
	OutputDir   string
	Attempts    int       // number of attempts created so far
	NextAttempt time.Time // earliest time a queued job may start (retry backoff); zero = now
	// CancelRequested is set when a starting/running job is asked to stop; the
	// control loop stops its attempt and then marks the job canceled.
	CancelRequested bool
	// PreemptRequested is set when the scheduler preempts a starting/running
	// job; when its attempt ends the job returns to the queue.
	PreemptRequested bool
	// Preemptions counts how often the job was preempted.
	Preemptions    int
	IdempotencyKey string
	// Timeout and Preemptible are copied from Spec.Policy, like Resources.
	Timeout     Duration
	Preemptible bool
	// Code is the code package the job runs from (code.go); nil: none.
	// Only GetJob and CreateJob fill it.
	Code *CodeRef
	// RerunOf is the job this one re-runs (submitted from its config
	// snapshot); 0: an ordinary submit.
	RerunOf int64
}

// Attempt is one run of a job.
type Attempt struct {
	JobID      int64
	Number     int // 1-based
	State      AttemptState
	Reason     Reason
	Message    string
	ExitCode   *int // nil until exited with a code
	Node       string
	GPUs       []int // assigned GPU indices
	CreatedAt  time.Time
	StartedAt  time.Time
	FinishedAt time.Time
	Usage      Usage // what the attempt's processes used; zero until it ends
	// Borrowed is set when the attempt was placed above its project's quota
	// on idle capacity; such an attempt may be preempted to reclaim it.
	Borrowed bool
}

// Usage is what an attempt's processes consumed, measured when it ended.
type Usage struct {
	CPUSeconds float64  // user + system CPU time of the process and its reaped descendants
	MaxRSS     ByteSize // peak resident memory of the largest process (or of its cgroup, when limited)
	// GPUSeconds is how much of its GPUs it used: utilisation-weighted
	// GPU-seconds from the sampler's readings while it ran (0 without GPU
	// readings).
	GPUSeconds float64
}

// Event is one recorded state transition of a job (and its attempt, if any).
type Event struct {
	ID      int64
	JobID   int64
	Attempt int // 0 when not about an attempt
	At      time.Time
	From    JobState // empty for the submit event
	To      JobState
	Actor   string // "user:<name>", "system:scheduler", "system:executor"
	Reason  Reason
	Message string
}
