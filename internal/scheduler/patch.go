package scheduler

// Patch: a told pass in which a pool's changes (jobs queued or removed,
// running jobs started, finished or changed) all belong to a few projects
// decides again only those projects' jobs, when every other project's
// visits in the pool's last walk were decided locally, and takes the
// others' entries from the previous plan.
//
// Why that is exact. Call the changed projects S. A decision is local
// (depLocal) when it reads nothing of the pool's state but its own
// project's (use, what its waiting jobs hold, its running and stopping
// jobs) and the preemption budget, and changes nothing but what its
// project's waiting jobs hold: a retry backoff, a job the pool could
// never hold, a priority above the quota's, the quota decisions that do
// not rest on a search of the nodes, and a deferral to the borrowing
// phase. A quota decision that rests on a failed search for the
// project's own victims (depSearch) reads besides the nodes holding the
// project's preemptible jobs and every job on them. If the last walk
// decided every visit of a project outside S locally, or on a failed
// search of nodes S did not change, then in a walk now:
//
//   - the pool's state at each visit of a job of S is what the visits of
//     S before it left (the others change nothing but their own claims,
//     which only their own decisions read), so S's decisions are those
//     of a walk over S's jobs alone, in the same order — the order of S's
//     own runs, by the same keys;
//   - the other projects' state at each of their visits is what it was
//     in the last walk (their running jobs are those of then, and their
//     decisions are the same, by induction), the nodes their searches
//     read are (or only lost capacity, after which a failed search fails
//     again), the budget is the same (S preempts nothing, or the pass
//     walks), the running cap is not reached (S's placements leave it
//     below, or the pass walks) and the time is within what the last
//     walk's comparisons hold for: each of their decisions is the same,
//     with the same entry;
//   - the visits come in the order of their merge keys (tier, then the
//     run's share when visited, submit time and id): a run's share only
//     grows with its own placements, so each run's keys increase and the
//     heap takes the least key each time. The other projects' keys are
//     those logged (their shares do not change); S's are the walk's.
//
// So the pool's entries are the last plan's, less S's, with the walk over
// S's jobs merged in by key. Its placements are S's (the others placed nothing). Projects
// that break the premise (a visit that rested on the pool's state, a
// search that may read a node S changed) join S first. The visit log is
// merged alike, renumbered in state versions with each class decision
// logged again where its visits now are, so that the next pass can patch
// or replay.

import (
	"slices"
	"sort"
	"time"

	"trainyard/internal/domain"
)

// poolProject is a project in a pool.
type poolProject struct{ pool, project string }

// runningProjects lists the pools and projects of the running jobs named
// in changed, as the previous pass had them and as this one does (running
// in id order). Call it before remember.
func (qs *Queues) runningProjects(running []*Allocation, changed []int64) []poolProject {
	var out []poolProject
	add := func(pp poolProject) {
		if !slices.Contains(out, pp) {
			out = append(out, pp)
		}
	}
	l := &qs.last
	for _, id := range changed {
		if x, was := slices.BinarySearch(l.running, id); was {
			add(poolProject{l.runPools[x], l.runProjs[x]})
		}
		if x, is := slices.BinarySearchFunc(running, id, func(a *Allocation, id int64) int { return compareInt64(a.JobID, id) }); is {
			add(poolProject{running[x].Pool, running[x].Project})
		}
	}
	return out
}

// patchScratch is what a queue keeps for its patches.
type patchScratch struct {
	jobs     []job
	log      visitLog
	wait     []Waiting
	tmp      []Waiting
	spare    [3][]visit
	inS      []bool
	oldSlots []int
	newSlots []int
	classes  []classDec
	lastCD   []int32
	maps     [2]struct{ idx, seg []int32 }
	idx      [3][]int
}

