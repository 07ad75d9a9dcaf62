package scheduler

// Pool reuse: a told pass over kept queues takes a pool's part of the
// previous plan, instead of walking the pool, when nothing its walk reads
// changed.
//
// Why that is exact. Pools share nothing but the pass's preemption budget
// (and the order of the plan's lists, pools in name order): a pool's walk
// reads its queue, its running jobs, its definition and quotas, the
// projects' shares, usage, the config, the time and the budget left when
// it starts, and writes its own entries to the plan and what it spends of
// the budget. With all of these as when it last walked (the time within
// the span its comparisons hold for), it would decide the same again, so
// its entries are the previous plan's, and it leaves the budget where it
// did. A submit to one pool thus walks that pool only, however long the
// queues of the others.

import (
	"slices"
	"time"
)

// poolOut is where a pool's entries are in the plan of the pass that last
// decided it (walked or reused), and what they rest on besides the inputs
// compared for every pool.
type poolOut struct {
	pass                int64 // Queues.passes of that pass
	start, nStart       int   // its placements: Plan.Start[start:start+nStart]
	preempt, nPreempt   int
	wait, nWait         int
	budgetIn, budgetOut int       // preemption budget left before and after it
	now                 time.Time // the time it walked at
	nowR                nowRange  // what its walk rests on of the time
}

// sameShared reports whether what every pool's walk reads besides its
// own inputs is as the previous pass had it: the config, the projects'
// shares and usage, and a time of the same zone (the time itself is
// judged per pool).
func (qs *Queues) sameShared(s *Snapshot, cfg Config) bool {
	l := &qs.last
	var zero time.Time
	return l.ok && cfg == l.cfg && zero.Before(s.Now) && s.Now.Location() == l.now.Location() &&
		slices.Equal(s.Projects, l.projects) && slices.Equal(s.Usage, l.usage)
}

// runningPools lists the pools of the running jobs named in changed, as
// the previous pass had them and as this one does (running in id order).
func (qs *Queues) runningPools(running []*Allocation, changed []int64) []string {
	var out []string
	add := func(pool string) {
		if !slices.Contains(out, pool) {
			out = append(out, pool)
		}
	}
	l := &qs.last
	for _, id := range changed {
		if x, was := slices.BinarySearch(l.running, id); was {
			add(l.runPools[x])
		}
		if x, is := slices.BinarySearchFunc(running, id, func(a *Allocation, id int64) int { return compareInt64(a.JobID, id) }); is {
			add(running[x].Pool)
		}
	}
	return out
}

// reuse appends q's pool's entries from prev, the previous pass's plan, to
// this pass's plan, or reports false (the pool then walks). The caller has
// checked the pool's definition, quotas and running jobs and what all
// pools share.
func (p *pass) reuse(q *queue, prev *Plan) bool {
	o := &q.out
	now := p.s.Now
	if o.pass == 0 || o.pass != p.qs.passes-1 || q.dirty || o.budgetIn != p.budget || !now.Equal(o.now) && !o.nowR.holds(now) ||
		o.start+o.nStart > len(prev.Start) || o.preempt+o.nPreempt > len(prev.Preempt) || o.wait+o.nWait > len(prev.Waiting) {
		return false
	}
	w := p.plan.Waiting
	shared := sameStorage(w, prev.Waiting)
	if shared && len(w) > o.wait {
		return false // this pass's entries took the place of the pool's
	}
	if shared && len(w) == o.wait {
		p.plan.Waiting = w[:o.wait+o.nWait] // in place
	} else {
		p.plan.Waiting = append(w, prev.Waiting[o.wait:o.wait+o.nWait]...)
	}
	start, preempt := len(p.plan.Start), len(p.plan.Preempt)
	p.plan.Start = append(p.plan.Start, prev.Start[o.start:o.start+o.nStart]...)
	p.plan.Preempt = append(p.plan.Preempt, prev.Preempt[o.preempt:o.preempt+o.nPreempt]...)
	o.pass, o.start, o.preempt, o.wait = p.qs.passes, start, preempt, len(w)
	p.budget = o.budgetOut
	p.qs.reused++
	return true
}

// sameStorage reports whether a and b start at the same array element.
func sameStorage[T any](a, b []T) bool {
	return cap(a) > 0 && cap(b) > 0 && &a[:cap(a)][0] == &b[:cap(b)][0]
}

// and narrows r to the times for which o holds too.
func (r *nowRange) and(o nowRange) {
	if !o.lo.IsZero() {
		r.atLeast(o.lo)
	}
	if !o.hi.IsZero() {
		r.below(o.hi)
	}
	r.flows = r.flows || o.flows
}
