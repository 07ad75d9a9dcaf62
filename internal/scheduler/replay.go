package scheduler

// Replay: a pass over kept queues after pending jobs were only submitted
// or cancelled, told so, with every other input as in the previous pass,
// edits the previous plan instead of walking the queue again.
//
// Why that is exact. A walk visits each pool's jobs in an order fixed by
// the queue and the fair share of each project's run when it is visited,
// and decides each against the pool's state, which only decisions change
// (placements, reservations, claims, preemptions; each bumps stateVer). The
// previous walk's visit log records, per phase, every visit's ordering key
// and state version, and for each decision class the decision that held
// in each state version (the class memo's, see decideJob). Then:
//
//   - A job added to a queue is visited where its key first orders before
//     the logged visit's (up to that point the walk is the previous one: its
//     project's run had a later head, which no visit chose). If its class
//     had a decision in force at that state version that changes no state,
//     the job is decided alike and everything after it is as before; its
//     waiting entry goes in at that point.
//   - A job removed from a queue whose visits changed no state left nothing
//     behind: its entry goes.
//
// Anything else falls back to the walk: a changed running job (a finish, a
// start, a preemption taking effect), a change to the time, the config,
// the pools, quotas, projects or usage, a job whose visit changed state or
// whose class had no decision in force there (the first of its class in
// that state), a job in retry backoff or that might backfill, a
// beneficiary of preemption in the pool, a job of a project or shape new
// to the queue, or a plan not handed back.

import (
	"math"
	"reflect"
	"slices"
	"time"

	"trainyard/internal/domain"
)

// Visit flags, above the tier in visit.tf.
const (
	visitChanged  = 16 << iota // the decision changed the pool's state
	visitPlaced                // the job started
	visitDeferred              // left for the second phase
	visitFresh                 // decided afresh, not from the class memo
)

// visit is one job decided in a walk, in visit order: 40 bytes, as a
// walk writes one per job.
type visit struct {
	share float64 // its run's fair share when visited (merge's key)
	sec   int64   // submit time (packed: the queue's submit times are, when logged)
	id    int64
	seg   int32 // stateVer before the decision
	cd    int32 // index in visitLog.classes of its class's decision in force at seg; -1: none logged
	proj  int16
	tf    uint8 // tier (low 4 bits) and flags
	emits uint8 // waiting entries the decision emitted
	resv  bool  // some capacity is reserved after it
}

func (v *visit) tier() int8 { return int8(v.tf & 15) }

// classDec is the decision a class (memo index) had in force in one state
// version.
type classDec struct {
	memo     int32
	seg      int32
	reserved bool // some capacity was reserved (a job with a timeout might backfill)
	deferred bool
	resv     bool
	dep      uint8 // decision.dep
	reason   domain.Reason
	msg      string
	est      time.Time
}

// visitLog is one pool's last walk, kept with its queue.
type visitLog struct {
	ok bool // the last pass over the queue was logged whole
	// unplaced: a placement was undone in the walk, freeing capacity, so
	// what the walk's caches remember of failed fits and searches may be
	// stale after it (see remove).
	unplaced bool
	phases   [3][]visit // by phase (0: beneficiaries, 1: all, 2: deferred)
	endSeg   [3]int32   // stateVer when each phase ended
	classes  []classDec
	lastCD   []int32 // by memo index: 1 + the index in classes of its latest
	shapes   int     // len(queue.shapes) when logged (memo indexes depend on it)
	waitN    int     // waiting entries the pool has in the plan
	// patchOK: the visits' keys, projects and entries stand for the
	// pool's part of the last plan (a patch may rewrite them; see
	// patch.go), though their state versions and classes may not (then
	// ok is false). nonLocal lists the projects some visit of which
	// rested on the pool's state (depPool); manyNonLocal: more than
	// maxNonLocal of them. search marks, by project, those some visit of
	// which rested on a search of the nodes of the project's own jobs
	// (depSearch). touched are the nodes the walk changed (see touch);
	// manyTouched: more than maxTouched.
	patchOK      bool
	dead         int // classes a patch left dead (memo -1)
	nonLocal     []int16
	manyNonLocal bool
	search       []bool
	touched      []int32
	manyTouched  bool
	// counts, when countsOK, is how many visits each project (by index)
	// has in phases 1 and 2 (see inPlace).
	counts   [3][]int32
	countsOK bool
}