// patch decides the pool of queue q by a walk over the jobs of the
// projects whose jobs changed, merged into the pool's part of src, the
// previous plan, or reports false (the pool then walks; nothing of the
// plan or of q's log changed). running are the pool's running jobs;
// runChanged, the projects of the running jobs that changed. It leaves
// q.out set for the pool's new entries.
func (p *pass) patch(q *queue, pool domain.Pool, mc *memoConfig, quotas map[[2]string]*domain.Quota, shares map[string]float64,
	usage map[[2]string]float64, running []*Allocation, src *Plan, runChanged []poolProject) bool {
	o, lg, now := &q.out, q.vlog, p.s.Now
	if lg == nil || !lg.patchOK || lg.manyNonLocal || lg.manyTouched || q.editsLost || q.beneficiaries > 0 || !q.packed ||
		o.pass == 0 || o.pass != p.qs.passes-1 || o.budgetIn != p.budget || o.budgetOut != o.budgetIn || o.nPreempt != 0 ||
		!now.Equal(o.now) && !o.nowR.holds(now) || lg.waitN != o.nWait ||
		o.wait+o.nWait > len(src.Waiting) || o.start+o.nStart > len(src.Start) {
		return false
	}
	w := p.plan.Waiting
	shared := sameStorage(w, src.Waiting)
	if shared && len(w) > o.wait {
		return false // this pass's entries took the place of the pool's
	}
	sc := q.patch
	if sc == nil {
		sc = &patchScratch{}
		q.patch = sc
	}
	// The changed projects, S.
	inS := append(sc.inS[:0], make([]bool, len(q.projs))...)
	sc.inS = inS
	var names []string
	mark := func(i int32) {
		if !inS[i] {
			inS[i] = true
			names = append(names, q.projs[i])
		}
	}
	for _, e := range q.edits {
		mark(e.j.proj)
	}
	for _, pp := range runChanged {
		if pp.pool == pool.Name {
			if i, ok := q.projIx[pp.project]; ok {
				mark(i)
			}
		}
	}
	// What the changed running jobs were, before newPoolState resolves
	// the pool's allocations afresh.
	var before []oldAlloc
	if len(runChanged) > 0 {
		if !q.allocs.valid {
			return false
		}
		for _, id := range p.changed {
			if x, ok := slices.BinarySearchFunc(q.allocs.res, id, func(a allocRes, id int64) int { return compareInt64(a.id, id) }); ok {
				a := q.allocs.res[x]
				before = append(before, oldAlloc{a, q.allocs.projs[a.proj]})
			}
		}
	}
	ps := p.newPoolState(pool, quotas, shares, usage, running, &q.allocs)
	ps.memoCfg = mc

	// The nodes whose state differs from the last walk's as S left it:
	// those S's changed running jobs held or hold, those of S's running
	// jobs that changed sides (borrowed or not), and those the last walk
	// placed jobs on or reserved.
	t := make([]bool, len(ps.nodes))
	for _, b := range before {
		for _, an := range b.res.nodes {
			if an.n >= 0 && int(an.n) < len(t) {
				t[an.n] = true
			}
		}
	}
	for _, n := range lg.touched {
		// Undone now, whichever way it went.
		if n < 0 {
			n = -1 - n
		}
		if int(n) < len(t) {
			t[n] = true
		}
	}
	for _, pp := range runChanged {
		if pr := ps.projs[pp.project]; pp.pool == pool.Name && pr != nil {
			ps.sidesChanged(pr, before, func(h *holder) {
				for _, n := range h.nodes {
					t[n.idx] = true
				}
			})
		}
	}
	// A project whose visits rested on the pool's state, or on a search
	// of nodes S changed, is decided again with S.
	for _, np := range lg.nonLocal {
		if int(np) >= len(inS) {
			return false
		}
		mark(int32(np))
	}
	for i, sr := range lg.search {
		if sr && i < len(inS) && !inS[i] && ps.searchReads(ps.projs[q.projs[i]], t) {
			mark(int32(i))
		}
	}
	if len(names) > maxPatchProjects {
		return false
	}
	// S's jobs in queue order: by tier (descending), then project name,
	// each (tier, project) one block of the queue.
	slices.Sort(names)
	jobs := sc.jobs[:0]
	for t := int8(maxTier); t >= 0; t-- {
		for _, name := range names {
			lo := sort.Search(len(q.jobs), func(i int) bool {
				j := &q.jobs[i]
				return j.tier < t || j.tier == t && q.projs[j.proj] >= name
			})
			hi := lo
			for hi < len(q.jobs) && q.jobs[hi].tier == t && q.projs[q.jobs[hi].proj] == name {
				hi++
			}
			jobs = append(jobs, q.jobs[lo:hi]...)
		}
	}
	sc.jobs = jobs

	// The walk over S's jobs, into scratch.
	saved, savedNowR, budget := p.plan, p.nowR, p.budget
	p.plan, p.nowR = Plan{Waiting: sc.wait[:0]}, nowRange{}
	sl := &sc.log
	sl.reset(q)
	ps.walkJobs(q, jobs, sl)
	sub, subR := p.plan, p.nowR
	p.plan, p.nowR = saved, savedNowR
	sc.wait = sub.Waiting
	if len(sub.Preempt) > 0 || p.budget != budget || !sl.ok || sl.unplaced || sl.manyNonLocal ||
		pool.MaxRunning > 0 && ps.running >= pool.MaxRunning || len(sl.phases[0]) > 0 || sl.manyTouched {
		p.budget = budget
		return false
	}
	// The others' searches must not read what S's walk changed, unless
	// it only took capacity: a search that failed fails again with less.
	for _, n := range sl.touched {
		if n >= 0 {
			t[n] = true
		}
	}
	for i, sr := range lg.search {
		if sr && i < len(inS) && !inS[i] && ps.searchReads(ps.projs[q.projs[i]], t) {
			return false
		}
	}

	fast := sc.inPlace(lg, sl, inS, len(q.shapes))
	var merged [3][]visit
	var endSeg [3]int32
	var oldSlots, newSlots []int
	oi, ni := 0, 0
	if fast {
		oldSlots, newSlots = sc.oldSlots, sc.oldSlots
		oi, ni = o.nWait, o.nWait
		goto entries
	}
	// The visits merged by key, phase by phase, and where S's entries
	// were and go among the pool's. The merged log is numbered afresh
	// in state versions (each visit changes as many as it did in its
	// walk), and each class decision a visit found in force is logged
	// again at the visit's new version, so that a replay can follow
	// (see replayable).
	{
		replayable := lg.ok && sl.ok && lg.shapes <= len(q.shapes) && sl.shapes == len(q.shapes)
		// Memo indexes of the old log's classes, in the layout of now (shapes
		// only grow).
		remap := func(m int32) int32 {
			if lg.shapes == len(q.shapes) {
				return m
			}
			per := int32(lg.shapes) * 8
			proj, rest := m/2/per, m/2%per
			return (proj*int32(len(q.shapes))*8+rest)*2 + m%2
		}
		classes := sc.classes[:0]
		// Where each log's class decisions went in classes, and at what
		// version (by index in the log's classes).
		for x, from := range [2]*visitLog{lg, sl} {
			mp := &sc.maps[x]
			n := len(from.classes)
			if cap(mp.idx) < n {
				mp.idx, mp.seg = make([]int32, n), make([]int32, n)
			}
			mp.idx, mp.seg = mp.idx[:n], mp.seg[:n]
			clear(mp.idx)
		}
		lastCD := sc.lastCD
		clear(lastCD)
		oldSlots, newSlots = sc.oldSlots[:0], sc.newSlots[:0]
		seg, reserved := int32(0), false
		for ph := 1; ph <= 2; ph++ {
			old, nw := lg.phases[ph], sl.phases[ph]
			out := slices.Grow(sc.spare[ph][:0], len(old)+len(nw))
			mp0 := &sc.maps[0]
			// take appends visit x of phase ph of log from, which changed
			// state bumps times.
			take := func(v *visit, bumps int32, from *visitLog, ofS bool) {
				w := *v
				if cd := w.cd; cd >= 0 && replayable {
					mp := &sc.maps[0]
					if ofS {
						mp = &sc.maps[1]
					}
					if x := mp.idx[cd] - 1; x >= 0 && mp.seg[cd] == seg {
						w.cd = x
					} else {
						c := &from.classes[cd]
						memo := c.memo
						if !ofS {
							memo = remap(memo)
						}
						if int(memo) >= len(lastCD) {
							lastCD = append(lastCD, make([]int32, int(memo)+1-len(lastCD))...)
						}
						if x := lastCD[memo] - 1; x >= 0 && classes[x].seg == seg {
							w.cd = x
						} else {
							classes = append(classes, *c)
							nc := &classes[len(classes)-1]
							nc.memo, nc.seg, nc.reserved = memo, seg, reserved
							w.cd = int32(len(classes) - 1)
							lastCD[memo] = int32(len(classes))
						}
						mp.idx[cd], mp.seg[cd] = w.cd+1, seg
					}
				} else {
					w.cd = -1
				}
				if ofS {
					reserved = w.resv
				}
				w.seg, w.resv = seg, reserved
				out = append(out, w)
				seg += bumps
			}
			i, k := 0, 0
			for i < len(old) || k < len(nw) {
				if i < len(old) {
					// Most visits, in a tight loop: the others' before
					// S's next one, their class decisions none or already
					// logged again at this version.
					var u *visit
					if k < len(nw) {
						u = &nw[k]
					}
					var e int
					var ok bool
					out, i, seg, e, ok = mergeOthers(out, old, i, u, inS, mp0.idx, mp0.seg, replayable, seg, lg.endSeg[ph], reserved)
					if !ok {
						return false
					}
					oi, ni = oi+e, ni+e
					if i == len(old) {
						continue
					}
					v := &old[i]
					e = int(v.emits)
					if inS[v.proj] {
						for x := range e {
							oldSlots = append(oldSlots, oi+x)
						}
						oi += e
						i++
						continue
					}
					if k == len(nw) || !visitFirst(&nw[k], v) {
						if v.share != v.share {
							return false // NaN: no order to merge by
						}
						// Most visits: a class decision already logged
						// again at this version.
						if cd := v.cd; cd < 0 || !replayable {
							take(v, lg.bumps(ph, i), lg, false)
						} else if x := mp0.idx[cd] - 1; x >= 0 && mp0.seg[cd] == seg {
							w := *v
							w.cd, w.seg, w.resv = x, seg, reserved
							out = append(out, w)
							if i+1 < len(old) {
								seg += old[i+1].seg - v.seg
							} else {
								seg += lg.endSeg[ph] - v.seg
							}
						} else {
							take(v, lg.bumps(ph, i), lg, false)
						}
						oi, ni = oi+e, ni+e
						i++
						continue
					}
				}
				u := &nw[k]
				if u.share != u.share {
					return false
				}
				for x := range int(u.emits) {
					newSlots = append(newSlots, ni+x)
				}
				ni += int(u.emits)
				take(u, sl.bumps(ph, k), sl, true)
				k++
			}
			merged[ph], endSeg[ph] = out, seg
		}
		sc.classes, sc.lastCD = classes, lastCD
		sc.oldSlots, sc.newSlots = oldSlots, newSlots
	}
entries:
	if oi != o.nWait || len(newSlots) != len(sub.Waiting) || len(lg.phases[0]) > 0 {
		return false
	}

	// The entries: the others' from src, S's from the walk, in merged
	// order.
	old := src.Waiting[o.wait : o.wait+o.nWait]
	if shared && (len(w) != o.wait || !slices.Equal(oldSlots, newSlots)) {
		// Written over as they are read: copy them first.
		sc.tmp = append(sc.tmp[:0], old...)
		old = sc.tmp
	}
	base, n := len(w), ni
	w = slices.Grow(w, n)[:base+n]
	out := w[base:]
	for i, k, a, b := 0, 0, 0, 0; k < n; {
		if b < len(newSlots) && newSlots[b] == k {
			out[k] = sub.Waiting[b]
			b++
			k++
			continue
		}
		if a < len(oldSlots) && oldSlots[a] == i {
			i++
			a++
			continue
		}
		m := n - k
		if b < len(newSlots) {
			m = min(m, newSlots[b]-k)
		}
		if a < len(oldSlots) {
			m = min(m, oldSlots[a]-i)
		}
		if &out[k] != &old[i] {
			copy(out[k:k+m], old[i:i+m])
		}
		i, k = i+m, k+m
	}
	clear(sc.tmp)
	clear(sc.wait)
	p.plan.Waiting = w
	start := len(p.plan.Start)
	p.plan.Start = append(p.plan.Start, sub.Start...)

	// The log: merged visits; their state versions are not a walk's.
	if fast {
		sc.applyInPlace(lg, sl)
		lg.ok = lg.ok && sl.ok
	} else {
		for ph := 1; ph <= 2; ph++ {
			lg.phases[ph], sc.spare[ph] = merged[ph], lg.phases[ph]
		}
		lg.classes, sc.classes = sc.classes, lg.classes
		clear(sc.classes) // the old log's messages
		lg.endSeg, lg.dead = endSeg, 0
		if lg.countsOK {
			// S's counts are now the walk's.
			for ph := 1; ph <= 2; ph++ {
				cs := lg.counts[ph]
				if len(cs) < len(inS) {
					cs = append(cs, make([]int32, len(inS)-len(cs))...)
				}
				for i, s := range inS {
					if s {
						cs[i] = 0
					}
				}
				for k := range sl.phases[ph] {
					p := int(sl.phases[ph][k].proj)
					if p >= len(cs) {
						cs = append(cs, make([]int32, p+1-len(cs))...)
					}
					cs[p]++
				}
				lg.counts[ph] = cs
			}
		}
		lg.ok = lg.ok && sl.ok && lg.shapes <= len(q.shapes) && sl.shapes == len(q.shapes)
	}
	lg.waitN, lg.shapes = n, len(q.shapes)
	lg.nonLocal = append(lg.nonLocal[:0], sl.nonLocal...)
	lg.touched = append(lg.touched[:0], sl.touched...)
	for i := range lg.search {
		lg.search[i] = lg.search[i] && !inS[i] // the others' searches are as they were
	}
	for i, s := range sl.search {
		if s {
			lg.addDep(int16(i), depSearch)
		}
	}
	q.edits, q.editsLost, q.dirty = q.edits[:0], false, false
	r := o.nowR
	r.and(subR)
	*o = poolOut{pass: p.qs.passes, start: start, nStart: len(sub.Start), preempt: len(p.plan.Preempt), wait: base, nWait: n,
		budgetIn: p.budget, budgetOut: p.budget, now: now, nowR: r}
	p.qs.patched++
	return true
}

