package scheduler

import (
	"time"

	"trainyard/internal/domain"
)

// memoClasses is the number of decision classes per (project, shape):
// priority rank × preemptible × phase.
const memoClasses = 4 * 2 * 2

// memoEntry points a class of jobs at the decision last made for one of
// them: jobs of one project, request shape, priority, preemptibility and
// phase that can neither backfill nor be in backoff are decided alike, so
// the tail of a long queue costs a lookup per job instead of a decision.
// Entries are small so that the whole table stays in cache.
type memoEntry struct {
	ver int32 // poolState.stateVer+1 when last known valid; 0: empty
	dec int32 // index into poolState.decs
}

// Kinds of decision, by what they depend on.
const (
	// kindState depends on the whole pool state: valid until stateVer moves.
	kindState = iota
	// kindStatic depends only on the pool's definition, the project's quota
	// and the scheduler's config: the pool never holds the shape, does not
	// accept the priority, or the quota forbids it.
	kindStatic
	// kindCapped: the pool's running cap is reached. Running only grows
	// within a pass, so it holds for the rest of the pass; the message
	// names the running count, which a later pass compares.
	kindCapped
	// kindQuota depends only on the project's use, on its stopping jobs,
	// on whether preemption budget is left and on the running cap not being
	// reached; and on whether the project has jobs it could stop for this
	// one. One that rests on a failed search among such jobs depends on
	// node state as well, so it lasts only until a victim is chosen and is
	// never carried to a later pass (see stillValid).
	kindQuota
)

// decision is one memoised outcome, with what it was decided on.
type decision struct {
	reason   domain.Reason
	msg      string
	est      time.Time
	resv     bool // append the job's own reservedText to msg
	deferred bool
	kind     uint8
	// searched: the outcome rests on preemptOwn failing while the project
	// had eligible victims; such a failure depends on node state, so only
	// this pass may reuse it.
	searched bool
	// bounded: the outcome rests on preemptOwn failing because all the
	// project's jobs it could stop for this one (boundN of them, holding
	// bound) could not make room on any node: it holds while they are the
	// same, whatever the nodes' state (see ownBound).
	bounded bool
	boundN  int
	bound   deficit
	// noVictims: the outcome rests on the project having no job it could
	// stop for this one (preemptOwn found none to search), which a later
	// pass checks again.
	noVictims bool
	budget    bool   // preemption budget was left (kindQuota)
	dep       uint8  // poolState.dep when it was made
	pass      int    // the pass that last confirmed it (queue.pass)
	usedVer   int    // kindQuota, within pass: the project's usedVer
	stopVer   int    // kindQuota, within pass: see quotaStopVer
	used      limits // kindQuota, in later passes: the project's use
	claimed   limits // kindQuota, in later passes: what its waiting jobs held
	claimBy   int64  // kindQuota, in later passes: the first of them (messages name it)
	usedFrom  limits // kindQuota, in later passes: its use at the job's priority or above
	stop      limits // kindQuota, in later passes: its stopping jobs' total
	running   int    // kindCapped, in later passes: the pool's running count
}

// memoOff turns the memo off (tests only: see SetMemo).
var memoOff bool

// decideJob is decide with the class memo in front.
func (ps *poolState) decideJob(j *job, allowDefer bool) (placed, deferred bool) {
	if memoOff || j.rank < 0 || ps.backoff(j) || ps.mayBackfill(j) {
		ps.fresh = true
		return ps.decide(j, allowDefer)
	}
	m := &ps.memo[ps.memoIndex(j, allowDefer)]
	if v := int32(ps.stateVer + 1); m.ver == v || m.ver != 0 && ps.stillValid(j, &ps.decs[m.dec]) {
		if m.ver != v && ps.vlog != nil {
			ps.logClass(ps.memoIndex(j, allowDefer), &ps.decs[m.dec])
		}
		m.ver = v
		d := &ps.decs[m.dec]
		ps.dep = d.dep
		if d.deferred {
			return false, true
		}
		ps.emitDecision(j, d)
		return false, false
	}
	ver, before := ps.stateVer, ps.waiting
	ps.resvAppended, ps.kind, ps.searched, ps.lookedForOwn, ps.bounded = false, kindState, false, false, false
	ps.fresh = true
	placed, deferred = ps.decide(j, allowDefer)
	if placed || ps.stateVer != ver {
		return placed, deferred
	}
	d := decision{deferred: deferred, kind: ps.kind, pass: ps.q.pass, dep: ps.dep}
	if !deferred {
		if ps.waiting != before+1 {
			return placed, deferred
		}
		d.reason, d.msg, d.est = ps.last.reason, ps.last.msg, ps.last.est
		if ps.resvAppended {
			d.msg, d.resv = ps.resvBase, true
		}
	}
	switch d.kind {
	case kindCapped:
		d.running = ps.running
	case kindQuota:
		pr := ps.pr(j)
		d.budget, d.searched = ps.budget > 0, ps.searched
		d.usedVer, d.stopVer, d.used, d.stop = pr.usedVer, ps.quotaStopVer(pr, d.searched), pr.used, ps.ownStopping(pr)
		d.claimed, d.claimBy, d.usedFrom = pr.claimed, pr.claimBy, pr.usedFrom(int(j.rank))
		d.noVictims = ps.lookedForOwn && !ps.searched && !ps.bounded
		d.bounded, d.boundN, d.bound = ps.bounded, ps.boundN, ps.bound
	}
	// Each entry owns one decision slot: a refill overwrites it.
	if m.ver != 0 {
		ps.decs[m.dec] = d
	} else {
		m.dec = int32(len(ps.decs))
		ps.decs = append(ps.decs, d)
	}
	m.ver = int32(ver + 1)
	if ps.vlog != nil {
		ps.logClass(ps.memoIndex(j, allowDefer), &ps.decs[m.dec])
	}
	return placed, deferred
}

