package domain

import "time"

// Pool is a named slice of capacity with its own rules: which request shapes
// it accepts, how many jobs may run at once, which priority classes may use
// it, whether idle capacity may be borrowed above quota, and whether the
// scheduler may preempt. Pools come from the server's config file and the
// admin API.
type Pool struct {
	Name     string
	Executor string // "local" today
	GPUType  string // informational, e.g. "a100-80g"
	Nodes    []Node // the capacity: each node's CPUs, memory and GPU indices
	// Shape limits: the largest request one job may make; 0 means "only
	// capacity limits it".
	MaxGPUsPerJob  int
	MaxNodesPerJob int
	MaxTimeout     Duration
	// MaxRunning caps concurrently active (starting or running) jobs in the
	// pool; 0 means no cap.
	MaxRunning int
	// Priorities lists the classes the pool accepts; empty accepts all.
	Priorities []Priority
	// Borrowing lets a project run above its quota on idle capacity. Such
	// work is preemptible and is reclaimed when a quota owner needs it.
	Borrowing bool
	// Preemption lets the scheduler stop preemptible lower-priority or
	// borrowing work for higher-priority work or a reclaiming quota owner.
	Preemption bool
	// LogLimit bounds the log of one attempt of a job in the pool: the
	// default for jobs without policy.log_limit and the ceiling for those
	// with one (see EffectiveLogLimit). 0: the server's log_limit.
	LogLimit ByteSize
	// Rates price what the pool's jobs hold (per GPU-, CPU- and GiB-hour)
	// and what they store; zero rates are free.
	Rates Rates
	// IdleStop stops a running job whose GPUs all stayed under Below
	// utilisation for For; zero: off.
	IdleStop  IdleStop
	CreatedAt time.Time
	UpdatedAt time.Time
}

// IdleStop is a pool's idle-accelerator stop: a running job holding GPUs,
// each of which stayed under Below utilisation (a 0–1 ratio) for For, is
// stopped with reason Idle and not retried.
type IdleStop struct {
	Below float64
	For   Duration
}

// On reports whether the idle stop is configured.
func (s IdleStop) On() bool { return s.Below > 0 && s.For > 0 }

// Node is one machine (or, for the local executor, one declared slice of this
// machine) that a pool schedules onto.
type Node struct {
	Name   string
	CPUs   float64
	Memory ByteSize
	GPUs   []int // device indices, exported as CUDA_VISIBLE_DEVICES
}

// Capacity sums a pool's nodes.
func (p Pool) Capacity() Limits {
	var l Limits
	for _, n := range p.Nodes {
		l.GPUs += len(n.GPUs)
		l.CPUs += n.CPUs
		l.Memory += n.Memory
	}
	return l
}

// Limits is an amount of resources (and of concurrent jobs, where used).
type Limits struct {
	GPUs   int      `json:"gpus"`
	CPUs   float64  `json:"cpus"`
	Memory ByteSize `json:"memory"`
	Jobs   int      `json:"jobs,omitempty"` // concurrent jobs
}

// Quota is what one project is guaranteed in one pool. A project without a
// quota in a pool has a zero guarantee there: it can only borrow idle
// capacity, if the pool allows borrowing.
type Quota struct {
	Project string
	Pool    string
	// Guaranteed is the project's share of the pool: GPUs, CPUs, memory and
	// concurrent jobs (Jobs 0 = no job-count limit).
	Guaranteed Limits
	// Borrow is how far above Guaranteed the project may go on idle
	// capacity (zero: no borrowing). Work above Guaranteed is preemptible.
	Borrow Limits
	// MaxPriority is the highest priority class the project may use in the
	// pool; empty means normal.
	MaxPriority Priority
	UpdatedAt   time.Time
}

// Project is a team that owns jobs and quotas. Shares weight its fair share
// of contended capacity (default 1).
type Project struct {
	Name      string
	Shares    float64
	CreatedAt time.Time
}

// QueueEntry is one waiting job as the scheduler last ordered it.
type QueueEntry struct {
	JobID     int64
	Name      string
	Project   string
	Submitter string // for the listing filter; not shown
	Pool      string
	Priority  Priority
	Position  int // 1-based within its pool's queue
	Reason    Reason
	Message   string
	Submitted time.Time
	// EstimatedStart is when the job is expected to start, from the running
	// jobs' timeouts; zero when it cannot be computed.
	EstimatedStart time.Time
	// Resources is the job's request.
	Resources Resources
}
