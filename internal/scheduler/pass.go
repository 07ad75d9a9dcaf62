package scheduler

import (
	"cmp"
	"slices"
	"time"

	"trainyard/internal/domain"
)

func newPass(s Snapshot, cfg Config) *pass {
	return &pass{s: s, cfg: cfg, budget: cfg.MaxPreemptionsPerCycle}
}

func (p *pass) run() Plan {
	s := p.s

	pools := canonicalPools(s.Pools)
	quotas := map[[2]string]*domain.Quota{}
	qs := slices.Clone(s.Quotas)
	slices.SortFunc(qs, func(a, b domain.Quota) int {
		return cmp.Or(cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Project, b.Project), b.UpdatedAt.Compare(a.UpdatedAt))
	})
	for i := range qs {
		k := [2]string{qs[i].Project, qs[i].Pool}
		if _, dup := quotas[k]; !dup {
			quotas[k] = &qs[i]
		}
	}
	p.quotaPools = map[string]bool{}
	for _, q := range qs {
		p.quotaPools[q.Pool] = true
	}
	shares := map[string]float64{}
	prs := slices.Clone(s.Projects)
	slices.SortFunc(prs, func(a, b domain.Project) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Shares, b.Shares))
	})
	for _, pr := range prs {
		if _, dup := shares[pr.Name]; !dup && pr.Shares > 0 {
			shares[pr.Name] = pr.Shares
		}
	}
	usage := map[[2]string]float64{}
	us := slices.Clone(s.Usage)
	slices.SortFunc(us, func(a, b Usage) int {
		return cmp.Or(cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Project, b.Project), cmp.Compare(a.Value, b.Value))
	})
	for _, u := range us {
		if u.Value > 0 {
			usage[[2]string{u.Project, u.Pool}] += u.Value
		}
	}

	// Pending and running, deduplicated by job id (a job both running and
	// pending counts as running), grouped by pool in id order.
	running := make([]*Allocation, len(s.Running))
	for i := range s.Running {
		running[i] = &s.Running[i]
	}
	// Stores list jobs by id: check that in one sweep before sorting
	// (duplicate ids need the sort's tie-break).
	if !increasing(running, func(a *Allocation) int64 { return a.JobID }) {
		slices.SortFunc(running, func(a, b *Allocation) int {
			if a.JobID != b.JobID {
				return compareInt64(a.JobID, b.JobID)
			}
			return cmp.Or(cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Project, b.Project), a.StartedAt.Compare(b.StartedAt))
		})
	}
	running = slices.CompactFunc(running, func(a, b *Allocation) bool { return a.JobID == b.JobID })
	if p.queues != nil {
		p.runQueues(pools, quotas, shares, usage, running)
		return p.plan
	}
	// As for running jobs: a store lists them by id. One sweep, while
	// they come in that order, takes those not running and notes whether
	// they come grouped by pool.
	sc := p.scratch
	var pending []*Pending
	if sc != nil {
		pending = grow(&sc.pending, len(s.Pending))[:0]
		defer sc.release()
	} else {
		pending = make([]*Pending, 0, len(s.Pending))
	}
	inOrder, grouped := true, true
	ri := 0
	for i := range s.Pending {
		pd := &s.Pending[i]
		if i > 0 && pd.JobID <= s.Pending[i-1].JobID {
			inOrder = false
			break
		}
		for ri < len(running) && running[ri].JobID < pd.JobID {
			ri++
		}
		if ri < len(running) && running[ri].JobID == pd.JobID {
			continue
		}
		if n := len(pending); n > 0 && pending[n-1].Pool != pd.Pool && pending[n-1].Pool > pd.Pool {
			grouped = false
		}
		pending = append(pending, pd)
	}
	if !inOrder {
		pending = pending[:len(s.Pending)]
		for i := range s.Pending {
			pending[i] = &s.Pending[i]
		}
		slices.SortFunc(pending, func(a, b *Pending) int {
			if a.JobID != b.JobID {
				return compareInt64(a.JobID, b.JobID)
			}
			return cmp.Or(cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Project, b.Project), a.SubmittedAt.Compare(b.SubmittedAt))
		})
		pending = slices.CompactFunc(pending, func(a, b *Pending) bool { return a.JobID == b.JobID })
		ri = 0
		pending = slices.DeleteFunc(pending, func(j *Pending) bool {
			for ri < len(running) && running[ri].JobID < j.JobID {
				ri++
			}
			return ri < len(running) && running[ri].JobID == j.JobID
		})
		grouped = false
	}
	sortByPool(running, func(a *Allocation) string { return a.Pool })
	if !grouped {
		sortByPool(pending, func(a *Pending) string { return a.Pool })
	}
	p.plan.Waiting = make([]Waiting, 0, len(pending))

	pi := 0
	ri = 0
	for _, pool := range pools {
		for pi < len(pending) && pending[pi].Pool < pool.Name {
			p.unknownPool(pending, &pi)
		}
		pj := pi
		for pj < len(pending) && pending[pj].Pool == pool.Name {
			pj++
		}
		for ri < len(running) && running[ri].Pool < pool.Name {
			ri++
		}
		rj := ri
		for rj < len(running) && running[rj].Pool == pool.Name {
			rj++
		}
		ps := p.newPoolState(pool, quotas, shares, usage, running[ri:rj], nil)
		q := buildQueueIn(pending[pi:pj], sc)
		ps.walk(q)
		if sc != nil {
			sc.decs = q.decs // prepareMemo replaced it if it was too short
			sc.decsN = max(sc.decsN, len(q.decs))
		}
		pi, ri = pj, rj
	}
	for pi < len(pending) {
		p.unknownPool(pending, &pi)
	}
	return p.plan
}

