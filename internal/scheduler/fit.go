package scheduler

// Deciding one job: whether it fits (its pool, its project's quota, the
// nodes), where it starts, and why it waits when it does not.

import (
	"slices"
	"time"

	"trainyard/internal/domain"
)

// decide places one job or says why it waits; it reports whether the job
// started, or, with allowDefer, whether it needs borrowed capacity and is
// left for the second phase.
func (ps *poolState) decide(j *job, allowDefer bool) (placed, deferred bool) {
	pr, sh := ps.pr(j), ps.sh(j)
	// Until a branch below says otherwise, the outcome may rest on the
	// pool's state (see poolState.dep).
	ps.dep, ps.searched = depPool, false
	if ps.backoff(j) {
		nb := ps.pd(j).NotBefore
		ps.dep = depLocal
		ps.wait(j, domain.ReasonBackoff, backoffMessage(nb), nb)
		return false, false
	}
	r, k := sh.key.r, sh.key.k
	ps.kind = kindStatic
	if msg := ps.static(j); msg != "" {
		ps.dep = depLocal
		ps.wait(j, domain.ReasonNoCapacity, msg, time.Time{})
		return false, false
	}
	rank := int(j.rank)
	if rank > pr.rule.maxRank {
		ps.dep = depLocal
		ps.wait(j, domain.ReasonQuotaExceeded, ps.priorityMessage(ps.pd(j), pr), time.Time{})
		return false, false
	}
	if m := ps.pool.MaxRunning; m > 0 && ps.running >= m {
		ps.kind = kindCapped
		ps.wait(j, domain.ReasonWaitingForCapacity, ps.maxRunningMessage(), time.Time{})
		return false, false
	}
	ps.kind = kindQuota
	need := sh.need
	after := pr.used.plus(need)
	// The job must fit its project's ceiling; one that may not borrow (not
	// preemptible) must fit its guarantee.
	claimed := pr.claimed
	overCeiling := !pr.rule.ceiling.fitsBeside(pr.used, claimed, need)
	borrowed := !pr.rule.guaranteed.fitsBeside(pr.usedFrom(rank), claimed, need)
	if overCeiling || borrowed && !j.preemptible() {
		lim := pr.rule.ceiling
		if !j.preemptible() {
			lim = pr.rule.guaranteed
		}
		if lim.within(after) {
			// Only the project's waiting jobs stand in the way.
			ps.dep = depLocal
			ps.wait(j, domain.ReasonQuotaExceeded, ps.claimedMessage(pr, need, lim, claimed), time.Time{})
			return false, false
		}
		if ps.pool.Preemption {
			// The project's own stopping jobs will free quota: wait for them.
			// It holds the room they leave, as it would once they are gone,
			// so that no later job takes it meanwhile.
			if stop := ps.ownStopping(pr); stop.jobs > 0 && lim.within(after.minus(stop)) {
				ps.kind = kindState // whether room is held depends on the nodes
				if nodes := ps.fitAfterStops(sh); nodes != nil {
					ps.reserve(j.id, rank, r, nodes, time.Time{})
					ps.claim(j, pr, need)
				}
				ps.wait(j, domain.ReasonWaitingForCapacity, stoppingMessage(stop.jobs, false), time.Time{})
				return false, false
			}
			// Higher priority may preempt the project's own lower-priority
			// work: as much as brings the job within lim, so that it can
			// run once the victims are gone (a non-preemptible job freed
			// only below the ceiling would still not run, and its victims
			// would start again and be preempted again).
			if ps.budget > 0 {
				if victims, nodes := ps.preemptOwn(j, after.minus(lim)); nodes != nil {
					if ps.stopVictims(ps.pd(j), victims) == 0 && ps.pr(j).rule.ceiling.fitsBeside(pr.used, pr.claimed, need) {
						if nodes := ps.fit(sh, j.timeout); nodes != nil {
							ps.place(ps.pd(j), pr, r, nodes, !pr.rule.guaranteed.fitsBeside(pr.usedFrom(rank), pr.claimed, need))
							return true, false
						}
					}
					ps.reserve(j.id, rank, r, nodes, time.Time{})
					ps.claim(j, pr, need)
					ps.wait(j, domain.ReasonWaitingForCapacity, stoppingMessage(len(victims), true), time.Time{})
					return false, false
				}
			}
		}
		// What follows reads only the project and the budget, and the
		// nodes of the project's own jobs when it searched them.
		ps.dep = depLocal
		if ps.searched {
			ps.dep = depSearch
		}
		if !overCeiling {
			ps.wait(j, domain.ReasonQuotaExceeded, ps.quotaMessage(pr, need, pr.rule.guaranteed, false, true), time.Time{})
			return false, false
		}
		msg := ps.quotaMessage(pr, need, pr.rule.ceiling, pr.rule.canBorrow, false)
		if pr.rule.ceiling.within(after) {
			// Over the ceiling only with what the project's waiting jobs
			// hold, and the job may not borrow (a preemptible one was told
			// of those jobs above): its guarantee is what stops it.
			msg = ps.quotaMessage(pr, need, pr.rule.guaranteed, false, true)
		}
		ps.holdQuota(j, pr, need)
		ps.wait(j, domain.ReasonQuotaExceeded, msg, time.Time{})
		return false, false
	}
	if borrowed && allowDefer {
		ps.dep = depLocal
		return false, true
	}
	ps.kind = kindState
	if nodes := ps.fit(sh, j.timeout); nodes != nil {
		ps.place(ps.pd(j), pr, r, nodes, borrowed)
		return true, false
	}
	if nodes := ps.fitAfterStops(sh); nodes != nil {
		n := countStopping(nodes, r)
		ps.reserve(j.id, rank, r, nodes, time.Time{})
		ps.claim(j, pr, need)
		ps.wait(j, domain.ReasonWaitingForCapacity, stoppingMessage(n, false), time.Time{})
		return false, false
	}
	if ps.pool.Preemption && ps.budget > 0 {
		if victims, nodes := ps.preempt(ps.pd(j), pr, r, k, borrowed, rank); nodes != nil {
			if ps.stopVictims(ps.pd(j), victims) == 0 {
				if nodes := ps.fit(sh, j.timeout); nodes != nil {
					ps.place(ps.pd(j), pr, r, nodes, borrowed)
					return true, false
				}
			}
			ps.reserve(j.id, rank, r, nodes, time.Time{})
			ps.claim(j, pr, need)
			ps.wait(j, domain.ReasonWaitingForCapacity, stoppingMessage(countStopping(nodes, r), true), time.Time{})
			return false, false
		}
	}
	msg := ps.capacityMessage(j, sh)
	var est time.Time
	if ps.capacityHolds < ps.cfg.ReservationsPerPool {
		var nodes []*nodeState
		nodes, est = ps.estimate(r, k)
		if nodes != nil {
			ps.capacityHolds++
			ps.reserve(j.id, rank, r, nodes, est)
			// The quota it will use is held too, or the project's own
			// smaller jobs would take it and leave the reservation useless.
			ps.claim(j, pr, need)
		}
	}
	ps.wait(j, domain.ReasonWaitingForCapacity, msg, est)
	return false, false
}

