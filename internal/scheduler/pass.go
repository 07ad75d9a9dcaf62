package scheduler

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"trainyard/internal/domain"
)

// pass is one run of Schedule. Only Schedule's goroutine touches it.
type pass struct {
	s      Snapshot
	cfg    Config
	plan   Plan
	budget int // preemptions left in this pass
	// quotaPools are the pools where some project has a quota; the others
	// are open.
	quotaPools map[string]bool
	// queues, when set, are the pending jobs by pool, kept between passes;
	// Snapshot.Pending is then not read.
	queues map[string]*queue
	// waitBuf, when large enough, is reused for plan.Waiting (Incremental
	// keeps it between passes).
	waitBuf []Waiting
	// changed, when told is set, lists (ascending) the ids of the pending
	// and running jobs that may differ from the previous pass's
	// (Incremental.ScheduleChanged); a running job not in it holds what it
	// held, so its resolved allocation is reused.
	changed []int64
	told    bool
	// Scratch reused by every pool's walk.
	markBuf  []*holder
	heapBuf  []*mergeRun
	runBuf   []mergeRun
	laterBuf []int
}

// reservation is capacity held for a waiting job, for messages.
type reservation struct {
	job  int64
	rank int
	est  time.Time
}

// projState is one project in one pool.
type projState struct {
	name string
	rule quotaRule
	used limits // held by its running jobs and placements of this pass
	// claimed is quota its waiting jobs hold in this pass: those waiting
	// for victims or stopping jobs to free room (counted as if running, so
	// that one reclaim is not made again by every queued job of the
	// project), and the need of its first job blocked by its own quota
	// (so that a stream of smaller jobs behind it cannot starve it).
	// claimBy is the first job that claimed, for messages.
	claimed limits
	claimBy int64
	held    bool // a job blocked by the project's quota holds it
	// usedByRank is used by priority rank, without stopping jobs: a job's
	// borrowing is judged against what its project's jobs of its own or
	// higher priority use, as markBorrowed decides which running jobs are
	// borrowed (its lower-priority jobs would be the borrowed ones).
	usedByRank [4]limits
	usage      float64 // decayed historical usage
	alloc      float64 // current allocation share
	shares     float64
	msgs       map[quotaMsgKey]string // quota messages for the current use
	// borrowedHolders counts its running jobs on borrowed capacity.
	borrowedHolders int
	// usedVer is bumped whenever used changes, stopVer whenever one of its
	// jobs starts stopping (memo validity).
	usedVer int
	stopVer int
	// stopHolders are its stopping holders on the pool's nodes; stopSum is
	// their total (valid unless stopDirty), see ownStopping.
	stopHolders []*holder
	stopSum     limits
	stopDirty   bool
	// ownFail memoises failed searches of preemptOwn.
	ownFail []ownFailure
	// holders are its running jobs from the snapshot on the pool's nodes.
	holders []*holder
	// victims caches hasOwnVictims by job rank (0 unknown, 1 none, 2
	// some) while victimsVer is stopVer+1.
	victims    [4]int8
	victimsVer int
}

func (p *projState) share() float64 { return (p.usage + p.alloc) / p.shares }

