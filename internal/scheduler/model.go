package scheduler

// The pass's model of the world: one pass, and per pool its nodes, its
// projects and the running jobs holding resources, built from the snapshot.

import (
	"cmp"
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
	qs     *Queues
	// scratch, when set, holds a full pass's working memory (ScheduleIn).
	scratch *Scratch
	// last, when set, is the previous pass's plan over qs, for a replay.
	last *Plan
	// prev, when set, is the previous pass's plan over qs, to be read only:
	// pools whose inputs did not change take their entries from it (reuse.go).
	prev *Plan
	// waitBuf, when large enough, is reused for plan.Waiting (Kept.Waiting).
	waitBuf []Waiting
	// changed, when told is set, lists (ascending) the ids of the pending
	// and running jobs that may differ from the previous pass's (Kept); a
	// running job not in it holds what it held, so its resolved allocation
	// is reused.
	changed []int64
	told    bool
	// nowR is what the pass's outcome depends on of Snapshot.Now, kept
	// when trackNow (a pass over kept queues, which a later one may
	// replay).
	nowR     nowRange
	trackNow bool
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
	bounded      bool       // preemptOwn failed on its bound (see decision.bounded)
	boundN       int
	bound        deficit
	// memoCfg is what the pool's decisions depend on besides its state,
	// when its queue is kept between passes (runQueues).
	memoCfg *memoConfig
	// resvAppended: capacityMessage appended the job's reservedText to
	// resvBase.
	resvAppended bool
	resvBase     string
	rtCache      map[rtKey]string
	rtVer        int
	// vlog, when set, logs the walk for a later replay (see replay.go);
	// phase is the walk's phase.
	vlog  *visitLog
	phase int
	fresh bool // decideJob decided afresh (not from the memo)
	// dep is what the last decision rested on (patch.go).
	dep uint8
}

// What a decision rests on besides the job, the pool's definition, the
// config and the time.
const (
	// depPool: the pool's state, or it changed it (a placement,
	// reservation or preemption).
	depPool = iota
	// depLocal: only the job's project (its use, what its waiting jobs
	// hold, its running and stopping jobs) and the preemption budget;
	// it changed nothing but what its project's waiting jobs hold.
	depLocal
	// depSearch: as depLocal, and a failed search of the nodes that hold
	// the project's own jobs (preemptOwn), which reads those nodes and
	// every job on them.
	depSearch
)

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
	// A queue kept between passes lends the slabs of its last pass,
	// whose state is dead by now: allocating them anew each pass costs
	// more in the collector than in the allocation.
	sl := &slabs{}
	if cache != nil {
		sl = &cache.slabs
	}
	idSlab := grow(&sl.ids, totalGPUs)
	usedSlab := grow(&sl.used, totalGPUs)
	clear(usedSlab)
	nodeSlab := grow(&sl.nodes, len(nodes))
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
	holderSlab := grow(&sl.holders, len(running))
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
	nodeRefs := grow(&sl.nodeRefs, nallocs)[:0]
	// Each node's holders, counted first so that one slab holds them all.
	refSlab := grow(&sl.refs, nallocs)
	clear(refSlab)
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
	// Which running jobs are borrowed: kept from the last pass for a
	// project whose running jobs are all as they were (the quotas are
	// too, or the cache would not be valid), decided again for the
	// others.
	var dirty []bool
	if cache != nil {
		dirty = cache.dirty
	}
	for x := range resolved {
		ar := &resolved[x]
		if int(ar.proj) < len(dirty) && !dirty[ar.proj] {
			h := &holderSlab[x]
			h.borrowed, h.unentitled = ar.borrowed, ar.unentitled
			if h.borrowed && !h.stopping {
				runProjs[ar.proj].borrowedHolders++
			}
		}
	}
	for p, pr := range runProjs {
		if pr != nil && (p >= len(dirty) || dirty[p]) {
			ps.markProject(pr)
		}
	}
	for x := range resolved {
		h := &holderSlab[x]
		resolved[x].borrowed, resolved[x].unentitled = h.borrowed, h.unentitled
	}
	ps.ix = newNodeIndex(ps.maxG, len(ps.nodes))
	for _, n := range ps.nodes {
		ps.ix.set(n, n.availG())
	}
	ps.project = project
	return ps
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
	// For a patch working out what the allocation's end changed
	// (patch.go): its start and whether it was stopping.
	start    time.Time
	stopping bool
	// What markProject decided of it when the pass started, valid when
	// its project's jobs are as then (allocCache.dirty).
	borrowed, unentitled bool
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
	spare  []allocRes // the buffer res was in before
	slabs  slabs      // newPoolState's, lent between passes
	// dirty, by projs index: the project's running jobs are not all as
	// the last pass had them (resolveAllocs), so their sides
	// (allocRes.borrowed) are decided again.
	dirty []bool
}

