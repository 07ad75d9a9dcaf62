package scheduler

import (
	"time"

	"trainyard/internal/domain"
)

// memoClasses is the number of decision classes per (project, shape):
// priority rank × preemptible × phase.
const memoClasses = 4 * 2 * 2

// memoEntry is the decision for one class of jobs while the pass's state
// is unchanged (poolState.stateVer): jobs of one project, request shape,
// priority, preemptibility and phase that can neither backfill nor be in
// backoff are decided alike, so the tail of a long queue costs a lookup per
// job instead of a decision.
type memoEntry struct {
	ver      int // stateVer+1 when filled; 0: empty
	reason   domain.Reason
	msg      string
	est      time.Time
	resv     bool // append the job's own reservedText to msg
	deferred bool
}

// decideJob is decide with the class memo in front.
func (ps *poolState) decideJob(j *job, allowDefer bool) (placed, deferred bool) {
	if j.rank < 0 || ps.backoff(j) || ps.mayBackfill(j) {
		return ps.decide(j, allowDefer)
	}
	c := ((int(j.proj)*len(ps.q.shapes)+int(j.shape))*4+int(j.rank))*4 + int(j.flags&jobPreemptible)*2
	if allowDefer {
		c++
	}
	m := &ps.memo[c]
	if m.ver == ps.stateVer+1 {
		if m.deferred {
			return false, true
		}
		msg := m.msg
		if m.resv {
			msg += "; " + ps.reservedTextFor(j)
		}
		ps.emit(j, m.reason, msg, m.est)
		return false, false
	}
	ver, before := ps.stateVer, ps.waiting
	ps.resvAppended = false
	placed, deferred = ps.decide(j, allowDefer)
	if placed || ps.stateVer != ver {
		return placed, deferred
	}
	e := memoEntry{ver: ver + 1, deferred: deferred}
	if !deferred {
		if ps.waiting != before+1 {
			return placed, deferred
		}
		e.reason, e.msg, e.est = ps.last.reason, ps.last.msg, ps.last.est
		if ps.resvAppended {
			e.msg, e.resv = ps.resvBase, true
		}
	}
	*m = e
	return placed, deferred
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
	return sh.bfAny && !ps.now.Add(j.timeout).After(sh.bfLatest)
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
