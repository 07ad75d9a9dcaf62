// Package schedtest is the test harness for package scheduler: fluent
// builders for pools, quotas, jobs and allocations, a multi-round runner that
// applies plans to a snapshot and advances a fake clock, an invariant checker
// for plans, and a stable text form of plans for golden files.
package schedtest

import (
	"fmt"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/scheduler"
)

// T0 is the harness's start of time.
var T0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Priority shorthands.
const (
	Low    = domain.PriorityLow
	Normal = domain.PriorityNormal
	High   = domain.PriorityHigh
	Urgent = domain.PriorityUrgent
)

// PoolWrapper builds a domain.Pool.
type PoolWrapper struct{ domain.Pool }

// Pool starts a pool with no nodes, no limits, borrowing and preemption off.
func Pool(name string) *PoolWrapper {
	return &PoolWrapper{domain.Pool{Name: name, Executor: "local"}}
}

// Nodes adds n nodes named <pool>-<i> with gpus GPUs each, 8 CPUs and 64GiB
// per GPU (at least 8 CPUs and 32GiB).
func (p *PoolWrapper) Nodes(n, gpus int) *PoolWrapper {
	for range n {
		p.Node(fmt.Sprintf("%s-%d", p.Name, len(p.Pool.Nodes)), float64(max(8*gpus, 8)), domain.ByteSize(max(64*gpus, 32))<<30, gpus)
	}
	return p
}

// Node adds one node.
func (p *PoolWrapper) Node(name string, cpus float64, mem domain.ByteSize, gpus int) *PoolWrapper {
	n := domain.Node{Name: name, CPUs: cpus, Memory: mem}
	for i := range gpus {
		n.GPUs = append(n.GPUs, i)
	}
	p.Pool.Nodes = append(p.Pool.Nodes, n)
	return p
}

// Borrowing allows borrowing idle capacity above quota.
func (p *PoolWrapper) Borrowing() *PoolWrapper { p.Pool.Borrowing = true; return p }

// Preemption allows preemption.
func (p *PoolWrapper) Preemption() *PoolWrapper { p.Pool.Preemption = true; return p }

// MaxRunning caps concurrently active jobs.
func (p *PoolWrapper) MaxRunning(n int) *PoolWrapper { p.Pool.MaxRunning = n; return p }

// MaxGPUsPerJob caps a job's total GPUs.
func (p *PoolWrapper) MaxGPUsPerJob(n int) *PoolWrapper { p.Pool.MaxGPUsPerJob = n; return p }

// MaxNodesPerJob caps a job's gang size.
func (p *PoolWrapper) MaxNodesPerJob(n int) *PoolWrapper { p.Pool.MaxNodesPerJob = n; return p }

// MaxTimeout caps (and requires) job timeouts.
func (p *PoolWrapper) MaxTimeout(d time.Duration) *PoolWrapper {
	p.Pool.MaxTimeout = domain.Duration(d)
	return p
}

// Priorities restricts accepted priority classes.
func (p *PoolWrapper) Priorities(ps ...domain.Priority) *PoolWrapper {
	p.Pool.Priorities = ps
	return p
}

// Obj returns the pool.
func (p *PoolWrapper) Obj() domain.Pool { return p.Pool }

// QuotaWrapper builds a domain.Quota.
type QuotaWrapper struct{ domain.Quota }

// Quota starts a quota of project in pool with nothing guaranteed.
func Quota(project, pool string) *QuotaWrapper {
	return &QuotaWrapper{domain.Quota{Project: project, Pool: pool}}
}

// GPUs sets the guaranteed GPUs.
func (q *QuotaWrapper) GPUs(n int) *QuotaWrapper { q.Guaranteed.GPUs = n; return q }

// CPUs sets the guaranteed CPUs.
func (q *QuotaWrapper) CPUs(n float64) *QuotaWrapper { q.Guaranteed.CPUs = n; return q }