// poolState is one pool during a pass.
type poolState struct {
	*pass
	now     time.Time
	pool    domain.Pool
	open    bool // no project has a quota here: one queue (see quotaRule)
	capa    domain.Limits
	nodes   []*nodeState // by name
	byName  map[string]*nodeState
	maxG    int
	maxC    float64
	maxM    float64
	ix      nodeIndex
	running int
	projs   map[string]*projState
	holders []*holder // by job id

	reserved      []*nodeState // nodes holding reservations, in the order reserved
	holds         []reservation
	capacityHolds int // plain capacity reservations made (bounded by ReservationsPerPool)
	stoppingNodes int // nodes with stopping holders
	stopVersion   int // bumped when victims are chosen

	preemptFail map[preemptKey]bool
	msgs        msgCache
	version     int // bumped whenever available capacity changes
	waiting     int // waiting entries emitted for this pool
	project     func(name string) *projState

	q            *queue
	prs          []*projState // by job.proj
	shs          []*shape     // by job.shape
	accept       [4]bool      // by priority rank: the pool accepts it
	backoffZero  bool         // a zero NotBefore is after Now
	memo         []memoEntry
	decs         []decision // what memo entries point at
	stateVer     int        // bumped by every decision that changes state
	last         decision   // what wait recorded last
	kind         uint8      // what decide's outcome depends on (memo kinds)
	decidedFirst bool       // beneficiaries were decided in phase 0 (walk)
	searched     bool       // decide relied on preemptOwn failing with eligible victims
	lookedForOwn bool       // decide asked preemptOwn (see decision.noVictims)
	// memoCfg is what the pool's decisions depend on besides its state,
	// when its queue is kept between passes (runQueues).
	memoCfg *memoConfig
	// resvAppended: capacityMessage appended the job's reservedText to
	// resvBase.
	resvAppended bool
	resvBase     string
	rtCache      map[rtKey]string
	rtVer        int
}

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
	pending := make([]*Pending, len(s.Pending))
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
	ri := 0
	pending = slices.DeleteFunc(pending, func(j *Pending) bool {
		for ri < len(running) && running[ri].JobID < j.JobID {
			ri++
		}
		return ri < len(running) && running[ri].JobID == j.JobID
	})
	sortByPool(running, func(a *Allocation) string { return a.Pool })
	sortByPool(pending, func(a *Pending) string { return a.Pool })
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
		ps.walk(buildQueue(pending[pi:pj]))
		pi, ri = pj, rj
	}
	for pi < len(pending) {
		p.unknownPool(pending, &pi)
	}
	return p.plan
}

