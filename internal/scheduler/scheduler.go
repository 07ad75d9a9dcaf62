// Package scheduler decides which queued training jobs start, on which nodes
// and GPUs, which running jobs are preempted to make room, and why every other
// job waits.
//
// Schedule is a pure function of its input: it performs no I/O, reads no
// clock (Snapshot.Now is the cycle time), uses no randomness, starts no
// goroutines and never iterates a map to decide an output order. The same
// snapshot yields a byte-identical Plan whatever the order of its slices.
//
// One pass, per pool (pools in name order):
//
//  1. Order the pool's queue: priority class (urgent > high > normal > low),
//     previously preempted jobs ahead of their class peers, then fair share
//     (the project's decayed usage plus its current allocation share, divided
//     by its shares; recomputed after every placement), then submit time,
//     then job id.
//  2. Walk the queue. For each job check, in order: retry backoff, whether
//     the pool could ever hold it, the pool's concurrency cap, the project's
//     quota (guaranteed, then borrowed), then capacity.
//  3. A job that fits starts (all nodes of a gang, or none). A job that does
//     not fit may wait for stopping jobs, preempt (pools with preemption on),
//     or reserve capacity so that jobs behind it cannot starve it; later jobs
//     may use reserved capacity only when they end before the reserving job's
//     estimated start (backfill).
//  4. Every job that does not start gets a waiting entry with a reason and a
//     message with numbers, in queue order within its pool, which gives its
//     position in the pool's queue.
//
// See docs/scheduling.md for the rules as researchers and admins see them.
package scheduler

import (
	"slices"
	"time"

	"trainyard/internal/domain"
)

// Defaults for zero Config fields.
const (
	DefaultFairShareHalfLife      = 24 * time.Hour
	DefaultMaxPreemptionsPerCycle = 64
	DefaultReservationsPerPool    = 1
)

// Config tunes the scheduler. Zero values mean the documented defaults.
type Config struct {
	// FairShareHalfLife is the half-life of historical usage (default 24h).
	// DecayUsage uses it; Schedule itself only reads Snapshot.Usage.
	FairShareHalfLife time.Duration
	// MaxPreemptionsPerCycle bounds the victims chosen in one pass
	// (default 64; negative disables preemption).
	MaxPreemptionsPerCycle int
	// ReservationsPerPool is how many capacity-blocked jobs per pool hold a
	// reservation against starvation (default 1: the blocked head). Jobs
	// waiting for preempted or stopping jobs always hold one.
	ReservationsPerPool int
}

func (c Config) withDefaults() Config {
	if c.FairShareHalfLife <= 0 {
		c.FairShareHalfLife = DefaultFairShareHalfLife
	}
	if c.MaxPreemptionsPerCycle == 0 {
		c.MaxPreemptionsPerCycle = DefaultMaxPreemptionsPerCycle
	}
	if c.MaxPreemptionsPerCycle < 0 {
		c.MaxPreemptionsPerCycle = 0
	}
	if c.ReservationsPerPool <= 0 {
		c.ReservationsPerPool = DefaultReservationsPerPool
	}
	return c
}

// Snapshot is the state the scheduler decides on. The caller loads it; the
// scheduler never modifies it.
type Snapshot struct {
	Now      time.Time        // cycle time, supplied by the caller
	Pools    []domain.Pool    // each with its Nodes (capacity) and rules
	Quotas   []domain.Quota   // per (project, pool)
	Projects []domain.Project // shares (a missing project has shares 1)
	Usage    []Usage          // decayed historical usage per (project, pool)
	Pending  []Pending        // queued jobs
	Running  []Allocation     // starting and running jobs (hold resources)
}

// Usage is a project's decayed historical consumption in one pool, in
// dominant-share-hours (a job's cost rate is max(gpus/poolGPUs,
// cpus/poolCPUs, mem/poolMem) over its whole gang; GPU jobs in GPU pools are
// thus GPU-hours / pool GPUs).
type Usage struct {
	Project string
	Pool    string
	Value   float64
}

