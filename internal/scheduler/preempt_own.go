package scheduler

import (
	"math"
	"slices"
)

// preemptOwn handles a job whose own project's quota is full: with pool
// preemption on, it may stop the project's own preemptible jobs of strictly
// lower priority — the only victims whose removal frees that quota. It
// returns the smallest victim set after whose removal the job fits both the
// quota (over) and one node, or nil. Single-node jobs only: a gang whose
// quota is full waits for its project's jobs to end.
func (ps *poolState) preemptOwn(j *job, over limits) ([]*holder, []*nodeState) {
	pr, sh := ps.pr(j), ps.sh(j)
	if sh.key.k != 1 {
		return nil, nil
	}
	r := sh.key.r
	rank := int(j.rank)
	// The quota deficit, per dimension (an unlimited ceiling has none).
	qd := deficit{g: max(over.gpus, 0), c: posFinite(over.cpus), m: posFinite(over.mem)}
	needJobs := max(over.jobs, 0)
	// With a quota deficit every node's deficit is unmet, so a node fails
	// exactly when its candidates cannot cover it: monotone while capacity
	// shrinks, which makes a failure safe to remember.
	memo := !qd.met() || needJobs > 0
	eligible := func(h *holder) bool { return ownVictim(h, pr, rank) }
	ps.lookedForOwn = true
	if !ps.hasOwnVictims(pr, rank) {
		return nil, nil // nothing to search: the outcome depends on no node
	}
	// Every set found below is of own jobs on one node that cover the
	// quota deficit and number at least needJobs, and no node holds more
	// than all of them: when all of them fall short, the search fails on
	// every node, whatever their state, as the loop over them would find.
	// That rests on the project's jobs only (see decision.bounded).
	if n, all := ownBound(pr, rank); n < needJobs || !qd.coveredBy(all) {
		ps.bounded, ps.boundN, ps.bound = true, n, all
		return nil, nil
	}
	ps.searched = true
	if memo && pr.ownFailed(sh, rank, ps.stopVersion) {
		return nil, nil
	}
	// Only nodes holding an eligible job can yield victims: visit those,
	// in node order.
	var nodes []*nodeState
	for _, h := range pr.holders {
		if eligible(h) {
			for _, n := range h.nodes {
				if !slices.Contains(nodes, n) {
					nodes = append(nodes, n)
				}
			}
		}
	}
	slices.SortFunc(nodes, func(a, b *nodeState) int { return compareInt(a.idx, b.idx) })
	var best []*holder
	var bestNode *nodeState
	for _, n := range nodes {
		if !n.fitsEmpty(r) {
			continue
		}
		nd := deficit{g: r.g - (n.capG - n.usedG + n.stopG - n.resvG), c: r.c - (n.capC - n.usedC + n.stopC - n.resvC),
			m: r.m - (n.capM - n.usedM + n.stopM - n.resvM)}
		d := deficit{g: max(nd.g, qd.g), c: math.Max(nd.c, qd.c), m: math.Max(nd.m, qd.m)}
		var cands []*holder
		var sum deficit
		for _, h := range n.holders {
			if eligible(h) && !slices.Contains(cands, h) {
				cands = append(cands, h)
				sum.g, sum.c, sum.m = sum.g+h.res.g, sum.c+h.res.c, sum.m+h.res.m
			}
		}
		var set []*holder
		if len(cands) >= needJobs && d.coveredBy(sum) {
			slices.SortFunc(cands, compareVictims)
			set = minimalSet(cands, d)
			if set == nil && d.met() {
				set = []*holder{}
			}
			for _, h := range cands { // a job-count deficit needs whole victims
				if len(set) >= needJobs {
					break
				}
				if !slices.Contains(set, h) {
					set = append(set, h)
				}
			}
		}
		if len(set) == 0 && len(cands) >= needJobs {
			// cands is this node's own list, not read again: sorting it
			// in place is fine.
			set = ps.ownThenOthers(n, pr, rank, sh.need, cands, nd, qd, needJobs)
		}
		if len(set) == 0 {
			continue
		}
		if best == nil || compareSets(set, best) < 0 {
			best, bestNode = set, n
		}
	}
	if best == nil {
		if memo {
			pr.recordOwnFailure(sh, rank, ps.stopVersion)
		}
		return nil, nil
	}
	return best, []*nodeState{bestNode}
}

