package scheduler

import (
	"math"
	"slices"

	"trainyard/internal/domain"
)

// limits is an amount of resources in the units the scheduler adds up.
type limits struct {
	gpus int
	cpus float64
	mem  float64 // bytes, as float so that "unlimited" is +Inf
	jobs int
}

const unlimitedJobs = math.MaxInt / 2

// quotaRule is one project's effective quota in one pool:
//
//   - With a quota, Guaranteed GPUs are literal; Guaranteed CPUs or memory of
//     0 mean "not limited in that dimension", and Jobs 0 means no job-count
//     limit. Borrowing is possible when the pool allows it and Borrow has a
//     non-zero field; the ceiling is then Guaranteed+Borrow per dimension
//     (a dimension not limited by Guaranteed stays unlimited).
//   - Without a quota, the guarantee is zero in every dimension, and with
//     pool borrowing on, the ceiling is the whole pool.
//   - In an open pool (no project has a quota there: a fresh install's
//     default pool until an admin sets quotas) every project is
//     guaranteed the whole pool, may use every priority, and the projects
//     share it by fair share as one queue (see victimFor).
type quotaRule struct {
	has        bool
	open       bool // no project has a quota in the pool: the ceiling is its capacity
	guaranteed limits
	ceiling    limits
	canBorrow  bool
	maxRank    int // highest priority rank the project may use
}

func newQuotaRule(pool domain.Pool, capa domain.Limits, q *domain.Quota, open bool) quotaRule {
	if q == nil && open {
		all := limits{gpus: capa.GPUs, cpus: capa.CPUs, mem: float64(capa.Memory), jobs: unlimitedJobs}
		return quotaRule{has: true, open: true, guaranteed: all, ceiling: all, maxRank: domain.PriorityUrgent.Rank()}
	}
	if q == nil {
		r := quotaRule{maxRank: domain.PriorityNormal.Rank()}
		if pool.Borrowing {
			r.canBorrow = true
			r.ceiling = limits{gpus: capa.GPUs, cpus: capa.CPUs, mem: float64(capa.Memory), jobs: unlimitedJobs}
		}
		return r
	}
	r := quotaRule{has: true, maxRank: q.MaxPriority.Rank()}
	if q.MaxPriority == "" || r.maxRank < 0 {
		r.maxRank = domain.PriorityNormal.Rank()
	}
	g := q.Guaranteed
	r.guaranteed = limits{gpus: max(g.GPUs, 0), cpus: g.CPUs, mem: float64(g.Memory), jobs: g.Jobs}
	if g.CPUs <= 0 {
		r.guaranteed.cpus = math.Inf(1)
	}
	if g.Memory <= 0 {
		r.guaranteed.mem = math.Inf(1)
	}
	if g.Jobs <= 0 {
		r.guaranteed.jobs = unlimitedJobs
	}
	r.ceiling = r.guaranteed
	b := q.Borrow
	if pool.Borrowing && (b.GPUs > 0 || b.CPUs > 0 || b.Memory > 0 || b.Jobs > 0) {
		r.canBorrow = true
		r.ceiling.gpus += max(b.GPUs, 0)
		r.ceiling.cpus += max(b.CPUs, 0)
		r.ceiling.mem += float64(max(b.Memory, 0))
		if r.ceiling.jobs != unlimitedJobs {
			r.ceiling.jobs += max(b.Jobs, 0)
		}
	}
	return r
}

// within reports whether use fits under l in every dimension.
func (l limits) within(use limits) bool {
	return use.gpus <= l.gpus && use.cpus <= l.cpus+1e-9 && use.mem <= l.mem && use.jobs <= l.jobs
}

// fitsBeside reports whether need fits under l beside used and claimed:
// in every dimension need asks for, used, claimed and need together fit
// (in one it does not ask for, taking nothing, it cannot take a claim's
// room, so only used must fit there).
func (l limits) fitsBeside(used, claimed, need limits) bool {
	use := used.plus(need)
	if !l.within(use) {
		return false
	}
	return (need.gpus == 0 || use.gpus+claimed.gpus <= l.gpus) &&
		(need.cpus == 0 || use.cpus+claimed.cpus <= l.cpus+1e-9) &&
		(need.mem == 0 || use.mem+claimed.mem <= l.mem) &&
		(need.jobs == 0 || use.jobs+claimed.jobs <= l.jobs)
}

func (l limits) plus(o limits) limits {
	return limits{gpus: l.gpus + o.gpus, cpus: l.cpus + o.cpus, mem: l.mem + o.mem, jobs: l.jobs + o.jobs}
}