// Pending is a queued job.
type Pending struct {
	JobID       int64
	Project     string
	Pool        string
	Priority    domain.Priority
	SubmittedAt time.Time
	Resources   domain.Resources // per node; Resources.Nodes = gang size (≥1)
	Timeout     time.Duration    // 0 = unbounded (cannot be backfilled ahead of a reservation)
	Preemptible bool
	NotBefore   time.Time // retry backoff: not before this
	Preemptions int       // >0: it was preempted; it goes ahead of its class peers
	// Beneficiary: jobs were preempted for it and it has not started
	// since. It is decided before every other job of its pool, so the room
	// its victims leave is not taken by others while they stop or once
	// they are gone (and it does not preempt again for want of it).
	Beneficiary bool
}

// NodeAlloc is the part of a job on one node: the node and its GPU indices.
type NodeAlloc struct {
	Node string
	GPUs []int // device indices on that node
}

// Allocation is a starting or running job and the resources it holds.
type Allocation struct {
	JobID       int64
	Project     string
	Pool        string
	Priority    domain.Priority
	Resources   domain.Resources // per node
	Nodes       []NodeAlloc      // len == Resources.Nodes
	StartedAt   time.Time        // when it was placed
	Timeout     time.Duration    // 0 = unbounded
	Preemptible bool
	Borrowed    bool // placed above its project's quota (always preemptible for reclaim)
	Stopping    bool // already being stopped (cancel/preempt): holds resources, never a victim
}

// Equal reports whether two allocations are the same in every field (for
// a caller working out what changed between snapshots).
func (a *Allocation) Equal(b *Allocation) bool {
	if a.JobID != b.JobID || a.Project != b.Project || a.Pool != b.Pool || a.Priority != b.Priority ||
		a.Resources != b.Resources || !a.StartedAt.Equal(b.StartedAt) || a.Timeout != b.Timeout ||
		a.Preemptible != b.Preemptible || a.Borrowed != b.Borrowed || a.Stopping != b.Stopping || len(a.Nodes) != len(b.Nodes) {
		return false
	}
	for i := range a.Nodes {
		if a.Nodes[i].Node != b.Nodes[i].Node || !slices.Equal(a.Nodes[i].GPUs, b.Nodes[i].GPUs) {
			return false
		}
	}
	return true
}

// Plan is the scheduler's decision for one pass.
type Plan struct {
	Start   []Placement  // in decision order
	Preempt []Preemption // victims to stop; beneficiaries start in a later pass once freed
	// Waiting holds every pending job not started, with why. The entries of
	// one pool are contiguous and in queue order, so a job's position in its
	// pool's queue is 1 + the number of entries of the same pool before it.
	Waiting []Waiting
}

// Placement starts one job on all nodes of its gang.
type Placement struct {
	JobID    int64
	Pool     string
	Nodes    []NodeAlloc // all nodes of the gang, or the job is not placed at all
	Borrowed bool        // above quota, on idle capacity: preemptible for reclaim
}

// Preemption stops one running job to make room for a pending one.
type Preemption struct {
	JobID   int64  // the victim
	For     int64  // the job that needs the room
	Message string // e.g. "preempted for job 42 (priority high) in pool standard"
}

// Waiting says why one pending job does not start in this pass. It carries
// no position: Plan.Waiting keeps each pool's entries contiguous and in
// queue order, so the position is 1 + the number of entries of the same
// pool before it.
type Waiting struct {
	JobID   int64
	Reason  domain.Reason // QuotaExceeded, WaitingForResources, NoCapacity, RetryBackoff
	Message string        // with numbers: "project vision uses 8 of 8 GPUs in pool standard (quota)"
	// EstimatedStart comes from running jobs' StartedAt+Timeout (or the
	// retry backoff); zero when unknown.
	EstimatedStart time.Time
}

// Schedule decides which pending jobs start, which running jobs are
// preempted, and why the others wait. See the package documentation for the
// order of decisions.
func Schedule(s Snapshot, cfg Config) Plan {
	return newPass(s, cfg.withDefaults()).run()
}

// ScheduleIn is Schedule with its working memory in sc, which a caller
// that schedules again and again keeps between passes (see Scratch).
func ScheduleIn(s Snapshot, cfg Config, sc *Scratch) Plan {
	p := newPass(s, cfg.withDefaults())
	p.scratch = sc
	return p.run()
}
