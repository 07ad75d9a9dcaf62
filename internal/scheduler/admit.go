package scheduler

import (
	"fmt"
	"slices"
	"strings"

	"trainyard/internal/domain"
)

// Admit checks, at submit time, whether a job could ever run in the pool
// under the project's quota (nil quota = no quota): request shape against the
// pool's limits and its largest nodes, priority against the pool's classes
// and the quota's MaxPriority (normal without a quota or when unset), timeout
// against MaxTimeout (which also makes a timeout mandatory), a request above
// the quota's ceiling, a non-preemptible job that would need borrowed
// capacity, and no quota in a pool without borrowing. It returns every
// problem as a field error (paths resources.gpus, resources.cpus,
// resources.memory, resources.nodes, policy.priority, policy.timeout,
// policy.preemptible, pool) whose message says how to fix it. Open says no
// project has a quota in the pool: then every project may run any job there
// (see quotaRule).
func Admit(pool domain.Pool, quota *domain.Quota, open bool, spec domain.Spec) domain.FieldErrors {
	var errs domain.FieldErrors
	r := spec.Resources
	nodes := max(r.Nodes, 1)
	name := pool.Name
	if len(pool.Nodes) == 0 {
		errs.Add("pool", "pool %s has no nodes; choose another pool or ask an admin to add nodes", name)
		return errs
	}
	if r.GPUs < 0 || r.CPUs < 0 || r.Memory < 0 || r.Nodes < 0 {
		errs.Add("resources", "resources must not be negative")
		return errs
	}

	// Shape limits of the pool.
	if pool.MaxGPUsPerJob > 0 && r.GPUs*nodes > pool.MaxGPUsPerJob {
		errs.Add("resources.gpus", "asks for %d GPUs in total (%d per node on %d node(s)); pool %s accepts at most %d per job: lower resources.gpus or resources.nodes, or choose a pool for larger jobs",
			r.GPUs*nodes, r.GPUs, nodes, name, pool.MaxGPUsPerJob)
	}
	if pool.MaxNodesPerJob > 0 && nodes > pool.MaxNodesPerJob {
		errs.Add("resources.nodes", "asks for %d nodes; pool %s accepts at most %d per job: lower resources.nodes or choose another pool",
			nodes, name, pool.MaxNodesPerJob)
	}

	// Capacity: each gang member must fit a distinct node.
	var maxGPU int
	var maxCPU float64
	var maxMem domain.ByteSize
	capable := 0
	for _, n := range pool.Nodes {
		maxGPU, maxCPU, maxMem = max(maxGPU, len(n.GPUs)), max(maxCPU, n.CPUs), max(maxMem, n.Memory)
		if r.GPUs <= len(n.GPUs) && r.CPUs <= n.CPUs+1e-9 && r.Memory <= n.Memory {
			capable++
		}
	}
	shapeOK := true
	if r.GPUs > maxGPU {
		shapeOK = false
		errs.Add("resources.gpus", "asks for %d GPUs per node; the largest node in pool %s has %d: lower resources.gpus (use resources.nodes to spread a job over nodes)", r.GPUs, name, maxGPU)
	}
	if r.CPUs > maxCPU+1e-9 {
		shapeOK = false
		errs.Add("resources.cpus", "asks for %s CPUs per node; the largest node in pool %s has %s: lower resources.cpus", fmtCPU(r.CPUs), name, fmtCPU(maxCPU))
	}
	if r.Memory > maxMem {
		shapeOK = false
		errs.Add("resources.memory", "asks for %s memory per node; the largest node in pool %s has %s: lower resources.memory", r.Memory, name, maxMem)
	}
	if nodes > len(pool.Nodes) {
		errs.Add("resources.nodes", "asks for %d nodes; pool %s has %d: lower resources.nodes", nodes, name, len(pool.Nodes))
	} else if shapeOK && capable < nodes {
		errs.Add("resources.nodes", "asks for %d nodes with %s each; only %d node(s) of pool %s are that large: lower resources.nodes or the per-node request",
			nodes, describe(r), capable, name)
	}

	// Priority.
	rule := newQuotaRule(pool, pool.Capacity(), quota, open)
	if msg, above := priorityProblem(pool, rule, spec.Project, spec.Policy.Priority); above {
		errs.Add("policy.priority", "%s: lower policy.priority or ask an admin to raise the quota's max priority", msg)
	} else if msg != "" {
		errs.Add("policy.priority", "%s", msg)
	}

	// Timeout.
	if mt := pool.MaxTimeout.D(); mt > 0 {
		switch t := spec.Policy.Timeout.D(); {
		case t <= 0:
			errs.Add("policy.timeout", "pool %s requires a timeout of at most %s: set policy.timeout", name, domain.FormatDuration(mt))
		case t > mt:
			errs.Add("policy.timeout", "timeout %s is above the %s pool %s allows: lower policy.timeout", domain.FormatDuration(t), domain.FormatDuration(mt), name)
		}
	}

	// Quota.
	if quota == nil && !open && !pool.Borrowing {
		errs.Add("pool", "project %s has no quota in pool %s and the pool does not allow borrowing: ask an admin for a quota or choose another pool", spec.Project, name)
		return errs
	}
	need := gangLimits(r)
	if rule.open {
		// Its ceiling is the pool's capacity: a job that fits each of the
		// nodes it asks for fits their sum, so the checks of the job's
		// shape above said whatever there is to say.
		return errs
	}
	if !rule.ceiling.within(need) {
		dim := exceededDim(rule.ceiling, need)
		errs.Add(quotaPath(dim), "needs %s %s in total; project %s may use at most %s in pool %s (%s): lower the request or ask an admin for a larger quota",
			fmtAmount(dim, need), dimName(dim), spec.Project, fmtAmount(dim, rule.ceiling), name, rule.ceilingText())
	} else if !rule.guaranteed.within(need) && !spec.Policy.Preemptible {
		dim := exceededDim(rule.guaranteed, need)
		errs.Add("policy.preemptible", "needs %s %s but project %s is guaranteed %s in pool %s, so it can only run on borrowed capacity, which requires a preemptible job: set policy.preemptible: true or lower the request",
			fmtAmount(dim, need), dimName(dim), spec.Project, fmtAmount(dim, rule.guaranteed), name)
	}
	return errs
}