func (l limits) minus(o limits) limits {
	return limits{gpus: l.gpus - o.gpus, cpus: l.cpus - o.cpus, mem: l.mem - o.mem, jobs: l.jobs - o.jobs}
}

// gangLimits is the whole-gang demand of a per-node request, counting one job.
func gangLimits(r domain.Resources) limits {
	n := max(r.Nodes, 1)
	return limits{gpus: r.GPUs * n, cpus: r.CPUs * float64(n), mem: float64(r.Memory) * float64(n), jobs: 1}
}

// ceilingText names what bounds a project's use, for messages.
func (r quotaRule) ceilingText() string {
	switch {
	case !r.has && r.canBorrow:
		return "no quota; borrowing idle capacity"
	case !r.has:
		return "no quota"
	case r.canBorrow:
		return "quota + borrow"
	default:
		return "quota"
	}
}

// markBorrowed decides, from the current allocation, which running jobs
// are borrowed: for each project, its running jobs that are not stopping,
// by priority (highest first), then start time (earliest first), then id,
// fill its guarantee first-fit; those that do not fit are borrowed. So
// "borrowed" never depends on the order jobs arrived in: a project back
// under its guarantee has no borrowed job left, and only borrowed jobs of
// another project may be reclaimed or preempted for it (as in Kueue, where
// capacity inside a ClusterQueue's nominal quota is reclaimed only by that
// queue's own workloads). The snapshot's Allocation.Borrowed is ignored.
func (ps *poolState) markBorrowed() {
	for _, pr := range ps.projs {
		ps.markProject(pr)
	}
}

// markProject is markBorrowed for one project; nodes whose jobs change
// sides have their victim bounds recomputed.
func (ps *poolState) markProject(pr *projState) {
	order := ps.markBuf[:0]
	pr.borrowedHolders = 0
	for _, h := range pr.holders {
		if !h.stopping {
			order = append(order, h)
		}
	}
	// Higher priority first, then earlier start, then id (comparisons
	// short-circuited: every pass sorts every project's jobs).
	slices.SortFunc(order, func(a, b *holder) int {
		if a.rank != b.rank {
			return compareInt(b.rank, a.rank)
		}
		if c := a.start.Compare(b.start); c != 0 {
			return c
		}
		return compareInt64(a.id, b.id)
	})
	var fill limits
	for _, h := range order {
		was := h.borrowed
		h.unentitled = !pr.rule.guaranteed.within(h.gang)
		if next := fill.plus(h.gang); pr.rule.guaranteed.within(next) {
			fill, h.borrowed = next, false
		} else {
			h.borrowed = true
			pr.borrowedHolders++
		}
		if h.borrowed != was {
			for _, n := range h.nodes {
				n.boundOK = false
				ps.touch(n, true)
			}
		}
	}
	ps.markBuf = order
}

// claim counts need against the project's quota for the rest of the pass,
// for a job that waits with room reserved for it.
func (ps *poolState) claim(j *job, pr *projState, need limits) {
	pr.claimed = pr.claimed.plus(need)
	if pr.claimBy == 0 {
		pr.claimBy = j.id
	}
	pr.usedVer++
	pr.msgs = nil
	ps.stateVer++
}

// usedFrom is what the project's running jobs (not stopping) and this
// pass's placements of priority rank or higher use (all of them for an
// unknown rank).
func (pr *projState) usedFrom(rank int) limits {
	if rank < 0 {
		rank = 0
	}
	var u limits
	for r := rank; r < len(pr.usedByRank); r++ {
		u = u.plus(pr.usedByRank[r])
	}
	return u
}

// addUse adds (or, with sign -1, removes) a holder's use at its rank.
func (pr *projState) addUse(h *holder, sign int) {
	r := min(max(h.rank, 0), len(pr.usedByRank)-1)
	if sign > 0 {
		pr.usedByRank[r] = pr.usedByRank[r].plus(h.gang)
	} else {
		pr.usedByRank[r] = pr.usedByRank[r].minus(h.gang)
	}
}

// holdQuota makes the project's first job blocked by its own quota ceiling
// hold the quota it needs, if it could ever have it: later, smaller jobs of
// the project may then use only what is left beside it, so it starts once
// the project's running jobs have freed enough (they end within their
// timeouts), instead of waiting behind a stream of small jobs for ever.
func (ps *poolState) holdQuota(j *job, pr *projState, need limits) {
	if pr.held || !pr.rule.ceiling.within(need) {
		return
	}
	pr.held = true
	ps.claim(j, pr, need)
}
