package control

import (
	"cmp"
	"slices"
	"time"

	"trainyard/internal/domain"
)

// PreemptionGuard is a defence against preemption loops (a scheduler that
// keeps stopping one job for another that never starts): a job preempted
// more than Max times within Window is held from preemption for Hold — it
// keeps running, and the scheduler never chooses it as a victim — and the
// Observer is told (the preemption_thrash alert).
type PreemptionGuard struct {
	// Max is how many preemptions within Window a job may take; the next
	// one holds it. 0 turns the guard off.
	Max    int
	Window time.Duration
	Hold   time.Duration
}

// DefaultPreemptionGuard is the server's guard unless configured: more than
// 3 preemptions in 30 minutes hold a job for an hour.
func DefaultPreemptionGuard() PreemptionGuard {
	return PreemptionGuard{Max: 3, Window: 30 * time.Minute, Hold: time.Hour}
}

// on reports whether the guard is configured to act.
func (g PreemptionGuard) on() bool { return g.Max > 0 && g.Window > 0 && g.Hold > 0 }

// guard keeps, per job, the preemptions within the window and the holds in
// force. It is fed as preemptions are applied and aged when something in it
// expires, so its cost follows preemptions, not the queue. Loop goroutine
// only.
type guard struct {
	cfg    PreemptionGuard
	recent map[int64][]preemption // per victim, within the window, oldest first
	held   map[int64]domain.PreemptionHold
	next   time.Time // earliest expiry of an entry in recent or held; zero: none
}

// preemption is one applied preemption of a victim.
type preemption struct {
	at     time.Time
	forJob int64 // the beneficiary; 0: not known
}

func newGuard(cfg PreemptionGuard) *guard {
	return &guard{cfg: cfg, recent: map[int64][]preemption{}, held: map[int64]domain.PreemptionHold{}}
}

// isHeld reports whether the job is held from preemption.
func (g *guard) isHeld(id int64) bool {
	_, ok := g.held[id]
	return ok
}

// record notes that victim was preempted for forJob at at, and returns the
// hold it begins, if it begins one.
func (g *guard) record(victim, forJob int64, at time.Time) (domain.PreemptionHold, bool) {
	if !g.cfg.on() {
		return domain.PreemptionHold{}, false
	}
	rs := g.recent[victim]
	i := 0
	for i < len(rs) && !within(rs[i].at, at, g.cfg.Window) {
		i++
	}
	rs = append(rs[i:], preemption{at: at, forJob: forJob})
	g.recent[victim] = rs
	g.expireBy(rs[0].at.Add(g.cfg.Window))
	if len(rs) <= g.cfg.Max || g.isHeld(victim) {
		return domain.PreemptionHold{}, false
	}
	h := domain.PreemptionHold{JobID: victim, Count: len(rs), Window: g.cfg.Window, At: at, Until: at.Add(g.cfg.Hold)}
	for _, r := range rs {
		if !slices.Contains(h.For, r.forJob) {
			h.For = append(h.For, r.forJob)
		}
	}
	slices.Sort(h.For)
	g.held[victim] = h
	g.expireBy(h.Until)
	return h, true
}

// expire forgets preemptions older than the window and ends the holds due
// by now, returning those. It does nothing until the earliest entry is due.
func (g *guard) expire(now time.Time) (ended []domain.PreemptionHold) {
	if g.next.IsZero() || now.Before(g.next) {
		return nil
	}
	g.next = time.Time{}
	for id, rs := range g.recent {
		i := 0
		for i < len(rs) && !within(rs[i].at, now, g.cfg.Window) {
			i++
		}
		if i == len(rs) {
			delete(g.recent, id)
			continue
		}
		g.recent[id] = rs[i:]
		g.expireBy(rs[i].at.Add(g.cfg.Window))
	}
	for id, h := range g.held {
		if !now.Before(h.Until) {
			delete(g.held, id)
			ended = append(ended, h)
			continue
		}
		g.expireBy(h.Until)
	}
	slices.SortFunc(ended, func(a, b domain.PreemptionHold) int { return cmp.Compare(a.JobID, b.JobID) })
	return ended
}

// forget drops what the guard knows of a job that is no longer live.
func (g *guard) forget(id int64) {
	delete(g.recent, id)
	delete(g.held, id)
}

// expireBy makes sure expire looks again by t.
func (g *guard) expireBy(t time.Time) {
	if g.next.IsZero() || t.Before(g.next) {
		g.next = t
	}
}

// within reports whether a preemption at t still counts at now.
func within(t, now time.Time, window time.Duration) bool { return now.Sub(t) < window }