// Scratch is working memory for full passes (ScheduleIn) that a caller
// scheduling again and again keeps between them: a full pass over
// 100,000 pending jobs would otherwise allocate, clear and then collect
// megabytes of queue records it throws away. The zero value is ready. A
// Scratch is not safe for concurrent use; between passes it holds nothing
// of a snapshot (queue records and positions hold no pointers, and what
// does is cleared when the pass ends).
type Scratch struct {
	pending []*Pending
	recs    []job
	dest    []int32
	decs    []decision
	decsN   int // how many of decs the pass filled, at most
}

// release drops what sc holds of the pass that just ended.
func (sc *Scratch) release() {
	clear(sc.pending)
	clear(sc.decs[:sc.decsN])
	sc.pending, sc.decs, sc.decsN = sc.pending[:0], sc.decs[:0], 0
}

// runQueues decides every pool from queues kept between passes (see
// ScheduleQueues): every pending job is in a queue of a pool in the snapshot,
// and none is running.
func (p *pass) runQueues(pools []domain.Pool, quotas map[[2]string]*domain.Quota, shares map[string]float64,
	usage map[[2]string]float64, running []*Allocation) {
	qs := p.qs
	qs.passes++
	prev := p.prev
	// running is in id order here.
	edited := false
	if p.last != nil && qs.sameInputs(&p.s, p.cfg, pools, running, p.changed) {
		var plan Plan
		var ok bool
		plan, ok, edited = qs.replay(pools, p.last)
		if ok {
			p.plan = plan
			return
		}
		if edited {
			prev = nil // the failed replay edited it
		}
	}
	// A told pass takes a pool's part of the previous plan when nothing
	// the pool's walk reads changed (see reusable).
	var runChanged []string
	same := p.told && qs.sameShared(&p.s, p.cfg)
	if !same {
		prev = nil
	}
	if prev != nil {
		runChanged = qs.runningPools(running, p.changed)
	}
	// A pool whose changes are a few projects' may patch the previous
	// plan instead (see patch.go), read from prev or from the last plan
	// handed back.
	src := prev
	if src == nil && same && !edited {
		src = p.last
	}
	var runProjs []poolProject
	if src != nil {
		runProjs = qs.runningProjects(running, p.changed)
	}
	qs.remember(&p.s, p.cfg, pools, running)
	sortByPool(running, func(a *Allocation) string { return a.Pool })
	n := 0
	for _, q := range p.queues {
		n += len(q.jobs)
	}
	if p.waitBuf != nil && cap(p.waitBuf) >= n {
		p.plan.Waiting = p.waitBuf[:0]
	} else {
		p.plan.Waiting = make([]Waiting, 0, n+n/16)
	}
	ri := 0
	empty := &queue{}
	var nowR nowRange // the pools' together
	for _, pool := range pools {
		for ri < len(running) && running[ri].Pool < pool.Name {
			ri++
		}
		rj := ri
		for rj < len(running) && running[rj].Pool == pool.Name {
			rj++
		}
		q := p.queues[pool.Name]
		var mc *memoConfig
		var allocs *allocCache
		if q != nil {
			mc = &memoConfig{pool: pool, quotas: poolQuotas(quotas, pool.Name), cfg: p.cfg}
			allocs = &q.allocs
			mc.same = q.cfg != nil && q.cfg.equal(mc)
			if !p.told || !mc.same {
				allocs.valid = false // node order may differ: resolve afresh
			}
			if prev != nil && mc.same && !slices.Contains(runChanged, pool.Name) && p.reuse(q, prev) ||
				src != nil && mc.same && p.patch(q, pool, mc, quotas, shares, usage, running[ri:rj], src, runProjs) {
				nowR.and(q.out.nowR)
				ri = rj
				continue
			}
		} else {
			q = empty
		}
		p.nowR = nowRange{}
		out := poolOut{pass: qs.passes, start: len(p.plan.Start), preempt: len(p.plan.Preempt), wait: len(p.plan.Waiting),
			budgetIn: p.budget, now: p.s.Now}
		ps := p.newPoolState(pool, quotas, shares, usage, running[ri:rj], allocs)
		ps.memoCfg = mc
		ps.walk(q)
		nowR.and(p.nowR)
		if q != empty {
			out.nStart, out.nPreempt, out.nWait = len(p.plan.Start)-out.start, len(p.plan.Preempt)-out.preempt, len(p.plan.Waiting)-out.wait
			out.budgetOut, out.nowR = p.budget, p.nowR
			q.out, q.dirty = out, false
		}
		ri = rj
	}
	p.nowR = nowR
	qs.last.nowR = nowR
}