// ownThenOthers is preemptOwn's second try on node n, when the project's
// own victims there free its quota (qd, needJobs) but not the node (nd):
// the fewest own victims that free the quota, then the fewest of the
// remaining candidates on the node — own jobs of lower priority, and other
// projects' jobs that victimFor allows, reclaiming when the job is within
// its project's guarantee once its own victims are gone. As in Kueue
// (preemption_test.go "preempt from all ClusterQueues in cohort"), freeing
// a guarantee may need both at once. Nil when no such set exists.
func (ps *poolState) ownThenOthers(n *nodeState, pr *projState, rank int, need limits, own []*holder, nd, qd deficit, needJobs int) []*holder {
	slices.SortFunc(own, compareVictims)
	ownSet := minimalSet(own, qd)
	if ownSet == nil && qd.met() {
		ownSet = []*holder{}
	}
	for _, h := range own {
		if len(ownSet) >= needJobs {
			break
		}
		if !slices.Contains(ownSet, h) {
			ownSet = append(ownSet, h)
		}
	}
	if ownSet == nil || len(ownSet) < needJobs {
		return nil
	}
	var freed limits
	var got deficit
	rest := nd
	for _, h := range ownSet {
		freed = freed.plus(h.gang)
		got = got.plus(h.res)
		rest.g, rest.c, rest.m = rest.g-h.res.g, rest.c-h.res.c, rest.m-h.res.m
	}
	if !qd.coveredBy(got) {
		return nil // the own victims here cannot free the quota
	}
	if rest.met() {
		return ownSet
	}
	reclaim := pr.rule.has && pr.rule.guaranteed.fitsBeside(pr.used.minus(freed), pr.claimed, need)
	var cands []*holder
	var sum deficit
	for _, h := range n.holders {
		if slices.Contains(ownSet, h) || slices.Contains(cands, h) || !victimFor(h, pr.name, rank, reclaim, ps.open) {
			continue
		}
		cands = append(cands, h)
		sum.g, sum.c, sum.m = sum.g+h.res.g, sum.c+h.res.c, sum.m+h.res.m
	}
	if !rest.coveredBy(sum) {
		return nil
	}
	more := minimalSet(cands, rest)
	if more == nil {
		return nil
	}
	return append(slices.Clone(ownSet), more...)
}

// ownVictim reports whether h, one of the project's running jobs, could be
// stopped for the project's own job of the given rank.
func ownVictim(h *holder, pr *projState, rank int) bool {
	return !h.stopping && h.preemptible && h.rank < rank && h.project == pr.name
}

// hasOwnVictims reports whether any of the project's running jobs could be
// stopped for its own job of the given rank. The answer holds until one of
// the project's jobs starts stopping (stopVer), the only way a job stops
// being one.
func (ps *poolState) hasOwnVictims(pr *projState, rank int) bool {
	if rank < 0 || rank >= len(pr.victims) {
		return slices.ContainsFunc(pr.holders, func(h *holder) bool { return ownVictim(h, pr, rank) })
	}
	if pr.victimsVer != pr.stopVer+1 {
		pr.victims, pr.victimsVer = [4]int8{}, pr.stopVer+1
	}
	if pr.victims[rank] == 0 {
		pr.victims[rank] = 1
		if slices.ContainsFunc(pr.holders, func(h *holder) bool { return ownVictim(h, pr, rank) }) {
			pr.victims[rank] = 2
		}
	}
	return pr.victims[rank] == 2
}

// ownBound is how many of the project's jobs could be stopped for its own
// job of the given rank (as ownVictim decides; pr.holders are all the
// project's), and what they hold per node, each counted once (positive
// amounts only, so that it bounds what any of its subsets holds).
func ownBound(pr *projState, rank int) (int, deficit) {
	var all deficit
	n := 0
	for _, h := range pr.holders {
		if !h.stopping && h.preemptible && h.rank < rank {
			n++
			all.g += max(h.res.g, 0)
			if h.res.c > 0 {
				all.c += h.res.c
			}
			if h.res.m > 0 {
				all.m += h.res.m
			}
		}
	}
	return n, all
}

// ownStopping is what the project's stopping jobs in the pool hold: usage
// that is about to be freed. The total is summed in the order a scan of the
// nodes (by index, then each node's holders) first meets each holder, so
// that floating-point sums do not depend on when holders began stopping.
func (ps *poolState) ownStopping(pr *projState) limits {
	if !pr.stopDirty {
		return pr.stopSum
	}
	slices.SortFunc(pr.stopHolders, func(a, b *holder) int {
		if c := compareInt(firstNode(a), firstNode(b)); c != 0 {
			return c
		}
		return compareInt(a.seq, b.seq)
	})
	var l limits
	for _, h := range pr.stopHolders {
		l = l.plus(h.gang)
	}
	pr.stopSum, pr.stopDirty = l, false
	return l
}

// addStopping records that h, one of the project's holders on the pool's
// nodes, is stopping.
func (pr *projState) addStopping(h *holder) {
	pr.stopHolders = append(pr.stopHolders, h)
	pr.stopDirty = true
	pr.stopVer++
}

// firstNode is the lowest index among the holder's nodes.
func firstNode(h *holder) int {
	m := math.MaxInt
	for _, n := range h.nodes {
		m = min(m, n.idx)
	}
	return m
}

// ownFailure is a preemptOwn search that found no victims. Within a pass,
// until victims are chosen (stopVersion) or the project's use changes
// (usedVer), capacity only shrinks and candidates stay the same, so the
// same search fails again.
type ownFailure struct {
	sh          *shape
	rank        int
	usedVer     int
	stopVersion int
}

func (pr *projState) ownFailed(sh *shape, rank, stopVersion int) bool {
	for _, f := range pr.ownFail {
		if f.sh == sh && f.rank == rank {
			return f.usedVer == pr.usedVer && f.stopVersion == stopVersion
		}
	}
	return false
}

func (pr *projState) recordOwnFailure(sh *shape, rank, stopVersion int) {
	f := ownFailure{sh: sh, rank: rank, usedVer: pr.usedVer, stopVersion: stopVersion}
	for i := range pr.ownFail {
		if pr.ownFail[i].sh == sh && pr.ownFail[i].rank == rank {
			pr.ownFail[i] = f
			return
		}
	}
	pr.ownFail = append(pr.ownFail, f)
}

func posFinite(x float64) float64 {
	if math.IsInf(x, 0) || math.IsNaN(x) || x < 0 {
		return 0
	}
	return x
}
