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
	if j.sh.key.k != 1 {
		return nil, nil
	}
	r := j.sh.key.r
	rank := int(j.rank)
	// The quota deficit, per dimension (an unlimited ceiling has none).
	qd := deficit{g: max(over.gpus, 0), c: posFinite(over.cpus), m: posFinite(over.mem)}
	needJobs := max(over.jobs, 0)
	eligible := func(h *holder) bool {
		return !h.stopping && !h.placed && h.preemptible && h.rank < rank && h.project == j.pr.name
	}
	var best []*holder
	var bestNode *nodeState
	for _, n := range ps.nodes {
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
		if len(cands) < needJobs || !d.coveredBy(sum) {
			continue
		}
		slices.SortFunc(cands, compareVictims)
		set := minimalSet(cands, d)
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
		if set == nil || len(set) == 0 {
			continue
		}
		if best == nil || compareSets(set, best) < 0 {
			best, bestNode = set, n
		}
	}
	if best == nil {
		return nil, nil
	}
	return best, []*nodeState{bestNode}
}

// ownStopping is what the project's stopping jobs in the pool hold: usage
// that is about to be freed.
func (ps *poolState) ownStopping(project string) limits {
	var l limits
	var seen []*holder
	for _, n := range ps.nodes {
		for _, h := range n.holders {
			if h.stopping && !h.placed && h.project == project && !slices.Contains(seen, h) {
				seen = append(seen, h)
				l = l.plus(h.gang)
			}
		}
	}
	return l
}

func posFinite(x float64) float64 {
	if math.IsInf(x, 0) || math.IsNaN(x) || x < 0 {
		return 0
	}
	return x
}
