package scheduler

import (
	"cmp"
	"fmt"
	"slices"

	"trainyard/internal/domain"
)

// preemptKey memoises failed victim searches: within a pass, capacity only
// shrinks and candidates only disappear, so a search that failed for a shape
// fails again.
type preemptKey struct {
	shape   shapeKey
	rank    int
	reclaim bool
	project string
}

// maxExactCandidates bounds the exhaustive search for a node's smallest
// victim set; nodes with more candidates use a greedy search.
const maxExactCandidates = 12

// preempt finds the smallest set of victims after whose removal the job fits
// on k nodes, or nil. Candidates are running, preemptible jobs that are not
// stopping (see victimFor): its own project's jobs of strictly lower
// priority, and other projects' borrowed jobs (markBorrowed decides which)
// of strictly lower priority or, when the job's project is within its
// guarantee, of any priority (reclaim). Another project's job inside that
// project's guarantee is never a victim: as in Kueue, capacity inside a
// ClusterQueue's nominal quota is reclaimed only by that queue's own
// workloads (a borrowing job that took it once preempted the victim, which
// took the room back at once, preempting again: a livelock).
func (ps *poolState) preempt(j *Pending, pr *projState, r req, k int, borrowed bool, rank int) ([]*holder, []*nodeState) {
	reclaim := !borrowed && pr.rule.has
	key := preemptKey{shape: shapeKey{r, k}, rank: rank, reclaim: reclaim, project: pr.name}
	fail := func() { ps.preemptFail[key] = true }
	if ps.preemptFail[key] {
		return nil, nil
	}
	eligible := func(h *holder) bool {
		return victimFor(h, pr.name, rank, reclaim, ps.open)
	}
	type choice struct {
		n   *nodeState
		set []*holder
	}
	var choices []choice
	var cands []*holder
	for _, n := range ps.nodes {
		if !n.fitsEmpty(r) {
			continue
		}
		d := deficit{g: r.g - (n.capG - n.usedG + n.stopG - n.resvG), c: r.c - (n.capC - n.usedC + n.stopC - n.resvC), m: r.m - (n.capM - n.usedM + n.stopM - n.resvM)}
		if d.met() {
			choices = append(choices, choice{n: n})
			continue
		}
		if b := n.victimBound(rank, reclaim); b.g < d.g || b.c+cpuEps+1e-6 < d.c || b.m+1 < d.m {
			continue // even every candidate there would not make room
		}
		cands = cands[:0]
		var sum deficit
		for _, h := range n.holders {
			if eligible(h) {
				cands = append(cands, h)
				sum.g, sum.c, sum.m = sum.g+h.res.g, sum.c+h.res.c, sum.m+h.res.m
			}
		}
		if !d.coveredBy(sum) {
			continue
		}
		if set := minimalSet(cands, d); set != nil {
			choices = append(choices, choice{n: n, set: set})
		}
	}
	if len(choices) < k {
		fail()
		return nil, nil
	}
	// Pick the k best nodes by victim set, then node order (k is a gang
	// size, so k selection scans beat sorting every node).
	var victims []*holder
	nodes := make([]*nodeState, 0, k)
	for range k {
		best := -1
		for i := range choices {
			if choices[i].n == nil {
				continue
			}
			if best < 0 || compareSets(choices[i].set, choices[best].set) < 0 {
				best = i // ties keep the lower node index: choices are in node order
			}
		}
		nodes = append(nodes, choices[best].n)
		for _, h := range choices[best].set {
			if !slices.Contains(victims, h) {
				victims = append(victims, h)
			}
		}
		choices[best].n = nil
	}
	if len(victims) == 0 || len(victims) > ps.budget {
		if len(victims) > 0 {
			fail()
		}
		return nil, nil
	}
	slices.SortFunc(victims, func(a, b *holder) int { return compareInt64(a.id, b.id) })
	return victims, nodes
}

// victimFor reports whether h may be stopped for a job of project at the
// given priority rank that reclaims its project's guarantee (reclaim); see
// preempt. Another project's borrowed job is a victim of reclaim at any
// priority, but of priority only when it is unentitled (too large for its
// project's guarantee even alone, e.g. any job of a project without a
// quota): as Kueue's default (borrowWithinCohort: Never), a borrowing job
// does not preempt a job that could reclaim its project's guarantee once
// stopped — the two would take the room from each other as their projects'
// other jobs come and go. In an open pool (no quotas) all projects are one
// queue: any lower-priority job is a victim, as in one Kueue ClusterQueue.
func victimFor(h *holder, project string, rank int, reclaim, open bool) bool {
	switch {
	case h.stopping || !h.preemptible:
		return false
	case h.project == project || open: // an open pool is one queue
		return h.rank < rank
	default:
		return h.borrowed && (reclaim || h.rank < rank && h.unentitled)
	}
}

// deficit is what a node lacks for a request (≤ 0: nothing).
type deficit struct {
	g int
	c float64
	m float64
}

