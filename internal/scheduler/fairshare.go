package scheduler

// Fair share: the order in which a pool's queue is decided, by project
// share within each priority tier.

// share is the project's fair-share key: lower goes first.
func (p *projState) share() float64 { return (p.usage + p.alloc) / p.shares }

// mergeRun is one project's jobs of one tier, in merge.
type mergeRun struct {
	proj  *projState
	off   int // index in merge's jobs of jobs[0]
	jobs  []job
	share float64
}

// merge visits jobs (sorted by tier, project, submit time, id) in queue
// order and decides each. Within a tier, a heap of per-project runs ordered
// by (fair share, head submit time, head id) gives the order; a start raises
// only that project's share, so the heap is fixed by sifting the top down.
// A run stays on top, without touching the heap, while its next job orders
// before both of the top's children. With allowDefer (the first phase) it
// appends to later the indexes in jobs of the jobs left for the second
// phase, and returns it.
func (ps *poolState) merge(jobs []job, allowDefer bool, later []int) []int {
	less := func(a, b *mergeRun) bool {
		if a.share != b.share {
			return a.share < b.share
		}
		x, y := &a.jobs[0], &b.jobs[0]
		if x.sec != y.sec {
			return x.sec < y.sec
		}
		if x.nsec != y.nsec {
			return x.nsec < y.nsec
		}
		return x.id < y.id
	}
	heap := ps.heapBuf[:0]
	runs := ps.runBuf[:0]
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= len(heap) {
				return
			}
			m := l
			if r := l + 1; r < len(heap) && less(heap[r], heap[l]) {
				m = r
			}
			if !less(heap[m], heap[i]) {
				return
			}
			heap[i], heap[m] = heap[m], heap[i]
			i = m
		}
	}
	for start := 0; start < len(jobs); {
		end := start
		for end < len(jobs) && jobs[end].tier == jobs[start].tier {
			end++
		}
		heap, runs = heap[:0], runs[:0]
		for a := start; a < end; {
			b := a
			for b < end && jobs[b].proj == jobs[a].proj {
				b++
			}
			pr := ps.pr(&jobs[a])
			runs = append(runs, mergeRun{proj: pr, off: a, jobs: jobs[a:b], share: pr.share()})
			a = b
		}
		for i := range runs {
			heap = append(heap, &runs[i])
		}
		for i := len(heap)/2 - 1; i >= 0; i-- {
			down(i)
		}
		for len(heap) > 0 {
			top := heap[0]
			for {
				// The common case, inline: a job whose class decision is
				// memoised at this state (see decideJob).
				j := &top.jobs[0]
				if ps.decidedFirst && j.flags&jobBeneficiary != 0 {
					// Decided in phase 0.
					top.jobs, top.off = top.jobs[1:], top.off+1
					if len(top.jobs) == 0 || len(heap) > 1 && less(heap[1], top) || len(heap) > 2 && less(heap[2], top) {
						break
					}
					continue
				}
				if m := ps.memo[ps.memoIndex(j, allowDefer)]; m.ver == int32(ps.stateVer+1) && j.rank >= 0 && j.flags&jobNotBefore == 0 &&
					!ps.backoffZero && (j.timeout <= 0 || len(ps.reserved) == 0 || !ps.mayBackfill(j)) && !memoOff {
					d, wb := &ps.decs[m.dec], ps.waiting
					if d.deferred {
						later = append(later, top.off)
					} else {
						ps.emitDecision(j, d)
					}
					if ps.vlog != nil {
						ps.logVisit(top, j, ps.stateVer, wb, false, d.deferred, d.dep)
					}
					top.jobs, top.off = top.jobs[1:], top.off+1
					if len(top.jobs) == 0 || len(heap) > 1 && less(heap[1], top) || len(heap) > 2 && less(heap[2], top) {
						break
					}
					continue
				}
				seg, wb := ps.stateVer, ps.waiting
				ps.fresh = false
				placed, deferred := ps.decideJob(j, allowDefer)
				if ps.vlog != nil {
					ps.logVisit(top, j, seg, wb, placed, deferred, ps.dep)
				}
				if deferred {
					later = append(later, top.off)
				}
				top.jobs, top.off = top.jobs[1:], top.off+1
				if placed {
					top.share = top.proj.share()
					break
				}
				if len(top.jobs) == 0 || len(heap) > 1 && less(heap[1], top) || len(heap) > 2 && less(heap[2], top) {
					break
				}
			}
			if len(top.jobs) == 0 {
				heap[0] = heap[len(heap)-1]
				heap = heap[:len(heap)-1]
			}
			down(0)
		}
		start = end
	}
	ps.heapBuf, ps.runBuf = heap, runs
	return later
}