func (ps *poolState) wait(j *job, reason domain.Reason, msg string, est time.Time) {
	ps.last = decision{reason: reason, msg: msg, est: est}
	ps.emit(j, reason, msg, est)
}

// emit appends the job's waiting entry.
func (ps *poolState) emit(j *job, reason domain.Reason, msg string, est time.Time) {
	ps.waiting++
	ps.plan.Waiting = append(ps.plan.Waiting, Waiting{JobID: j.id, Reason: reason, Message: msg, EstimatedStart: est})
}

func (ps *poolState) place(j *Pending, pr *projState, r req, nodes []*nodeState, borrowed bool) {
	h := &holder{id: j.JobID, project: j.Project, rank: j.Priority.Rank(), res: r, gang: gangLimits(j.Resources),
		start: ps.now, preemptible: j.Preemptible, borrowed: borrowed, placed: true, nodes: nodes, seq: len(ps.holders)}
	ps.nowR.flows = true // the job's start and end are the time
	for _, n := range nodes {
		ps.touch(n, j.Preemptible)
	}
	h.unentitled = !pr.rule.guaranteed.within(h.gang)
	if j.Timeout > 0 {
		h.end = ps.now.Add(j.Timeout)
	}
	pl := Placement{JobID: j.JobID, Pool: ps.pool.Name, Nodes: make([]NodeAlloc, len(nodes)), Borrowed: borrowed}
	for i, n := range nodes {
		pl.Nodes[i] = NodeAlloc{Node: n.name, GPUs: n.take(r)}
		n.holders = append(n.holders, h)
		ps.ix.move(n)
	}
	ps.holders = append(ps.holders, h)
	ps.running++
	pr.holders = append(pr.holders, h)
	pr.used = pr.used.plus(h.gang)
	pr.addUse(h, 1)
	pr.usedVer++
	if j.Preemptible {
		pr.stopVer++ // a new job it may stop for its own (hasOwnVictims)
	}
	if !borrowed && !pr.rule.guaranteed.within(pr.used) {
		// A job of higher priority than some of the project's running
		// jobs now fills its guarantee: they are borrowed from now on, in
		// this pass as in the next, which can therefore reclaim nothing
		// this one could not.
		ps.markProject(pr)
	}
	h.cost = costRate(ps.capa, j.Resources)
	pr.alloc += h.cost
	pr.msgs = nil
	ps.version++
	ps.stateVer++
	ps.plan.Start = append(ps.plan.Start, pl)
}

// countStopping counts distinct stopping holders on the nodes that need
// them to stop before r fits.
func countStopping(nodes []*nodeState, r req) int {
	var ids []int64
	for _, n := range nodes {
		if n.fitsAvail(r) {
			continue
		}
		for _, h := range n.holders {
			if h.stopping && !slices.Contains(ids, h.id) {
				ids = append(ids, h.id)
			}
		}
	}
	return len(ids)
}

// static reports why the pool could never hold the job, or "".
func (ps *poolState) static(j *job) string {
	if !ps.accepted(j) {
		return ps.priorityNotAccepted(ps.pd(j))
	}
	sh := ps.sh(j)
	r, k := sh.key.r, sh.key.k
	if sh.capable < 0 {
		sh.capable = 0
		for _, n := range ps.nodes {
			if n.fitsEmpty(r) {
				sh.capable++
			}
		}
	}
	if sh.capable >= k && (ps.pool.MaxGPUsPerJob <= 0 || r.g*k <= ps.pool.MaxGPUsPerJob) &&
		(ps.pool.MaxNodesPerJob <= 0 || k <= ps.pool.MaxNodesPerJob) {
		return ""
	}
	return ps.neverFitsMessage(r, k, sh.capable)
}