// maxNonLocal bounds visitLog.nonLocal.
const maxNonLocal = 8

// maxTouched bounds visitLog.touched.
const maxTouched = 1 << 12

// addDep records what a visit of project proj rested on.
func (lg *visitLog) addDep(proj int16, dep uint8) {
	switch dep {
	case depSearch:
		if int(proj) >= len(lg.search) {
			lg.search = append(lg.search, make([]bool, int(proj)+1-len(lg.search))...)
		}
		lg.search[proj] = true
	case depPool:
		if lg.manyNonLocal || slices.Contains(lg.nonLocal, proj) {
			return
		}
		if len(lg.nonLocal) == maxNonLocal {
			lg.manyNonLocal = true
			return
		}
		lg.nonLocal = append(lg.nonLocal, proj)
	}
}

// touch records that the walk changed node n: with grow, in a way that
// may let a search for victims there succeed (a placement of a
// preemptible job, a job changing sides), else only taking capacity (a
// reservation, a placement of a job that is never a victim), after which
// a search that failed there fails again. It is recorded as idx, or
// -1-idx when it only took capacity.
func (ps *poolState) touch(n *nodeState, grow bool) {
	lg := ps.vlog
	if lg == nil || lg.manyTouched {
		return
	}
	if len(lg.touched) == maxTouched {
		lg.manyTouched = true
		return
	}
	x := int32(n.idx)
	if !grow {
		x = -1 - x
	}
	lg.touched = append(lg.touched, x)
}

// queueEdit is one job inserted into or removed from a queue since its
// last pass.
type queueEdit struct {
	j   job
	add bool
}

// maxEdits bounds the edits a queue keeps for a replay; more make the
// next pass walk.
const maxEdits = 64

// lastInputs is what the previous pass over a Queues ran on, besides the
// pending jobs.
type lastInputs struct {
	ok       bool
	now      time.Time
	nowR     nowRange // what the last walk's outcome depends on of now
	cfg      Config
	pools    []domain.Pool // canonical order, nodes copied
	quotas   []domain.Quota
	projects []domain.Project
	usage    []Usage
	running  []int64  // ids, ascending
	runPools []string // their pools
	runProjs []string // their projects
}

// logVisit appends a visit to the current phase's log; dep is what its
// decision rests on (poolState.dep).
func (ps *poolState) logVisit(top *mergeRun, j *job, seg, waitBefore int, placed, deferred bool, dep uint8) {
	lg := ps.vlog
	v := visit{share: top.share, sec: j.sec, id: j.id, seg: int32(seg), cd: -1, proj: int16(j.proj), tf: uint8(j.tier), resv: len(ps.reserved) > 0}
	if m := ps.memoIndex(j, ps.phase == 1); m < len(lg.lastCD) {
		if c := lg.lastCD[m] - 1; c >= 0 && lg.classes[c].seg == v.seg {
			v.cd = c
		}
	}
	n := ps.waiting - waitBefore
	if n > 255 || j.proj > math.MaxInt16 || j.tier < 0 || j.tier > 15 {
		lg.ok, lg.patchOK = false, false
		return
	}
	lg.addDep(v.proj, dep)
	v.emits = uint8(n)
	if ps.stateVer != seg {
		v.tf |= visitChanged
	}
	if placed {
		v.tf |= visitPlaced
	}
	if deferred {
		v.tf |= visitDeferred
	}
	if ps.fresh {
		v.tf |= visitFresh
	}
	lg.phases[ps.phase] = append(lg.phases[ps.phase], v)
}

