package control

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
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
	if len(rs) > g.cfg.Max+1 {
		rs = rs[len(rs)-g.cfg.Max-1:] // enough to decide; bounds a job preempted while held
	}
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

// rebuild replays the preemptions the store recorded (attempts that ended
// preempted, oldest first) into an empty guard, so that a new leader keeps
// the holds in force and the recent history, and returns the holds in
// force at now. The beneficiary is read from the attempt's message ("preempted
// for job 42 ..."); 0 where it does not say.
func (g *guard) rebuild(atts []domain.Attempt, now time.Time) []domain.PreemptionHold {
	for _, a := range atts {
		at := a.FinishedAt
		if at.After(now) {
			at = now // another replica's clock ran ahead
		}
		g.expire(at)
		g.record(a.JobID, beneficiary(a.Message), at)
	}
	g.expire(now)
	holds := make([]domain.PreemptionHold, 0, len(g.held))
	for _, h := range g.held {
		holds = append(holds, h)
	}
	slices.SortFunc(holds, func(a, b domain.PreemptionHold) int { return cmp.Compare(a.JobID, b.JobID) })
	return holds
}

// beneficiary reads the job a preemption was for from its message, as the
// scheduler writes it ("preempted for job 42 (priority high) in pool
// standard"); 0 when the message does not say.
func beneficiary(msg string) int64 {
	_, rest, ok := strings.Cut(msg, "preempted for job ")
	if !ok {
		return 0
	}
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	id, err := strconv.ParseInt(rest[:end], 10, 64)
	if err != nil {
		return 0
	}
	return id
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

// rebuildGuard restores the guard's holds and recent history from the
// preemptions the store recorded within the last window and hold, so that
// a restart or a new leader neither lifts a hold nor forgets a loop in
// progress. A store error leaves the guard starting afresh.
func (c *Controller) rebuildGuard(ctx context.Context) {
	g := c.guard
	if !g.cfg.on() {
		return
	}
	now := c.cfg.Clock.Now()
	atts, err := c.cfg.Store.PreemptedAttempts(ctx, now.Add(-g.cfg.Window-g.cfg.Hold))
	if err != nil {
		c.log.Warn("the preemption guard starts afresh: cannot read recent preemptions", "err", err)
		return
	}
	for _, h := range g.rebuild(atts, now) {
		job, err := c.cfg.Store.GetJob(ctx, h.JobID)
		if err != nil || !job.State.Live() {
			g.forget(h.JobID)
			continue
		}
		c.log.Warn("holding a job from preemption, as before the restart", "job", h.JobID,
			"preemptions", h.Count, "window", h.Window, "for", h.For, "until", h.Until)
		c.cfg.Observer.PreemptionHeld(job, h)
	}
}