// runQueues decides every pool from queues kept between passes (see
// Incremental): every pending job is in a queue of a pool in the snapshot,
// and none is running.
func (p *pass) runQueues(pools []domain.Pool, quotas map[[2]string]*domain.Quota, shares map[string]float64,
	usage map[[2]string]float64, running []*Allocation) {
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
		} else {
			q = empty
		}
		ps := p.newPoolState(pool, quotas, shares, usage, running[ri:rj], allocs)
		ps.memoCfg = mc
		ps.walk(q)
		ri = rj
	}
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
// are already grouped, which a check finds in one sweep.
func sortByPool[T any](xs []*T, pool func(*T) string) {
	cmpPool := func(a, b *T) int { return cmp.Compare(pool(a), pool(b)) }
	if !slices.IsSortedFunc(xs, cmpPool) {
		slices.SortStableFunc(xs, cmpPool)
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
	for n, pd := range group {
		p.plan.Waiting = append(p.plan.Waiting, Waiting{JobID: pd.JobID, Reason: domain.ReasonNoCapacity,
			Message: "pool " + quoteName(pd.Pool) + " does not exist; resubmit the job to an existing pool", Position: n + 1})
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

func (p *pass) newPoolState(pool domain.Pool, quotas map[[2]string]*domain.Quota, shares map[string]float64,
	usage map[[2]string]float64, running []*Allocation, cache *allocCache) *poolState {
	ps := &poolState{pass: p, now: p.s.Now, pool: pool, capa: pool.Capacity(), byName: make(map[string]*nodeState, len(pool.Nodes)),
		projs: map[string]*projState{}, preemptFail: map[preemptKey]bool{}, open: !p.quotaPools[pool.Name]}
	nodes := slices.Clone(pool.Nodes)
	slices.SortFunc(nodes, func(a, b domain.Node) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(len(b.GPUs), len(a.GPUs)), cmp.Compare(b.CPUs, a.CPUs), cmp.Compare(b.Memory, a.Memory))
	})
	nodes = slices.CompactFunc(nodes, func(a, b domain.Node) bool { return a.Name == b.Name })
	// One allocation per kind rather than per node or per job: a pass
	// builds thousands of these.
	totalGPUs := 0
	for _, n := range nodes {
		totalGPUs += len(n.GPUs)
	}
	idSlab := make([]int, totalGPUs)
	usedSlab := make([]bool, totalGPUs)
	nodeSlab := make([]nodeState, len(nodes))
	ps.nodes = make([]*nodeState, 0, len(nodes))
	for i, n := range nodes {
		ids := idSlab[:len(n.GPUs):len(n.GPUs)]
		idSlab = idSlab[len(n.GPUs):]
		copy(ids, n.GPUs)
		if !increasing(ids, func(id int) int { return id }) {
			slices.Sort(ids)
			ids = slices.Compact(ids)
		}
		used := usedSlab[:len(ids):len(ids)]
		usedSlab = usedSlab[len(n.GPUs):]
		ns := &nodeSlab[i]
		*ns = nodeState{idx: len(ps.nodes), name: n.Name, gpuIDs: ids, gpuUsed: used,
			capG: len(ids), capC: max(n.CPUs, 0), capM: float64(max(n.Memory, 0))}
		ps.nodes = append(ps.nodes, ns)
		ps.byName[n.Name] = ns
		ps.maxG, ps.maxC, ps.maxM = max(ps.maxG, ns.capG), max(ps.maxC, ns.capC), max(ps.maxM, ns.capM)
	}

	project := func(name string) *projState {
		pr := ps.projs[name]
		if pr == nil {
			sh := shares[name]
			if sh <= 0 {
				sh = 1
			}
			pr = &projState{name: name, rule: newQuotaRule(pool, ps.capa, quotas[[2]string{name, pool.Name}], ps.open),
				usage: usage[[2]string{name, pool.Name}], shares: sh}
			ps.projs[name] = pr
		}
		return pr
	}

	// Each allocation resolved to node indexes and GPU positions; reused
	// from the last pass for running jobs that did not change.
	resolved, projNames := ps.resolveAllocs(running, cache)
	runProjs := make([]*projState, len(projNames)) // by allocRes.proj
	holderSlab := make([]holder, len(running))
	ps.holders = make([]*holder, 0, len(running)+64)
	nallocs := 0
	count := make([]int32, len(ps.nodes))
	for x := range resolved {
		for _, an := range resolved[x].nodes {
			nallocs++
			if an.n >= 0 {
				count[an.n]++
			}
		}
	}
	nodeRefs := make([]*nodeState, 0, nallocs)
	// Each node's holders, counted first so that one slab holds them all.
	refSlab := make([]*holder, nallocs)
	for i, n := range ps.nodes {
		c := int(count[i])
		n.holders = refSlab[:0:c]
		refSlab = refSlab[c:]
	}
	for x, a := range running {
		ar := &resolved[x]
		res := ar.res
		h := &holderSlab[x]
		*h = holder{id: a.JobID, project: a.Project, rank: ar.rank, res: res, gang: ar.gang,
			start: a.StartedAt, preemptible: a.Preemptible, borrowed: a.Borrowed, stopping: a.Stopping, seq: len(ps.holders)}
		if a.Timeout > 0 {
			h.end = a.StartedAt.Add(a.Timeout)
		}
		mark := len(nodeRefs)
		for _, an := range ar.nodes {
			if an.n < 0 {
				continue // a node that left the pool: nothing to subtract from
			}
			n := ps.nodes[an.n]
			if slices.Contains(nodeRefs[mark:], n) {
				continue
			}
			nodeRefs = append(nodeRefs, n)
			g := 0
			for _, i := range an.gpus {
				if !n.gpuUsed[i] {
					n.gpuUsed[i] = true
					g++
				}
			}
			// GPUs the allocation holds without naming them still count.
			g = max(g, res.g)
			n.usedG += g
			n.usedC += res.c
			n.usedM += res.m
			if h.stopping {
				if n.stopG == 0 && n.stopC == 0 && n.stopM == 0 {
					ps.stoppingNodes++
				}
				n.stopG += res.g
				n.stopC += res.c
				n.stopM += res.m
			}
			n.holders = append(n.holders, h)
		}
		if len(nodeRefs) > mark {
			h.nodes = nodeRefs[mark:len(nodeRefs):len(nodeRefs)]
		}
		ps.holders = append(ps.holders, h)
		ps.running++
		pr := runProjs[ar.proj]
		if pr == nil {
			pr = project(projNames[ar.proj])
			runProjs[ar.proj] = pr
		}
		if h.stopping && len(h.nodes) > 0 {
			pr.addStopping(h)
		}
		if len(h.nodes) > 0 {
			pr.holders = append(pr.holders, h)
		}
		pr.used = pr.used.plus(h.gang)
		if !h.stopping {
			pr.addUse(h, 1)
		}
		pr.alloc += ar.cost
	}
	ps.markBorrowed()
	ps.ix = newNodeIndex(ps.maxG, len(ps.nodes))
	for _, n := range ps.nodes {
		ps.ix.set(n, n.availG())
	}
	ps.project = project
	return ps
}

// markBorrowed decides, from the current allocation, which running jobs
// are borrowed: for each project, its running jobs that are not stopping,
// by priority (highest first), then start time (earliest first), then id,
// fill its guarantee first-fit; those that do not fit are borrowed. So
// "borrowed" never depends on the order jobs arrived in: a project back
// under its guarantee has no borrowed job left, and only borrowed jobs of
// another project may be reclaimed or preempted for it (as in Kueue, where
// capacity inside a ClusterQueue's nominal quota is reclaimed only by that
// queue's own workloads). The snapshot's Allocation.Borrowed is ignored.
func (ps *poolState) markBorrowed() {
	for _, pr := range ps.projs {
		ps.markProject(pr)
	}
}

// markProject is markBorrowed for one project; nodes whose jobs change
// sides have their victim bounds recomputed.
func (ps *poolState) markProject(pr *projState) {
	order := ps.markBuf[:0]
	pr.borrowedHolders = 0
	for _, h := range pr.holders {
		if !h.stopping {
			order = append(order, h)
		}
	}
	slices.SortFunc(order, func(a, b *holder) int {
		return cmp.Or(compareInt(b.rank, a.rank), a.start.Compare(b.start), compareInt64(a.id, b.id))
	})
	var fill limits
	for _, h := range order {
		was := h.borrowed
		h.unentitled = !pr.rule.guaranteed.within(h.gang)
		if next := fill.plus(h.gang); pr.rule.guaranteed.within(next) {
			fill, h.borrowed = next, false
		} else {
			h.borrowed = true
			pr.borrowedHolders++
		}
		if h.borrowed != was {
			for _, n := range h.nodes {
				n.boundOK = false
			}
		}
	}
	ps.markBuf = order
}

// walk visits the pool's queue in order and decides each job.
func (ps *poolState) walk(q *queue) {
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
	defer func() { q.decs, q.stateVer = ps.decs, ps.stateVer+1 }()

	// Phase 0: jobs that others were preempted for, so that the room
	// their victims leave is theirs. Phase 1: jobs within their project's
	// guarantee. Phase 2: jobs that need borrowed capacity, so borrowing
	// only takes capacity that no job within its guarantee wants in this
	// pass.
	if q.beneficiaries > 0 {
		first := make([]job, 0, q.beneficiaries)
		for _, j := range q.jobs {
			if j.flags&jobBeneficiary != 0 {
				first = append(first, j)
			}
		}
		ps.merge(first, false, nil)
		ps.decidedFirst = true // the later phases skip them
	}
	later := ps.merge(q.jobs, true, ps.laterBuf[:0])
	if len(later) == 0 {
		return
	}
	slices.Sort(later) // queue order
	deferred := make([]job, len(later))
	for i, x := range later {
		deferred[i] = q.jobs[x]
	}
	ps.laterBuf = later
	ps.merge(deferred, false, nil)
}

// pr is the job's project state, created on first use.
func (ps *poolState) pr(j *job) *projState {
	pr := ps.prs[j.proj]
	if pr == nil {
		pr = ps.project(ps.q.projs[j.proj])
		ps.prs[j.proj] = pr
	}
	return pr
}

// sh is the job's request shape for this pass.
func (ps *poolState) sh(j *job) *shape {
	sh := ps.shs[j.shape]
	if sh == nil {
		id := ps.q.shapes[j.shape]
		r := domain.Resources{GPUs: id.gpus, CPUs: math.Float64frombits(id.cpus), Memory: domain.ByteSize(id.mem), Nodes: id.nodes}
		sh = &shape{key: shapeKey{perNode(r), max(r.Nodes, 1)}, capable: -1, need: gangLimits(r)}
		ps.shs[j.shape] = sh
	}
	return sh
}

// pd is the job's Pending.
func (ps *poolState) pd(j *job) *Pending { return ps.q.slots[j.slot] }

// backoff reports whether the job's retry backoff has not passed.
func (ps *poolState) backoff(j *job) bool {
	if j.flags&jobNotBefore == 0 {
		return ps.backoffZero
	}
	return ps.pd(j).NotBefore.After(ps.now)
}

// accepted reports whether the pool accepts the job's priority class.
func (ps *poolState) accepted(j *job) bool {
	if j.rank >= 0 {
		return ps.accept[j.rank]
	}
	return len(ps.pool.Priorities) == 0 || slices.Contains(ps.pool.Priorities, ps.pd(j).Priority)
}

// shapeID is a request as map key (integers hash faster than floats).
type shapeID struct {
	gpus  int
	cpus  uint64
	mem   int64
	nodes int
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
					if d := &ps.decs[m.dec]; d.deferred {
						later = append(later, top.off)
					} else {
						ps.emitDecision(j, d)
					}
					top.jobs, top.off = top.jobs[1:], top.off+1
					if len(top.jobs) == 0 || len(heap) > 1 && less(heap[1], top) || len(heap) > 2 && less(heap[2], top) {
						break
					}
					continue
				}
				placed, deferred := ps.decideJob(j, allowDefer)
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

// allocRes is a running allocation resolved against the pool: what the
// pass derives from it that does not change while the allocation and the
// pool's nodes do not.
type allocRes struct {
	id    int64
	proj  int32       // index in allocCache.projs of the job's project
	nodes []allocNode // one per Allocation.Nodes entry, in order
	rank  int
	res   req
	gang  limits
	cost  float64 // costRate against the pool's capacity
}

// allocNode is one node of an allocation: its index in the pool's sorted
// nodes (-1: not in the pool) and the positions in its gpuIDs of the GPUs
// named that it has.
type allocNode struct {
	n    int32
	gpus []int32
}

// allocCache keeps a queue's resolved allocations between passes (by id
// ascending), for passes told what changed.
type allocCache struct {
	res    []allocRes
	valid  bool
	projs  []string // project names, interned
	projIx map[string]int32
}

// resolveAllocs resolves the pool's running allocations (by id ascending),
// reusing cache entries of running jobs the pass was told did not change,
// and leaves the cache holding this pass's.
func (ps *poolState) resolveAllocs(running []*Allocation, cache *allocCache) ([]allocRes, []string) {
	out := make([]allocRes, len(running))
	if cache == nil {
		cache = &allocCache{}
	}
	var old []allocRes
	if cache.valid {
		old = cache.res
	} else {
		cache.projs, cache.projIx = cache.projs[:0], map[string]int32{}
	}
	changed := ps.changed
	k := 0
	for x, a := range running {
		for len(changed) > 0 && changed[0] < a.JobID {
			changed = changed[1:]
		}
		for k < len(old) && old[k].id < a.JobID {
			k++
		}
		if k < len(old) && old[k].id == a.JobID && (len(changed) == 0 || changed[0] != a.JobID) {
			out[x] = old[k]
			continue
		}
		out[x] = ps.resolve(a)
		p, ok := cache.projIx[a.Project]
		if !ok {
			p = int32(len(cache.projs))
			cache.projs = append(cache.projs, a.Project)
			cache.projIx[a.Project] = p
		}
		out[x].proj = p
	}
	cache.res, cache.valid = out, true
	return out, cache.projs
}

// resolve looks an allocation's nodes and GPUs up in the pool.
func (ps *poolState) resolve(a *Allocation) allocRes {
	ar := allocRes{id: a.JobID, rank: a.Priority.Rank(), res: perNode(a.Resources), gang: gangLimits(a.Resources),
		cost: costRate(ps.capa, a.Resources), nodes: make([]allocNode, len(a.Nodes))}
	for i, na := range a.Nodes {
		n := ps.byName[na.Node]
		if n == nil {
			ar.nodes[i] = allocNode{n: -1}
			continue
		}
		an := allocNode{n: int32(n.idx)}
		for _, id := range na.GPUs {
			if x, ok := slices.BinarySearch(n.gpuIDs, id); ok {
				an.gpus = append(an.gpus, int32(x))
			}
		}
		ar.nodes[i] = an
	}
	return ar
}

// mergeRun is one project's jobs of one tier, in merge.
type mergeRun struct {
	proj  *projState
	off   int // index in merge's jobs of jobs[0]
	jobs  []job
	share float64
}

// decide places one job or says why it waits; it reports whether the job
// started, or, with allowDefer, whether it needs borrowed capacity and is
// left for the second phase.
func (ps *poolState) decide(j *job, allowDefer bool) (placed, deferred bool) {
	pr, sh := ps.pr(j), ps.sh(j)
	if ps.backoff(j) {
		nb := ps.pd(j).NotBefore
		ps.wait(j, domain.ReasonBackoff, backoffMessage(nb), nb)
		return false, false
	}
	r, k := sh.key.r, sh.key.k
	ps.kind = kindStatic
	if msg := ps.static(j); msg != "" {
		ps.wait(j, domain.ReasonNoCapacity, msg, time.Time{})
		return false, false
	}
	rank := int(j.rank)
	if rank > pr.rule.maxRank {
		ps.wait(j, domain.ReasonQuotaExceeded, ps.priorityMessage(ps.pd(j), pr), time.Time{})
		return false, false
	}
	if m := ps.pool.MaxRunning; m > 0 && ps.running >= m {
		ps.kind = kindCapped
		ps.wait(j, domain.ReasonWaitingForCapacity, ps.maxRunningMessage(), time.Time{})
		return false, false
	}
	ps.kind = kindQuota
	need := sh.need
	after := pr.used.plus(need)
	// The job must fit its project's ceiling; one that may not borrow (not
	// preemptible) must fit its guarantee.
	claimed := pr.claimed
	overCeiling := !pr.rule.ceiling.fitsBeside(pr.used, claimed, need)
	borrowed := !pr.rule.guaranteed.fitsBeside(pr.usedFrom(rank), claimed, need)
	if overCeiling || borrowed && !j.preemptible() {
		lim := pr.rule.ceiling
		if !j.preemptible() {
			lim = pr.rule.guaranteed
		}
		if lim.within(after) {
			// Only the project's waiting jobs stand in the way.
			ps.wait(j, domain.ReasonQuotaExceeded, ps.claimedMessage(pr, need, lim, claimed), time.Time{})
			return false, false
		}
		if ps.pool.Preemption {
			// The project's own stopping jobs will free quota: wait for them.
			// It holds the room they leave, as it would once they are gone,
			// so that no later job takes it meanwhile.
			if stop := ps.ownStopping(pr); stop.jobs > 0 && lim.within(after.minus(stop)) {
				ps.kind = kindState // whether room is held depends on the nodes
				if nodes := ps.fitAfterStops(sh); nodes != nil {
					ps.reserve(j.id, rank, r, nodes, time.Time{})
					ps.claim(j, pr, need)
				}
				ps.wait(j, domain.ReasonWaitingForCapacity, stoppingMessage(stop.jobs, false), time.Time{})
				return false, false
			}
			// Higher priority may preempt the project's own lower-priority
			// work: as much as brings the job within lim, so that it can
			// run once the victims are gone (a non-preemptible job freed
			// only below the ceiling would still not run, and its victims
			// would start again and be preempted again).
			if ps.budget > 0 {
				if victims, nodes := ps.preemptOwn(j, after.minus(lim)); nodes != nil {
					if ps.stopVictims(ps.pd(j), victims) == 0 && ps.pr(j).rule.ceiling.fitsBeside(pr.used, pr.claimed, need) {
						if nodes := ps.fit(sh, j.timeout); nodes != nil {
							ps.place(ps.pd(j), pr, r, nodes, !pr.rule.guaranteed.fitsBeside(pr.usedFrom(rank), pr.claimed, need))
							return true, false
						}
					}
					ps.reserve(j.id, rank, r, nodes, time.Time{})
					ps.claim(j, pr, need)
					ps.wait(j, domain.ReasonWaitingForCapacity, stoppingMessage(len(victims), true), time.Time{})
					return false, false
				}
			}
		}
		if !overCeiling {
			ps.wait(j, domain.ReasonQuotaExceeded, ps.quotaMessage(pr, need, pr.rule.guaranteed, false, true), time.Time{})
			return false, false
		}
		msg := ps.quotaMessage(pr, need, pr.rule.ceiling, pr.rule.canBorrow, false)
		ps.holdQuota(j, pr, need)
		ps.wait(j, domain.ReasonQuotaExceeded, msg, time.Time{})
		return false, false
	}
	if borrowed && allowDefer {
		return false, true
	}
	ps.kind = kindState
	if nodes := ps.fit(sh, j.timeout); nodes != nil {
		ps.place(ps.pd(j), pr, r, nodes, borrowed)
		return true, false
	}
	if nodes := ps.fitAfterStops(sh); nodes != nil {
		n := countStopping(nodes, r)
		ps.reserve(j.id, rank, r, nodes, time.Time{})
		ps.claim(j, pr, need)
		ps.wait(j, domain.ReasonWaitingForCapacity, stoppingMessage(n, false), time.Time{})
		return false, false
	}
	if ps.pool.Preemption && ps.budget > 0 {
		if victims, nodes := ps.preempt(ps.pd(j), pr, r, k, borrowed, rank); nodes != nil {
			if ps.stopVictims(ps.pd(j), victims) == 0 {
				if nodes := ps.fit(sh, j.timeout); nodes != nil {
					ps.place(ps.pd(j), pr, r, nodes, borrowed)
					return true, false
				}
			}
			ps.reserve(j.id, rank, r, nodes, time.Time{})
			ps.claim(j, pr, need)
			ps.wait(j, domain.ReasonWaitingForCapacity, stoppingMessage(countStopping(nodes, r), true), time.Time{})
			return false, false
		}
	}
	msg := ps.capacityMessage(j, sh)
	var est time.Time
	if ps.capacityHolds < ps.cfg.ReservationsPerPool {
		var nodes []*nodeState
		nodes, est = ps.estimate(r, k)
		if nodes != nil {
			ps.capacityHolds++
			ps.reserve(j.id, rank, r, nodes, est)
			// The quota it will use is held too, or the project's own
			// smaller jobs would take it and leave the reservation useless.
			ps.claim(j, pr, need)
		}
	}
	ps.wait(j, domain.ReasonWaitingForCapacity, msg, est)
	return false, false
}

// claim counts need against the project's quota for the rest of the pass,
// for a job that waits with room reserved for it.
func (ps *poolState) claim(j *job, pr *projState, need limits) {
	pr.claimed = pr.claimed.plus(need)
	if pr.claimBy == 0 {
		pr.claimBy = j.id
	}
	pr.usedVer++
	pr.msgs = nil
	ps.stateVer++
}

// usedFrom is what the project's running jobs (not stopping) and this
// pass's placements of priority rank or higher use (all of them for an
// unknown rank).
func (pr *projState) usedFrom(rank int) limits {
	if rank < 0 {
		rank = 0
	}
	var u limits
	for r := rank; r < len(pr.usedByRank); r++ {
		u = u.plus(pr.usedByRank[r])
	}
	return u
}

// addUse adds (or, with sign -1, removes) a holder's use at its rank.
func (pr *projState) addUse(h *holder, sign int) {
	r := min(max(h.rank, 0), len(pr.usedByRank)-1)
	if sign > 0 {
		pr.usedByRank[r] = pr.usedByRank[r].plus(h.gang)
	} else {
		pr.usedByRank[r] = pr.usedByRank[r].minus(h.gang)
	}
}

// holdQuota makes the project's first job blocked by its own quota ceiling
// hold the quota it needs, if it could ever have it: later, smaller jobs of
// the project may then use only what is left beside it, so it starts once
// the project's running jobs have freed enough (they end within their
// timeouts), instead of waiting behind a stream of small jobs for ever.
func (ps *poolState) holdQuota(j *job, pr *projState, need limits) {
	if pr.held || !pr.rule.ceiling.within(need) {
		return
	}
	pr.held = true
	ps.claim(j, pr, need)
}

func (ps *poolState) wait(j *job, reason domain.Reason, msg string, est time.Time) {
	ps.last = decision{reason: reason, msg: msg, est: est}
	ps.emit(j, reason, msg, est)
}

// emit appends the job's waiting entry.
func (ps *poolState) emit(j *job, reason domain.Reason, msg string, est time.Time) {
	ps.waiting++
	ps.plan.Waiting = append(ps.plan.Waiting, Waiting{JobID: j.id, Reason: reason, Message: msg, Position: ps.waiting, EstimatedStart: est})
}

func (ps *poolState) place(j *Pending, pr *projState, r req, nodes []*nodeState, borrowed bool) {
	h := &holder{id: j.JobID, project: j.Project, rank: j.Priority.Rank(), res: r, gang: gangLimits(j.Resources),
		start: ps.now, preemptible: j.Preemptible, borrowed: borrowed, placed: true, nodes: nodes, seq: len(ps.holders)}
	h.unentitled = !pr.rule.guaranteed.within(h.gang)
	if j.Timeout > 0 {
		h.end = ps.now.Add(j.Timeout)
	}
	pl := Placement{JobID: j.JobID, Pool: ps.pool.Name, Nodes: make([]NodeAlloc, len(nodes)), Borrowed: borrowed}
	for i, n := range nodes {
		pl.Nodes[i] = NodeAlloc{Node: n.name, GPUs: n.take(r)}
		n.holders = append(n.holders, h)
		ps.ix.move(n)
	}
	ps.holders = append(ps.holders, h)
	ps.running++
	pr.holders = append(pr.holders, h)
	pr.used = pr.used.plus(h.gang)
	pr.addUse(h, 1)
	pr.usedVer++
	if j.Preemptible {
		pr.stopVer++ // a new job it may stop for its own (hasOwnVictims)
	}
	if !borrowed && !pr.rule.guaranteed.within(pr.used) {
		// A job of higher priority than some of the project's running
		// jobs now fills its guarantee: they are borrowed from now on, in
		// this pass as in the next, which can therefore reclaim nothing
		// this one could not.
		ps.markProject(pr)
	}
	h.cost = costRate(ps.capa, j.Resources)
	pr.alloc += h.cost
	pr.msgs = nil
	ps.version++
	ps.stateVer++
	ps.plan.Start = append(ps.plan.Start, pl)
}

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
	ps.version++
	ps.stateVer++
	ps.waiting++
	ps.plan.Waiting = append(ps.plan.Waiting, Waiting{JobID: h.id, Reason: domain.ReasonWaitingForCapacity, Position: ps.waiting,
		Message: fmt.Sprintf("gave way to job %d (priority %s), which needs the room in pool %s; it did not start", j.JobID, j.Priority, ps.pool.Name)})
}

// countStopping counts distinct stopping holders on the nodes that need
// them to stop before r fits.
func countStopping(nodes []*nodeState, r req) int {
	var ids []int64
	for _, n := range nodes {
		if n.fitsAvail(r) {
			continue
		}
		for _, h := range n.holders {
			if h.stopping && !slices.Contains(ids, h.id) {
				ids = append(ids, h.id)
			}
		}
	}
	return len(ids)
}

// static reports why the pool could never hold the job, or "".
func (ps *poolState) static(j *job) string {
	if !ps.accepted(j) {
		return ps.priorityNotAccepted(ps.pd(j))
	}
	sh := ps.sh(j)
	r, k := sh.key.r, sh.key.k
	if sh.capable < 0 {
		sh.capable = 0
		for _, n := range ps.nodes {
			if n.fitsEmpty(r) {
				sh.capable++
			}
		}
	}
	if sh.capable >= k && (ps.pool.MaxGPUsPerJob <= 0 || r.g*k <= ps.pool.MaxGPUsPerJob) &&
		(ps.pool.MaxNodesPerJob <= 0 || k <= ps.pool.MaxNodesPerJob) {
		return ""
	}
	return ps.neverFitsMessage(r, k, sh.capable)
}