// logClass records that the class at memo index m has decision d in force
// in the current state version.
func (ps *poolState) logClass(m int, d *decision) {
	lg := ps.vlog
	if m >= len(lg.lastCD) {
		lg.lastCD = append(lg.lastCD, make([]int32, m+1-len(lg.lastCD))...)
	}
	lg.lastCD[m] = int32(len(lg.classes)) + 1
	ps.vlog.classes = append(ps.vlog.classes, classDec{memo: int32(m), seg: int32(ps.stateVer), reserved: len(ps.reserved) > 0,
		deferred: d.deferred, resv: d.resv, dep: d.dep, reason: d.reason, msg: d.msg, est: d.est})
}

// startLog readies the queue's log for a walk.
func (q *queue) startLog() *visitLog {
	lg := q.vlog
	if lg == nil {
		lg = &visitLog{}
		q.vlog = lg
	}
	lg.reset(q)
	q.edits, q.editsLost = q.edits[:0], false
	return lg
}

// reset readies lg for a walk over q's jobs.
func (lg *visitLog) reset(q *queue) {
	for i := range lg.phases {
		lg.phases[i] = lg.phases[i][:0]
	}
	clear(lg.classes)
	lg.classes = lg.classes[:0]
	clear(lg.lastCD)
	lg.dead = 0
	// Unpacked submit times (spanning centuries) have nanoseconds apart:
	// such a queue walks.
	lg.ok, lg.shapes, lg.waitN, lg.unplaced = q.beneficiaries == 0 && q.packed, len(q.shapes), 0, false
	lg.patchOK, lg.nonLocal, lg.manyNonLocal = lg.ok, lg.nonLocal[:0], false
	clear(lg.search)
	lg.touched, lg.manyTouched = lg.touched[:0], false
	lg.countsOK = false
}

// noteEdit records an insert or removal for the next pass's replay.
func (q *queue) noteEdit(j job, add bool) {
	if q.vlog == nil || q.editsLost {
		return
	}
	if len(q.edits) == maxEdits {
		q.editsLost = true
		return
	}
	q.edits = append(q.edits, queueEdit{j: j, add: add})
}

// remember records what this pass ran on, for the next pass's replay.
func (qs *Queues) remember(s *Snapshot, cfg Config, pools []domain.Pool, running []*Allocation) {
	l := &qs.last
	l.ok, l.now, l.cfg = true, s.Now, cfg
	l.quotas = append(l.quotas[:0], s.Quotas...)
	l.projects = append(l.projects[:0], s.Projects...)
	l.usage = append(l.usage[:0], s.Usage...)
	l.running, l.runPools, l.runProjs = l.running[:0], l.runPools[:0], l.runProjs[:0]
	for _, a := range running {
		l.running = append(l.running, a.JobID)
		l.runPools = append(l.runPools, a.Pool)
		l.runProjs = append(l.runProjs, a.Project)
	}
	// The caller may reuse a snapshot's slices: keep copies (of pools
	// that changed).
	same := len(pools) == len(l.pools)
	for i := 0; same && i < len(pools); i++ {
		same = samePool(&pools[i], &l.pools[i])
	}
	if same {
		return
	}
	l.pools = l.pools[:0]
	for _, p := range pools {
		c := p
		c.Priorities = slices.Clone(p.Priorities)
		c.Nodes = slices.Clone(p.Nodes)
		for i := range c.Nodes {
			c.Nodes[i].GPUs = slices.Clone(c.Nodes[i].GPUs)
		}
		l.pools = append(l.pools, c)
	}
}

// forget drops what replay would rely on.
func (qs *Queues) forget() {
	qs.last.ok = false
	for _, q := range qs.pools {
		if q.vlog != nil {
			q.vlog.ok, q.vlog.patchOK = false, false
		}
	}
}