func (d deficit) met() bool { return d.g <= 0 && d.c <= cpuEps && d.m <= 0 }

func (d deficit) coveredBy(s deficit) bool { return s.g >= d.g && s.c+cpuEps >= d.c && s.m >= d.m }

// compareVictims orders single victims: lowest priority, least resources,
// most recently started, then id.
func compareVictims(a, b *holder) int {
	return cmp.Or(compareInt(a.rank, b.rank), compareInt(a.gang.gpus, b.gang.gpus), compareFloat(a.gang.cpus, b.gang.cpus),
		compareFloat(a.gang.mem, b.gang.mem), b.start.Compare(a.start), compareInt64(a.id, b.id))
}

// compareSets is the total order on victim sets: lowest highest priority
// (as Kueue and Slurm take lower-priority victims first: a job stopped
// while a lower-priority one would have done preempts that one in turn,
// two preemptions where one was needed), then fewest jobs, then least
// resources (whole gangs), then most recently started (the earliest
// start in the set is latest), then ids.
func compareSets(a, b []*holder) int {
	ra, rb := -1, -1
	for i := range a {
		ra = max(ra, a[i].rank)
	}
	for i := range b {
		rb = max(rb, b[i].rank)
	}
	if c := cmp.Or(compareInt(ra, rb), compareInt(len(a), len(b))); c != 0 {
		return c
	}
	var sa, sb limits
	for i := range a {
		sa, sb = sa.plus(a[i].gang), sb.plus(b[i].gang)
	}
	if c := cmp.Or(compareInt(sa.gpus, sb.gpus), compareFloat(sa.cpus, sb.cpus), compareFloat(sa.mem, sb.mem)); c != 0 {
		return c
	}
	if len(a) > 0 {
		ea := slices.MinFunc(a, func(x, y *holder) int { return x.start.Compare(y.start) }).start
		eb := slices.MinFunc(b, func(x, y *holder) int { return x.start.Compare(y.start) }).start
		if c := eb.Compare(ea); c != 0 {
			return c
		}
	}
	ia, ib := setIDs(a), setIDs(b)
	return slices.Compare(ia, ib)
}

func setIDs(s []*holder) []int64 {
	ids := make([]int64, len(s))
	for i, h := range s {
		ids[i] = h.id
	}
	slices.Sort(ids)
	return ids
}

// minimalSet returns the best set (by compareSets) of candidates whose
// resources on this node cover d: only candidates up to the lowest
// priority that covers d are considered, then exhaustive by increasing
// size for small candidate lists, greedy otherwise.
func minimalSet(cands []*holder, d deficit) []*holder {
	cs := cands // callers pass a scratch list: sorting it in place is fine
	slices.SortFunc(cs, compareVictims)
	var s deficit
	end := 0
	for end < len(cs) && !d.coveredBy(s) {
		for r := cs[end].rank; end < len(cs) && cs[end].rank == r; end++ {
			s.g, s.c, s.m = s.g+cs[end].res.g, s.c+cs[end].res.c, s.m+cs[end].res.m
		}
	}
	if !d.coveredBy(s) {
		return nil
	}
	cs = cs[:end]
	if len(cs) > maxExactCandidates {
		return greedySet(cs, d)
	}
	idx := make([]int, 0, len(cs))
	for size := 1; size <= len(cs); size++ {
		var best []*holder
		cur := make([]*holder, size)
		idx = idx[:size]
		for i := range idx {
			idx[i] = i
		}
		for {
			var s deficit
			for _, i := range idx {
				s.g, s.c, s.m = s.g+cs[i].res.g, s.c+cs[i].res.c, s.m+cs[i].res.m
			}
			if d.coveredBy(s) {
				for x, i := range idx {
					cur[x] = cs[i]
				}
				if best == nil {
					best = slices.Clone(cur)
				} else if compareSets(cur, best) < 0 {
					copy(best, cur)
				}
			}
			// Next combination in lexicographic order.
			i := size - 1
			for i >= 0 && idx[i] == len(cs)-size+i {
				i--
			}
			if i < 0 {
				break
			}
			idx[i]++
			for x := i + 1; x < size; x++ {
				idx[x] = idx[x-1] + 1
			}
		}
		if best != nil {
			return best
		}
	}
	return nil
}

// greedySet takes the largest candidates until d is covered, then drops
// members that are not needed.
func greedySet(cs []*holder, d deficit) []*holder {
	order := slices.Clone(cs)
	slices.SortStableFunc(order, func(a, b *holder) int {
		return cmp.Or(compareInt(b.res.g, a.res.g), compareFloat(b.res.c, a.res.c), compareFloat(b.res.m, a.res.m))
	})
	var set []*holder
	var s deficit
	for _, h := range order {
		if d.coveredBy(s) {
			break
		}
		set = append(set, h)
		s.g, s.c, s.m = s.g+h.res.g, s.c+h.res.c, s.m+h.res.m
	}
	if !d.coveredBy(s) {
		return nil
	}
	for i := len(set) - 1; i >= 0; i-- {
		h := set[i]
		t := deficit{g: s.g - h.res.g, c: s.c - h.res.c, m: s.m - h.res.m}
		if d.coveredBy(t) {
			s = t
			set = slices.Delete(set, i, i+1)
		}
	}
	return set
}