// resolveAllocs resolves the pool's running allocations (by id ascending),
// reusing cache entries of running jobs the pass was told did not change,
// and leaves the cache holding this pass's.
func (ps *poolState) resolveAllocs(running []*Allocation, cache *allocCache) ([]allocRes, []string) {
	if cache == nil {
		cache = &allocCache{}
	}
	// Written to the buffer before the last one (not the one read).
	out := grow(&cache.spare, len(running))
	if len(out) > 0 && len(cache.res) > 0 && &out[0] == &cache.res[0] {
		out = make([]allocRes, len(running))
	}
	var old []allocRes
	if cache.valid {
		old = cache.res
	} else {
		cache.projs, cache.projIx = cache.projs[:0], map[string]int32{}
	}
	// Projects whose running jobs are not all as in the last pass: their
	// jobs' sides are decided again (see newPoolState).
	dirty := cache.dirty[:0]
	markDirty := func(p int32) {
		for int(p) >= len(dirty) {
			dirty = append(dirty, false)
		}
		dirty[p] = true
	}
	changed := ps.changed
	k := 0
	prev := int64(math.MinInt64)
	for x, a := range running {
		for len(changed) > 0 && changed[0] < a.JobID {
			changed = changed[1:]
		}
		for k < len(old) && old[k].id < a.JobID {
			if old[k].id != prev {
				markDirty(old[k].proj) // it ended
			}
			k++
		}
		prev = a.JobID
		if k < len(old) && old[k].id == a.JobID {
			if len(changed) == 0 || changed[0] != a.JobID {
				out[x] = old[k]
				continue
			}
			markDirty(old[k].proj)
		}
		out[x] = ps.resolve(a)
		p, ok := cache.projIx[a.Project]
		if !ok {
			p = int32(len(cache.projs))
			cache.projs = append(cache.projs, a.Project)
			cache.projIx[a.Project] = p
		}
		out[x].proj = p
		markDirty(p)
	}
	for ; k < len(old); k++ {
		if old[k].id != prev {
			markDirty(old[k].proj)
		}
	}
	for len(dirty) < len(cache.projs) {
		dirty = append(dirty, false)
	}
	cache.res, cache.spare, cache.valid, cache.dirty = out, cache.res[:0], true, dirty
	return out, cache.projs
}

// resolve looks an allocation's nodes and GPUs up in the pool.
func (ps *poolState) resolve(a *Allocation) allocRes {
	ar := allocRes{id: a.JobID, rank: a.Priority.Rank(), res: perNode(a.Resources), gang: gangLimits(a.Resources),
		cost: costRate(ps.capa, a.Resources), nodes: make([]allocNode, len(a.Nodes)), start: a.StartedAt, stopping: a.Stopping}
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
	nb := ps.pd(j).NotBefore
	if !ps.trackNow {
		return nb.After(ps.now)
	}
	if nb.After(ps.now) {
		ps.nowR.below(nb)
		return true
	}
	ps.nowR.atLeast(nb)
	return false
}

// accepted reports whether the pool accepts the job's priority class.
func (ps *poolState) accepted(j *job) bool {
	if j.rank >= 0 {
		return ps.accept[j.rank]
	}
	return len(ps.pool.Priorities) == 0 || slices.Contains(ps.pool.Priorities, ps.pd(j).Priority)
}

// slabs are the storage newPoolState builds a pool's nodes and running
// jobs in.
type slabs struct {
	ids      []int
	used     []bool
	nodes    []nodeState
	holders  []holder
	refs     []*holder
	nodeRefs []*nodeState
}

// grow returns (*buf)[:n], reallocating when it is too short.
func grow[T any](buf *[]T, n int) []T {
	if cap(*buf) < n {
		*buf = make([]T, n, n+n/8)
	}
	*buf = (*buf)[:n]
	return *buf
}