// sameInputs reports whether the pass runs on what the previous one ran
// on, pending jobs aside, given that the running jobs not named in
// changed are unchanged.
func (qs *Queues) sameInputs(s *Snapshot, cfg Config, pools []domain.Pool, running []*Allocation, changed []int64) bool {
	l := &qs.last
	var zero time.Time
	sameNow := s.Now.Equal(l.now) || l.nowR.holds(s.Now)
	if !l.ok || !sameNow || s.Now.Location() != l.now.Location() || !zero.Before(s.Now) || cfg != l.cfg ||
		!slices.Equal(s.Quotas, l.quotas) || !slices.Equal(s.Projects, l.projects) || !slices.Equal(s.Usage, l.usage) ||
		len(running) != len(l.running) || len(pools) != len(l.pools) {
		return false
	}
	for _, id := range changed {
		if _, was := slices.BinarySearch(l.running, id); was {
			return false
		}
		if _, is := slices.BinarySearchFunc(running, id, func(a *Allocation, id int64) int { return compareInt64(a.JobID, id) }); is {
			return false
		}
	}
	for i := range pools {
		if !samePool(&pools[i], &l.pools[i]) {
			return false
		}
	}
	return true
}

func samePool(a, b *domain.Pool) bool {
	if !slices.Equal(a.Priorities, b.Priorities) || len(a.Nodes) != len(b.Nodes) {
		return false
	}
	x, y := *a, *b
	x.Nodes, y.Nodes, x.Priorities, y.Priorities = nil, nil, nil, nil
	if !reflect.DeepEqual(x, y) {
		return false
	}
	for i := range a.Nodes {
		n, m := &a.Nodes[i], &b.Nodes[i]
		if n.Name != m.Name || n.CPUs != m.CPUs || n.Memory != m.Memory || !slices.Equal(n.GPUs, m.GPUs) {
			return false
		}
	}
	return true
}

// replay edits last, the previous pass's plan, into this pass's for the
// queues' edits, or reports false (the caller then walks; what replay
// changed of last and of the logs, the walk overwrites) and whether it
// changed last.
func (qs *Queues) replay(pools []domain.Pool, last *Plan) (plan Plan, ok, edited bool) {
	w := last.Waiting
	// Every pool replayable first, so that a pass that walks has edited
	// nothing (the pools nothing changed in are then reused, and the
	// others may patch).
	for _, pool := range pools {
		if q := qs.pools[pool.Name]; q != nil {
			if lg := q.vlog; lg == nil || !lg.ok || q.editsLost || lg.shapes != len(q.shapes) || q.beneficiaries > 0 {
				return Plan{}, false, false
			}
		}
	}
	off := 0
	for _, pool := range pools {
		q := qs.pools[pool.Name]
		if q == nil {
			continue
		}
		lg := q.vlog
		for _, e := range q.edits {
			var ok bool
			if e.add {
				w, ok = lg.add(q, w, off, &e.j)
			} else {
				w, ok = lg.remove(w, off, e.j.id)
			}
			if !ok {
				return Plan{}, false, edited
			}
			edited = true
		}
		q.edits = q.edits[:0]
		off += lg.waitN
	}
	if off != len(w) {
		return Plan{}, false, edited
	}
	// The pools' entries moved: a later pass that reuses them finds them
	// here. (A pool without a walk's output in last keeps its stale pass.)
	off = 0
	for _, pool := range pools {
		if q := qs.pools[pool.Name]; q != nil {
			if q.out.pass != 0 && q.out.pass == qs.passes-1 {
				q.out.pass, q.out.wait, q.out.nWait, q.dirty = qs.passes, off, q.vlog.waitN, false
			}
			off += q.vlog.waitN
		}
	}
	qs.replayed++
	return Plan{Start: last.Start, Preempt: last.Preempt, Waiting: w}, true, edited
}