// stopVictims records the preemptions; victims keep holding their resources
// as stopping until they are gone, claimed by the beneficiary's reservation.
// A victim placed in this pass is not started instead (unplace). It returns
// how many victims stop.
func (ps *poolState) stopVictims(j *Pending, victims []*holder) int {
	rank := j.Priority.Rank()
	stopped := 0
	for _, v := range victims {
		if v.placed {
			ps.unplace(v, j)
			continue
		}
		stopped++
		v.stopping = true
		for _, n := range v.nodes {
			n.boundOK = false
		}
		vp := ps.project(v.project)
		if len(v.nodes) > 0 {
			vp.addStopping(v)
		}
		vp.addUse(v, -1)
		vp.usedVer++
		for _, n := range v.nodes {
			if n.stopG == 0 && n.stopC == 0 && n.stopM == 0 {
				ps.stoppingNodes++
			}
			n.stopG += v.res.g
			n.stopC += v.res.c
			n.stopM += v.res.m
		}
		ps.budget--
		var msg string
		if v.preemptible && v.rank < rank {
			msg = fmt.Sprintf("preempted for job %d (priority %s) in pool %s", j.JobID, j.Priority, ps.pool.Name)
		} else {
			msg = fmt.Sprintf("preempted for job %d: project %s reclaims its quota in pool %s, and this job ran on borrowed capacity",
				j.JobID, j.Project, ps.pool.Name)
		}
		ps.plan.Preempt = append(ps.plan.Preempt, Preemption{JobID: v.id, For: j.JobID, Message: msg})
	}
	ps.stopVersion++
	ps.stateVer++
	return stopped
}

// victimBound is at least what every possible victim on the node holds
// for a job of the given priority rank: its running jobs that are neither
// stopping nor placed in this pass and are preemptible with a lower rank,
// or, with reclaim, borrowed. preempt skips a node below its deficit
// without looking at its jobs. The sums are kept per rank and recomputed
// after victims are chosen on the node.
func (n *nodeState) victimBound(rank int, reclaim bool) deficit {
	if !n.boundOK {
		n.bound, n.boundB = [4]deficit{}, deficit{}
		for _, h := range n.holders {
			if h.stopping {
				continue
			}
			if h.preemptible {
				for x := max(h.rank+1, 0); x < len(n.bound); x++ {
					n.bound[x] = n.bound[x].plus(h.res)
				}
			}
			if h.borrowed && h.preemptible {
				n.boundB = n.boundB.plus(h.res)
			}
		}
		n.boundOK = true
	}
	var b deficit
	if rank >= 0 && rank < len(n.bound) {
		b = n.bound[rank]
	}
	if reclaim {
		b = b.plus(req(n.boundB))
	}
	return b
}

func (d deficit) plus(r req) deficit { return deficit{g: d.g + r.g, c: d.c + r.c, m: d.m + r.m} }

// unplace undoes this pass's placement of h, a job chosen as a victim for
// j: rather than start it and stop it again in the next pass, the pass does
// not start it, and it waits, saying for whom it gave way. Its resources are
// free at once.
func (ps *poolState) unplace(h *holder, j *Pending) {
	i := slices.IndexFunc(ps.plan.Start, func(pl Placement) bool { return pl.JobID == h.id })
	pl := ps.plan.Start[i]
	for k, n := range h.nodes {
		for _, id := range pl.Nodes[k].GPUs {
			if x := slices.Index(n.gpuIDs, id); x >= 0 {
				n.gpuUsed[x] = false
			}
		}
		n.usedG -= h.res.g
		n.usedC -= h.res.c
		n.usedM -= h.res.m
		n.holders = slices.DeleteFunc(n.holders, func(x *holder) bool { return x == h })
		n.boundOK = false
		ps.ix.move(n)
	}
	ps.plan.Start = slices.Delete(ps.plan.Start, i, i+1)
	ps.running--
	pr := ps.project(h.project)
	pr.holders = slices.DeleteFunc(pr.holders, func(x *holder) bool { return x == h })
	pr.used = pr.used.minus(h.gang)
	pr.addUse(h, -1)
	pr.alloc -= h.cost
	pr.usedVer++
	pr.stopVer++
	pr.msgs = nil
	h.nodes, h.placed, h.stopping = nil, false, true // gone: never a victim again
	if ps.vlog != nil {
		ps.vlog.unplaced = true
	}
	ps.version++
	ps.stateVer++
	ps.waiting++
	ps.plan.Waiting = append(ps.plan.Waiting, Waiting{JobID: h.id, Reason: domain.ReasonWaitingForCapacity,
		Message: fmt.Sprintf("gave way to job %d (priority %s), which needs the room in pool %s; it did not start", j.JobID, j.Priority, ps.pool.Name)})
}