// mergeOthers appends to out the visits old[i:] of projects outside S
// (not in inS) that come before u, S's next new visit (nil: none), up to
// the first whose class decision is logged but not yet again at its new
// state version (idx and segs: where the old log's class decisions went,
// see patch). Each is at version seg, with reserved, and its class
// decision's new index, or none (-1) when the log is not replayable.
// It returns out, the index of the first visit not taken, the version
// after those taken, the entries they emitted, and false when a visit's
// share is NaN (no order to merge by). end is the old phase's endSeg.
func mergeOthers(out, old []visit, i int, u *visit, inS []bool, idx, segs []int32, replayable bool, seg, end int32, reserved bool) ([]visit, int, int32, int, bool) {
	e := 0
	for ; i < len(old); i++ {
		v := &old[i]
		if inS[v.proj] || u != nil && visitFirst(u, v) {
			break
		}
		if v.share != v.share {
			return out, i, seg, e, false
		}
		cd := int32(-1)
		if replayable && v.cd >= 0 {
			x := idx[v.cd] - 1
			if x < 0 || segs[v.cd] != seg {
				break
			}
			cd = x
		}
		next := end
		if i+1 < len(old) {
			next = old[i+1].seg
		}
		out = append(out, *v)
		w := &out[len(out)-1]
		w.cd, w.seg, w.resv = cd, seg, reserved
		seg += next - v.seg
		e += int(v.emits)
	}
	return out, i, seg, e, true
}