// Replayed is how many passes over qs were edited from the previous plan
// instead of walked (docs/scheduling.md, Performance).
func (qs *Queues) Replayed() int64 { return qs.replayed }

// emitsBefore sums the waiting entries of the pool emitted before visit t
// of phase ph.
func (lg *visitLog) emitsBefore(ph, t int) int {
	n := 0
	for p := 0; p < ph; p++ {
		for i := range lg.phases[p] {
			n += int(lg.phases[p][i].emits)
		}
	}
	for i := range lg.phases[ph][:t] {
		n += int(lg.phases[ph][i].emits)
	}
	return n
}

// before is merge's order on visits: share, then head submit time and id.
func (v *visit) before(u *visit) bool {
	if v.share != u.share {
		return v.share < u.share
	}
	if v.sec != u.sec {
		return v.sec < u.sec
	}
	return v.id < u.id
}

// place finds where phase ph would visit j, had it been queued: the index
// of the first logged visit after it, with j's visit (share and state
// version filled in).
func (lg *visitLog) place(ph int, j *job) (int, visit, bool) {
	log := lg.phases[ph]
	// Tiers come in descending order, each project's run in queue order.
	a, _ := slices.BinarySearchFunc(log, j.tier, func(v visit, t int8) int { return int(t) - int(v.tier()) })
	b := a
	for b < len(log) && log[b].tier() == j.tier {
		b++
	}
	v := visit{sec: j.sec, id: j.id, cd: -1, proj: int16(j.proj), tf: uint8(j.tier)}
	prev, next := -1, -1
	for i := a; i < b; i++ {
		u := &log[i]
		if int32(u.proj) != j.proj {
			continue
		}
		if u.sec < j.sec || u.sec == j.sec && u.id < j.id {
			prev = i
		} else {
			next = i
			break
		}
	}
	// The run's share when j heads it: unchanged since the project's last
	// visit, or what that visit left it at.
	switch {
	case next >= 0:
		v.share = log[next].share
	case prev >= 0 && log[prev].tf&visitPlaced == 0:
		v.share = log[prev].share
	default:
		return 0, visit{}, false
	}
	t := a
	if prev >= 0 {
		t = prev + 1
	}
	for t < b && !v.before(&log[t]) {
		t++
	}
	if t < len(log) {
		v.seg = log[t].seg
	} else {
		v.seg = lg.endSeg[ph]
	}
	return t, v, true
}

// class is the decision the class at memo index m had in force in state
// version seg.
func (lg *visitLog) class(m int, seg int32) (*classDec, int32) {
	for i := range lg.classes {
		if c := &lg.classes[i]; c.memo == int32(m) && c.seg == seg {
			return c, int32(i)
		}
	}
	return nil, -1
}

// add puts job j (just queued) into the logged walk and its entry into w,
// where off is the pool's first entry.
func (lg *visitLog) add(q *queue, w []Waiting, off int, j *job) ([]Waiting, bool) {
	if j.rank < 0 || j.flags&(jobNotBefore|jobBeneficiary) != 0 {
		return w, false
	}
	var at [3]int
	var vs [3]visit
	var dec *classDec
	for ph := 1; ph <= 2; ph++ {
		t, v, ok := lg.place(ph, j)
		if !ok {
			return w, false
		}
		m := (int(j.proj)*len(q.shapes)*8 + int(j.cls)) * 2
		if ph == 1 {
			m++
		}
		c, cd := lg.class(m, v.seg)
		if c == nil || c.resv || j.timeout > 0 && c.reserved || c.deferred && ph == 2 {
			return w, false
		}
		lg.addDep(int16(j.proj), c.dep)
		at[ph], vs[ph] = t, v
		vs[ph].cd, vs[ph].resv = cd, c.reserved // it reserves nothing
		if !c.deferred {
			dec = c
			vs[ph].emits = 1
			// Everything checked: record the visits.
			k := off + lg.emitsBefore(ph, t)
			for p := 1; p <= ph; p++ {
				lg.phases[p] = slices.Insert(lg.phases[p], at[p], vs[p])
			}
			lg.countsOK = false
			w = slices.Insert(w, k, Waiting{JobID: j.id, Reason: dec.reason, Message: dec.msg, EstimatedStart: dec.est})
			lg.waitN++
			return w, true
		}
		vs[ph].tf |= visitDeferred
	}
	return w, false
}