// AdmitPriority checks a priority class for a job of project in the pool
// under the project's quota (nil quota = no quota; open as for Admit):
// the class must exist, be one the pool accepts, and be no higher than
// the quota's MaxPriority (normal without a quota or when unset). It
// returns "" when the class is allowed, else what is wrong with it (the
// caller says how to fix it); above says the class exists and the pool
// takes it, but the project may not use it. Admit applies the same rule
// at submit; a priority change of a waiting job applies it again.
func AdmitPriority(pool domain.Pool, quota *domain.Quota, open bool, project string, prio domain.Priority) (msg string, above bool) {
	return priorityProblem(pool, newQuotaRule(pool, pool.Capacity(), quota, open), project, prio)
}

// priorityProblem is AdmitPriority's check.
func priorityProblem(pool domain.Pool, rule quotaRule, project string, prio domain.Priority) (msg string, above bool) {
	if prio == "" {
		prio = domain.PriorityNormal
	}
	rank := prio.Rank()
	switch {
	case rank < 0:
		return fmt.Sprintf("%q is not a priority class; use one of low, normal, high, urgent", prio), false
	case len(pool.Priorities) > 0 && !slices.Contains(pool.Priorities, prio):
		return fmt.Sprintf("pool %s does not accept priority %s; use one of %s", pool.Name, prio, joinPriorities(pool.Priorities)), false
	case rank > rule.maxRank:
		return fmt.Sprintf("priority %s is above what project %s may use in pool %s (at most %s)",
			prio, project, pool.Name, domain.Priorities()[rule.maxRank]), true
	}
	return "", false
}

func joinPriorities(ps []domain.Priority) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = string(p)
	}
	return strings.Join(s, ", ")
}

func quotaPath(dim int) string {
	switch dim {
	case dimCPUs:
		return "resources.cpus"
	case dimMem:
		return "resources.memory"
	case dimJobs:
		return "pool"
	}
	return "resources.gpus"
}

// Dimensions of limits, in the order messages report them.
const (
	dimGPUs = iota
	dimCPUs
	dimMem
	dimJobs
)

func dimName(d int) string {
	return [...]string{"GPUs", "CPUs", "memory", "jobs"}[d]
}

// exceededDim returns the first dimension in which t goes above l.
func exceededDim(l, t limits) int {
	switch {
	case t.gpus > l.gpus:
		return dimGPUs
	case t.cpus > l.cpus+1e-9:
		return dimCPUs
	case t.mem > l.mem:
		return dimMem
	default:
		return dimJobs
	}
}

// fmtAmount writes one dimension of l.
func fmtAmount(dim int, l limits) string {
	switch dim {
	case dimGPUs:
		return fmt.Sprint(l.gpus)
	case dimCPUs:
		return fmtCPU(l.cpus)
	case dimMem:
		return domain.ByteSize(l.mem).String()
	}
	return fmt.Sprint(l.jobs)
}

func describe(r domain.Resources) string {
	s := fmt.Sprintf("%s CPUs, %s memory", fmtCPU(r.CPUs), r.Memory)
	if r.GPUs > 0 {
		s = fmt.Sprintf("%d GPUs, ", r.GPUs) + s
	}
	return s
}

func fmtCPU(c float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", c), "0"), ".")
}