// emitDecision emits the job's waiting entry from its class decision.
func (ps *poolState) emitDecision(j *job, d *decision) {
	if !d.resv {
		ps.emit(j, d.reason, d.msg, d.est)
		return
	}
	ps.emit(j, d.reason, d.msg+"; "+ps.reservedTextFor(j), d.est)
}

// quotaStopVer is the version of stopping jobs a quota decision depends
// on: any victim chosen anywhere in the pool, for one resting on a failed
// search of the project's own victims (stopping capacity counts as room on
// every node); else only the project's own jobs starting to stop (its
// stopping total, and whether it has jobs to stop), with the budget left
// checked on its own.
func (ps *poolState) quotaStopVer(pr *projState, searched bool) int {
	if searched {
		return ps.stopVersion
	}
	return pr.stopVer
}

// memoIndex is the job's class in ps.memo: (project, shape, priority
// rank, preemptible, phase).
func (ps *poolState) memoIndex(j *job, allowDefer bool) int {
	c := (int(j.proj)*len(ps.q.shapes)*8 + int(j.cls)) * 2
	if allowDefer {
		c++
	}
	return c
}

// stillValid reports whether a decision made at an earlier state — of this
// pass, or of an earlier pass over the same pool definition, quotas and
// config (see Queues) — holds at this one, and if so marks it
// confirmed by this pass.
func (ps *poolState) stillValid(j *job, d *decision) bool {
	switch d.kind {
	case kindStatic:
		return true
	case kindCapped:
		if d.pass == ps.q.pass {
			return true
		}
		if ps.running != d.running {
			return false
		}
	case kindQuota:
		if ps.pool.MaxRunning > 0 && ps.running >= ps.pool.MaxRunning {
			return false
		}
		pr := ps.pr(j)
		if d.pass == ps.q.pass {
			return pr.usedVer == d.usedVer && ps.quotaStopVer(pr, d.searched) == d.stopVer && d.budget == (ps.budget > 0)
		}
		// What the project's waiting jobs claim (and who claims first, as
		// messages name it) must be as when the decision was made.
		if d.searched || pr.used != d.used || pr.claimed != d.claimed || d.usedFrom != pr.usedFrom(int(j.rank)) || pr.claimBy != d.claimBy || d.budget != (ps.budget > 0) || ps.ownStopping(pr) != d.stop ||
			d.noVictims && ps.hasOwnVictims(pr, int(j.rank)) || d.bounded && !d.sameBound(pr, int(j.rank)) {
			return false
		}
		d.usedVer, d.stopVer = pr.usedVer, ps.quotaStopVer(pr, false)
	default:
		return false
	}
	d.pass = ps.q.pass
	return true
}

// mayBackfill reports whether the job's timeout could let it use reserved
// capacity (fit's backfill): only then does its timeout change the decision.
func (ps *poolState) mayBackfill(j *job) bool {
	if j.timeout <= 0 || len(ps.reserved) == 0 {
		return false
	}
	sh := ps.sh(j)
	if sh.bfVer != ps.stateVer+1 {
		// The latest reservation start among the reserved nodes the shape
		// could backfill onto; node state changes only with stateVer.
		sh.bfVer, sh.bfAny, sh.bfLatest = ps.stateVer+1, false, time.Time{}
		r := sh.key.r
		for _, n := range ps.reserved {
			if !n.resvBlocked && n.fitsRaw(r) && !n.fitsAvail(r) && (!sh.bfAny || n.resvStart.After(sh.bfLatest)) {
				sh.bfAny, sh.bfLatest = true, n.resvStart
			}
		}
	}
	return sh.bfAny && ps.endsBy(j.timeout, sh.bfLatest)
}

// rtKey identifies a reservedText within one state of the pass.
type rtKey struct {
	rank    int
	timeout time.Duration // ≤ 0: 0
}

// reservedTextFor is reservedText, shared by jobs of the same priority and
// timeout while the pass's state is unchanged.
func (ps *poolState) reservedTextFor(j *job) string {
	if ps.rtVer != ps.stateVer+1 {
		clear(ps.rtCache)
		ps.rtVer = ps.stateVer + 1
	}
	k := rtKey{rank: int(j.rank), timeout: max(j.timeout, 0)}
	if t, ok := ps.rtCache[k]; ok {
		return t
	}
	t := ps.reservedText(ps.pd(j))
	if ps.rtCache == nil {
		ps.rtCache = map[rtKey]string{}
	}
	ps.rtCache[k] = t
	return t
}

// sameBound reports whether the project's jobs that a bounded decision
// rests on are as when it was made (same count and sum: preemptOwn's bound
// fails again).
func (d *decision) sameBound(pr *projState, rank int) bool {
	n, all := ownBound(pr, rank)
	return n == d.boundN && all == d.bound
}