// maxTier is the highest job tier (tierOf).
const maxTier = 9

// visitFirst reports whether visit a comes before b in a phase: higher
// tier first, then merge's order.
func visitFirst(a, b *visit) bool {
	if a.tier() != b.tier() {
		return a.tier() > b.tier()
	}
	return a.before(b)
}

// Patched is how many times a pass over qs decided a pool by a walk over
// the jobs of the projects that changed (docs/scheduling.md, Performance).
func (qs *Queues) Patched() int64 { return qs.patched }

// maxPatchProjects bounds the projects a patch decides again.
const maxPatchProjects = 16

// searchReads reports whether a search for pr's own victims may read a
// node marked in t: one holding one of its preemptible running jobs that
// is not stopping (ownVictim), the only nodes preemptOwn visits.
func (ps *poolState) searchReads(pr *projState, t []bool) bool {
	if pr == nil {
		return false // no running jobs: nothing to search
	}
	for _, h := range pr.holders {
		if h.preemptible && !h.stopping {
			for _, n := range h.nodes {
				if t[n.idx] {
					return true
				}
			}
		}
	}
	return false
}

// sidesChanged calls f for each of pr's running jobs (not placed in this
// pass) that is new, or whose side (borrowed or not, as markProject
// decides) differs from what it was before the running jobs in before
// changed: before are their allocations then (of any project), and
// ps.changed names them.
func (ps *poolState) sidesChanged(pr *projState, before []oldAlloc, f func(*holder)) {
	type item struct {
		rank  int
		start time.Time
		id    int64
		gang  limits
		h     *holder
	}
	// The sides before: of its unchanged jobs and its changed ones as
	// they were, as markProject decided them then.
	var items []item
	changed := func(id int64) bool { _, ok := slices.BinarySearch(ps.changed, id); return ok }
	any := false
	for _, h := range pr.holders {
		if h.placed {
			continue
		}
		if changed(h.id) {
			f(h) // its nodes changed
			any = true
			continue
		}
		if !h.stopping {
			items = append(items, item{h.rank, h.start, h.id, h.gang, h})
		}
	}
	for _, b := range before {
		if b.proj == pr.name {
			any = true
			if !b.res.stopping {
				items = append(items, item{b.res.rank, b.res.start, b.res.id, b.res.gang, nil})
			}
		}
	}
	if !any {
		return // the same jobs as before: the same sides
	}
	slices.SortFunc(items, func(a, b item) int {
		if a.rank != b.rank {
			return compareInt(b.rank, a.rank)
		}
		if c := a.start.Compare(b.start); c != 0 {
			return c
		}
		return compareInt64(a.id, b.id)
	})
	var fill limits
	for _, it := range items {
		borrowed := true
		if next := fill.plus(it.gang); pr.rule.guaranteed.within(next) {
			fill, borrowed = next, false
		}
		if it.h != nil && it.h.borrowed != borrowed {
			f(it.h)
		}
	}
}