// remove takes job id out of the logged walk and its entry out of w, if
// none of its visits changed state. A visit that decided afresh also
// filled the walk's caches of failed fits and searches, which later
// decisions read: without it a later job may search again, which finds
// the same while capacity only shrinks, but not after a placement was
// undone; then only a visit decided from the memo may go.
func (lg *visitLog) remove(w []Waiting, off int, id int64) ([]Waiting, bool) {
	at := [3]int{-1, -1, -1}
	k := -1
	for ph := 1; ph <= 2 && k < 0; ph++ {
		log := lg.phases[ph]
		i := slices.IndexFunc(log, func(v visit) bool { return v.id == id })
		if i < 0 || log[i].tf&visitChanged != 0 || log[i].emits > 1 || lg.unplaced && log[i].tf&visitFresh != 0 {
			return w, false
		}
		at[ph] = i
		if log[i].emits == 1 {
			k = off + lg.emitsBefore(ph, i)
		}
	}
	if k < 0 || k >= len(w) || w[k].JobID != id {
		return w, false
	}
	for ph := 1; ph <= 2; ph++ {
		if at[ph] >= 0 {
			lg.phases[ph] = slices.Delete(lg.phases[ph], at[ph], at[ph]+1)
		}
	}
	lg.countsOK = false
	w = slices.Delete(w, k, k+1)
	lg.waitN--
	return w, true
}

// nowRange is the span of Snapshot.Now over which every comparison a walk
// made with the time comes out the same (lo ≤ now < hi; zero: unbounded),
// and whether the time itself reached the plan or the pass's state (a
// placement's start, an estimate of now): then no other time is known to
// give the same plan.
type nowRange struct {
	lo, hi time.Time
	flows  bool
}

// atLeast records that the outcome rests on now ≥ t.
func (r *nowRange) atLeast(t time.Time) {
	if r.lo.IsZero() || t.After(r.lo) {
		r.lo = t
	}
}

// below records that the outcome rests on now < t.
func (r *nowRange) below(t time.Time) {
	if r.hi.IsZero() || t.Before(r.hi) {
		r.hi = t
	}
}

// expired records whether a job ending at end has run past its end at
// now, as releaseAt finds. A job that has not is taken to end strictly
// after now: at its very end its release would tie with jobs released
// now, which order before it.
func (r *nowRange) expired(end, now time.Time) {
	switch {
	case end.Equal(now):
		r.flows = true // ends now: its release time is the time, whichever way it goes
	case end.Before(now):
		r.atLeast(end.Add(1))
	default:
		r.below(end)
	}
}

// holds reports whether now is known to give the same outcome.
func (r *nowRange) holds(now time.Time) bool {
	return !r.flows && (r.lo.IsZero() || !now.Before(r.lo)) && (r.hi.IsZero() || now.Before(r.hi))
}

// endsBy reports whether a job with the timeout, starting now, ends by t
// (backfill), recording the comparison.
func (ps *poolState) endsBy(timeout time.Duration, t time.Time) bool {
	ok := !ps.now.Add(timeout).After(t)
	if !ps.trackNow {
		return ok
	}
	// now+timeout ≤ t ⟺ now < t-timeout+1ns
	if lim := t.Add(-timeout).Add(1); ok {
		ps.nowR.below(lim)
	} else {
		ps.nowR.atLeast(lim)
	}
	return ok
}