// poolQuotas lists the quotas in effect in one pool, by project.
func poolQuotas(quotas map[[2]string]*domain.Quota, pool string) []domain.Quota {
	var out []domain.Quota
	for k, q := range quotas {
		if k[1] == pool {
			out = append(out, *q)
		}
	}
	slices.SortFunc(out, func(a, b domain.Quota) int { return cmp.Compare(a.Project, b.Project) })
	return out
}

// sortByPool stably sorts by pool name; most snapshots have one pool or
// are already grouped, which a check finds in one sweep (equal names,
// the common case, compare without ordering them).
func sortByPool[T any](xs []*T, pool func(*T) string) {
	for i := 1; i < len(xs); i++ {
		if a, b := pool(xs[i-1]), pool(xs[i]); a != b && a > b {
			slices.SortStableFunc(xs, func(a, b *T) int { return cmp.Compare(pool(a), pool(b)) })
			return
		}
	}
}

// unknownPool reports the pending jobs of one pool that is not in the
// snapshot, starting at *i, in queue order.
func (p *pass) unknownPool(pending []*Pending, i *int) {
	j := *i
	for j < len(pending) && pending[j].Pool == pending[*i].Pool {
		j++
	}
	group := slices.Clone(pending[*i:j])
	slices.SortFunc(group, func(a, b *Pending) int {
		return cmp.Or(cmp.Compare(b.Priority.Rank(), a.Priority.Rank()), a.SubmittedAt.Compare(b.SubmittedAt), cmp.Compare(a.JobID, b.JobID))
	})
	for _, pd := range group {
		p.plan.Waiting = append(p.plan.Waiting, Waiting{JobID: pd.JobID, Reason: domain.ReasonNoCapacity,
			Message: "pool " + quoteName(pd.Pool) + " does not exist; resubmit the job to an existing pool"})
	}
	*i = j
}