// oldAlloc is a running job's allocation as the last pass resolved it,
// and its project.
type oldAlloc struct {
	res  allocRes
	proj string
}

// bumps is how many state versions visit i of phase ph changed.
func (lg *visitLog) bumps(ph, i int) int32 {
	if log := lg.phases[ph]; i+1 < len(log) {
		return log[i+1].seg - log[i].seg
	}
	return lg.endSeg[ph] - lg.phases[ph][i].seg
}

// inPlace reports whether, S's visits being sl's, the merged log is the
// old one (lg) with S's visits replaced one for one: each of S's new
// visits falls between the same visits of the others as one of S's old
// ones did, and changes as many state versions, emits as many entries
// and leaves capacity reserved or not alike. Then the others' visits keep
// their state versions and class decisions, and the entries their
// places. It leaves S's old visits' indexes in sc.idx and their entries'
// places in sc.oldSlots. It declines when the log's class decisions
// would be mostly dead afterwards (applyInPlace leaves S's old ones in
// place, dead).
func (sc *patchScratch) inPlace(lg, sl *visitLog, inS []bool, shapes int) bool {
	if lg.shapes != shapes {
		return false
	}
	// S's visits, as many in each phase as the walk over S's jobs has?
	// Counted once, then kept by patches.
	if !lg.countsOK {
		lg.count(len(inS))
	}
	for ph := 1; ph <= 2; ph++ {
		n, cs := 0, lg.counts[ph]
		for i, s := range inS {
			if s && i < len(cs) {
				n += int(cs[i])
			}
		}
		if n != len(sl.phases[ph]) {
			return false
		}
	}
	slots := sc.oldSlots[:0]
	at := 0
	for ph := 1; ph <= 2; ph++ {
		idx := sc.idx[ph][:0]
		old, nw := lg.phases[ph], sl.phases[ph]
		for i := range old {
			v := &old[i]
			if inS[v.proj] {
				idx = append(idx, i)
				for x := range int(v.emits) {
					slots = append(slots, at+x)
				}
			}
			at += int(v.emits)
		}
		sc.idx[ph] = idx
		if len(idx) != len(nw) {
			sc.oldSlots = slots
			return false
		}
		for k, i := range idx {
			u, v := &nw[k], &old[i]
			if u.emits != v.emits || u.resv != v.resv || sl.bumps(ph, k) != lg.bumps(ph, i) || u.share != u.share {
				sc.oldSlots = slots
				return false
			}
			// Between the same others: the nearest before and after
			// that are not S's.
			b := i - 1
			for b >= 0 && inS[old[b].proj] {
				b--
			}
			a := i + 1
			for a < len(old) && inS[old[a].proj] {
				a++
			}
			if b >= 0 && !visitFirst(&old[b], u) || a < len(old) && !visitFirst(u, &old[a]) {
				sc.oldSlots = slots
				return false
			}
		}
	}
	sc.oldSlots = slots
	per := int32(shapes) * 8
	dead := 0
	for i := range lg.classes {
		if m := lg.classes[i].memo; m >= 0 && per > 0 && int(m/2/per) < len(inS) && inS[m/2/per] {
			dead++
		}
	}
	return lg.dead+dead <= len(lg.classes)/2+1024
}