// Jobs sets the concurrent job limit.
func (q *QuotaWrapper) Jobs(n int) *QuotaWrapper { q.Guaranteed.Jobs = n; return q }

// Borrow sets how many GPUs may be borrowed above the guarantee.
func (q *QuotaWrapper) Borrow(gpus int) *QuotaWrapper { q.Quota.Borrow.GPUs = gpus; return q }

// MaxPriority sets the highest class the project may use.
func (q *QuotaWrapper) MaxPriority(p domain.Priority) *QuotaWrapper {
	q.Quota.MaxPriority = p
	return q
}

// Obj returns the quota.
func (q *QuotaWrapper) Obj() domain.Quota { return q.Quota }

// JobWrapper builds a scheduler.Pending.
type JobWrapper struct{ scheduler.Pending }

// Job starts a normal-priority, single-node job of project "default" in
// pool "standard" with 1 CPU and 1GiB, submitted at T0 + id seconds.
func Job(id int64) *JobWrapper {
	return &JobWrapper{scheduler.Pending{JobID: id, Project: "default", Pool: "standard", Priority: Normal,
		SubmittedAt: T0.Add(time.Duration(id) * time.Second),
		Resources:   domain.Resources{CPUs: 1, Memory: 1 << 30, Nodes: 1}}}
}

// Project sets the project.
func (j *JobWrapper) Project(p string) *JobWrapper { j.Pending.Project = p; return j }

// Pool sets the pool.
func (j *JobWrapper) Pool(p string) *JobWrapper { j.Pending.Pool = p; return j }

// GPUs sets GPUs per node.
func (j *JobWrapper) GPUs(n int) *JobWrapper { j.Resources.GPUs = n; return j }

// CPUs sets CPUs per node.
func (j *JobWrapper) CPUs(n float64) *JobWrapper { j.Resources.CPUs = n; return j }

// Memory sets memory per node.
func (j *JobWrapper) Memory(m domain.ByteSize) *JobWrapper { j.Resources.Memory = m; return j }

// Nodes sets the gang size.
func (j *JobWrapper) Nodes(n int) *JobWrapper { j.Resources.Nodes = n; return j }

// Priority sets the priority class.
func (j *JobWrapper) Priority(p domain.Priority) *JobWrapper { j.Pending.Priority = p; return j }

// Timeout sets the timeout.
func (j *JobWrapper) Timeout(d time.Duration) *JobWrapper { j.Pending.Timeout = d; return j }

// Preemptible marks the job preemptible.
func (j *JobWrapper) Preemptible() *JobWrapper { j.Pending.Preemptible = true; return j }

// Submitted sets the submit time.
func (j *JobWrapper) Submitted(t time.Time) *JobWrapper { j.SubmittedAt = t; return j }

// NotBefore sets a retry backoff.
func (j *JobWrapper) NotBefore(t time.Time) *JobWrapper { j.Pending.NotBefore = t; return j }

// Preempted sets how often the job was preempted.
func (j *JobWrapper) Preempted(n int) *JobWrapper { j.Preemptions = n; return j }

// Obj returns the pending job.
func (j *JobWrapper) Obj() scheduler.Pending { return j.Pending }

// Running turns the job into an allocation started at start on the given
// nodes (see On).
func (j *JobWrapper) Running(start time.Time, nodes ...scheduler.NodeAlloc) scheduler.Allocation {
	return scheduler.Allocation{JobID: j.JobID, Project: j.Pending.Project, Pool: j.Pending.Pool, Priority: j.Pending.Priority,
		Resources: j.Resources, Nodes: nodes, StartedAt: start, Timeout: j.Pending.Timeout, Preemptible: j.Pending.Preemptible}
}

// On names a node and the GPU indices a running job holds there.
func On(node string, gpus ...int) scheduler.NodeAlloc {
	return scheduler.NodeAlloc{Node: node, GPUs: gpus}
}

// Span returns GPU indices from, from+1, ..., from+n-1.
func Span(from, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = from + i
	}
	return s
}