func quoteName(s string) string {
	if s == "" {
		return `""`
	}
	return s
}

func canonicalPools(in []domain.Pool) []domain.Pool {
	pools := slices.Clone(in)
	slices.SortFunc(pools, func(a, b domain.Pool) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), b.UpdatedAt.Compare(a.UpdatedAt), cmp.Compare(len(b.Nodes), len(a.Nodes)))
	})
	return slices.CompactFunc(pools, func(a, b domain.Pool) bool { return a.Name == b.Name })
}

// walk visits the pool's queue in order and decides each job.
func (ps *poolState) walk(q *queue) {
	var lg *visitLog
	if ps.memoCfg != nil {
		lg = q.startLog()
	}
	ps.walkJobs(q, q.jobs, lg)
}

// walkJobs is walk over jobs, q's or some of them in q's order, logging
// the visits to lg when set.
func (ps *poolState) walkJobs(q *queue, jobs []job, lg *visitLog) {
	ps.q = q
	ps.prs = make([]*projState, len(q.projs))
	ps.shs = make([]*shape, len(q.shapes))
	for rank, pr := range domain.Priorities() {
		ps.accept[rank] = len(ps.pool.Priorities) == 0 || slices.Contains(ps.pool.Priorities, pr)
	}
	ps.backoffZero = time.Time{}.After(ps.now)
	c := ps.memoCfg
	if c == nil {
		c = &memoConfig{pool: ps.pool, cfg: ps.cfg}
	}
	q.prepareMemo(c)
	ps.memo, ps.decs, ps.stateVer = q.memo, q.decs, q.stateVer
	ps.vlog = lg
	defer func() {
		q.decs, q.stateVer = ps.decs, ps.stateVer+1
		if ps.vlog != nil {
			ps.vlog.endSeg[ps.phase] = int32(ps.stateVer)
			ps.vlog.waitN = ps.waiting
		}
	}()

	// Phase 0: jobs that others were preempted for, so that the room
	// their victims leave is theirs. Phase 1: jobs within their project's
	// guarantee. Phase 2: jobs that need borrowed capacity, so borrowing
	// only takes capacity that no job within its guarantee wants in this
	// pass.
	if q.beneficiaries > 0 {
		first := make([]job, 0, q.beneficiaries)
		for _, j := range jobs {
			if j.flags&jobBeneficiary != 0 {
				first = append(first, j)
			}
		}
		ps.merge(first, false, nil)
		ps.decidedFirst = true // the later phases skip them
	}
	ps.endPhase(1)
	later := ps.merge(jobs, true, ps.laterBuf[:0])
	ps.endPhase(2)
	if len(later) == 0 {
		return
	}
	slices.Sort(later) // queue order
	deferred := make([]job, len(later))
	for i, x := range later {
		deferred[i] = jobs[x]
	}
	ps.laterBuf = later
	ps.merge(deferred, false, nil)
}

// endPhase ends the walk's phase and starts the next.
func (ps *poolState) endPhase(next int) {
	if ps.vlog != nil {
		ps.vlog.endSeg[ps.phase] = int32(ps.stateVer)
	}
	ps.phase = next
}

// increasing reports whether key strictly increases along xs (running jobs
// by id, as a store lists them; GPU indices as nodes list them), which
// lets a pass skip sorting.
func increasing[T any, K cmp.Ordered](xs []T, key func(T) K) bool {
	for i := 1; i < len(xs); i++ {
		if key(xs[i]) <= key(xs[i-1]) {
			return false
		}
	}
	return true
}