// count sets lg.counts from its visits (projects by index below nproj,
// or more as visits have).
func (lg *visitLog) count(nproj int) {
	for ph := 1; ph <= 2; ph++ {
		cs := append(lg.counts[ph][:0], make([]int32, nproj)...)
		for i := range lg.phases[ph] {
			p := int(lg.phases[ph][i].proj)
			if p >= len(cs) {
				cs = append(cs, make([]int32, p+1-len(cs))...)
			}
			cs[p]++
		}
		lg.counts[ph] = cs
	}
	lg.countsOK = true
}

// applyInPlace replaces S's old visits in lg with sl's (see inPlace),
// marks S's old class decisions dead and logs S's new ones at their
// visits' state versions.
func (sc *patchScratch) applyInPlace(lg, sl *visitLog) {
	per := int32(lg.shapes) * 8
	inS := sc.inS
	for i := range lg.classes {
		if c := &lg.classes[i]; c.memo >= 0 && per > 0 && int(c.memo/2/per) < len(inS) && inS[c.memo/2/per] {
			c.memo = -1 // never found again (class looks for memo ≥ 0)
			lg.dead++
		}
	}
	mp := &sc.maps[1]
	n := len(sl.classes)
	if cap(mp.idx) < n {
		mp.idx, mp.seg = make([]int32, n), make([]int32, n)
	}
	mp.idx, mp.seg = mp.idx[:n], mp.seg[:n]
	clear(mp.idx)
	for ph := 1; ph <= 2; ph++ {
		old := lg.phases[ph]
		for k, i := range sc.idx[ph] {
			u := sl.phases[ph][k]
			u.seg, u.resv = old[i].seg, old[i].resv
			if cd := u.cd; cd >= 0 {
				if x := mp.idx[cd] - 1; x >= 0 && mp.seg[cd] == u.seg {
					u.cd = x
				} else {
					// The capacity reserved when it was decided: before u.
					reserved := false
					switch {
					case i > 0:
						reserved = old[i-1].resv
					case ph == 2 && len(lg.phases[1]) > 0:
						reserved = lg.phases[1][len(lg.phases[1])-1].resv
					}
					c := sl.classes[cd]
					c.seg, c.reserved = u.seg, reserved
					lg.classes = append(lg.classes, c)
					u.cd = int32(len(lg.classes) - 1)
					mp.idx[cd], mp.seg[cd] = u.cd+1, u.seg
				}
			}
			old[i] = u
		}
	}
}
