package scheduler

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
}

// reservation is capacity held for a waiting job, for messages.
type reservation struct {
	job  int64
	rank int
	est  time.Time
}

// projState is one project in one pool.
type projState struct {
	idx    int // position among the pool's projects by name
	name   string
	rule   quotaRule
	used   limits  // held by its running jobs and placements of this pass
	usage  float64 // decayed historical usage
	alloc  float64 // current allocation share
	shares float64
	msgs   map[quotaMsgKey]string // quota messages for the current use
	// borrowedHolders counts its running jobs on borrowed capacity.
	borrowedHolders int
	// usedVer is bumped whenever used changes (memo validity).
	usedVer int
	// stopHolders are its stopping holders on the pool's nodes; stopSum is
	// their total (valid unless stopDirty), see ownStopping.
	stopHolders []*holder
	stopSum     limits
	stopDirty   bool
	// ownFail memoises failed searches of preemptOwn.
	ownFail []ownFailure
}

func (p *projState) share() float64 { return (p.usage + p.alloc) / p.shares }

// poolState is one pool during a pass.
type poolState struct {
	*pass
	now     time.Time
	pool    domain.Pool
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

	shapes      map[shapeID]*shape
	preemptFail map[preemptKey]bool
	msgs        msgCache
	version     int // bumped whenever available capacity changes
	waiting     int // waiting entries emitted for this pool
	project     func(name string) *projState
}

// job is a pending job prepared for ordering.
//
// It copies the fields most decisions read, so that deciding the long tail
// of a queue does not touch each Pending (a cache miss per job).
type job struct {
	p           *Pending
	pr          *projState
	sh          *shape
	id          int64
	sec         int64
	timeout     time.Duration
	nsec        int32
	tier        int8 // higher first: rank*2 + 1 if previously preempted
	rank        int8
	backoff     bool // NotBefore is after Now
	accepted    bool // the pool accepts its priority class
	preemptible bool
	later       bool // needs borrowed capacity: decided in the second phase
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
	slices.SortFunc(running, func(a, b *Allocation) int {
		if a.JobID != b.JobID {
			return compareInt64(a.JobID, b.JobID)
		}
		return cmp.Or(cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Project, b.Project), a.StartedAt.Compare(b.StartedAt))
	})
	running = slices.CompactFunc(running, func(a, b *Allocation) bool { return a.JobID == b.JobID })
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
	slices.SortStableFunc(running, func(a, b *Allocation) int { return cmp.Compare(a.Pool, b.Pool) })
	slices.SortStableFunc(pending, func(a, b *Pending) int { return cmp.Compare(a.Pool, b.Pool) })
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
		ps := p.newPoolState(pool, quotas, shares, usage, running[ri:rj], pending[pi:pj])
		ps.walk(pending[pi:pj])
		pi, ri = pj, rj
	}
	for pi < len(pending) {
		p.unknownPool(pending, &pi)
	}
	return p.plan
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
	usage map[[2]string]float64, running []*Allocation, pending []*Pending) *poolState {
	ps := &poolState{pass: p, now: p.s.Now, pool: pool, capa: pool.Capacity(), byName: make(map[string]*nodeState, len(pool.Nodes)),
		projs: map[string]*projState{}, shapes: map[shapeID]*shape{}, preemptFail: map[preemptKey]bool{}}
	nodes := slices.Clone(pool.Nodes)
	slices.SortFunc(nodes, func(a, b domain.Node) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(len(b.GPUs), len(a.GPUs)), cmp.Compare(b.CPUs, a.CPUs), cmp.Compare(b.Memory, a.Memory))
	})
	nodes = slices.CompactFunc(nodes, func(a, b domain.Node) bool { return a.Name == b.Name })
	for _, n := range nodes {
		ids := slices.Compact(slices.Sorted(slices.Values(n.GPUs)))
		ns := &nodeState{idx: len(ps.nodes), name: n.Name, gpuIDs: ids, gpuUsed: make([]bool, len(ids)),
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
			pr = &projState{name: name, rule: newQuotaRule(pool, quotas[[2]string{name, pool.Name}]),
				usage: usage[[2]string{name, pool.Name}], shares: sh}
			ps.projs[name] = pr
		}
		return pr
	}

	for _, a := range running {
		res := perNode(a.Resources)
		h := &holder{id: a.JobID, project: a.Project, rank: a.Priority.Rank(), res: res, gang: gangLimits(a.Resources),
			start: a.StartedAt, preemptible: a.Preemptible, borrowed: a.Borrowed, stopping: a.Stopping, seq: len(ps.holders)}
		if a.Timeout > 0 {
			h.end = a.StartedAt.Add(a.Timeout)
		}
		for _, na := range a.Nodes {
			n := ps.byName[na.Node]
			if n == nil || slices.Contains(h.nodes, n) {
				continue // a node that left the pool: nothing to subtract from
			}
			h.nodes = append(h.nodes, n)
			g := 0
			for _, id := range na.GPUs {
				if i, ok := slices.BinarySearch(n.gpuIDs, id); ok && !n.gpuUsed[i] {
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
		ps.holders = append(ps.holders, h)
		ps.running++
		pr := project(a.Project)
		if h.stopping && len(h.nodes) > 0 {
			pr.addStopping(h)
		}
		pr.used = pr.used.plus(h.gang)
		pr.alloc += costRate(ps.capa, a.Resources)
		if a.Borrowed {
			pr.borrowedHolders++
		}
	}
	ps.ix = newNodeIndex(ps.maxG, len(ps.nodes))
	for _, n := range ps.nodes {
		ps.ix.set(n, n.availG())
	}
	ps.project = project
	return ps
}

// walk visits the pool's queue in order and decides each job.
func (ps *poolState) walk(pending []*Pending) {
	// Resolve each job's project and tier, then place the jobs straight
	// into (tier descending, project by name) groups: a counting sort.
	const tiers = 10
	prs := make([]*projState, len(pending))
	var last *projState
	for i, pd := range pending {
		if last == nil || last.name != pd.Project {
			last = ps.project(pd.Project)
		}
		prs[i] = last
	}
	names := make([]string, 0, len(ps.projs))
	for name := range ps.projs {
		names = append(names, name)
	}
	slices.Sort(names)
	for i, n := range names {
		ps.projs[n].idx = i
	}
	nproj := max(len(names), 1)
	tierOf := func(pd *Pending) int {
		t := max(pd.Priority.Rank(), -1)*2 + 2
		if pd.Preemptions > 0 {
			t++
		}
		return t
	}
	groups := tiers * nproj
	start := make([]int, groups+1)
	gids := make([]int32, len(pending))
	for i, pd := range pending {
		g := (tiers-1-tierOf(pd))*nproj + prs[i].idx
		gids[i] = int32(g)
		start[g+1]++
	}
	for g := 1; g <= groups; g++ {
		start[g] += start[g-1]
	}
	// Sort small keys, not jobs: (submit time, id) per group, with the
	// submit time as nanoseconds since the pool's earliest submit when the
	// span allows (it always does for real clocks), else seconds+nanos.
	type key struct {
		sec  int64
		id   int64
		nsec int32
		i    int32
	}
	minSec, maxSec := int64(math.MaxInt64), int64(math.MinInt64)
	for _, pd := range pending {
		sec := pd.SubmittedAt.Unix()
		minSec, maxSec = min(minSec, sec), max(maxSec, sec)
	}
	packed := len(pending) > 0 && maxSec-minSec < 9e9
	keys := make([]key, len(pending))
	next := slices.Clone(start[:groups])
	for i, pd := range pending {
		g := gids[i]
		k := key{sec: pd.SubmittedAt.Unix(), nsec: int32(pd.SubmittedAt.Nanosecond()), id: pd.JobID, i: int32(i)}
		if packed {
			k.sec, k.nsec = (k.sec-minSec)*1e9+int64(k.nsec), 0
		}
		keys[next[g]] = k
		next[g]++
	}
	for g := range groups {
		if grp := keys[start[g]:start[g+1]]; len(grp) > 1 {
			slices.SortFunc(grp, func(a, b key) int {
				if a.sec != b.sec {
					return compareInt64(a.sec, b.sec)
				}
				if a.nsec != b.nsec {
					return int(a.nsec) - int(b.nsec)
				}
				return compareInt64(a.id, b.id)
			})
		}
	}
	jobs := make([]job, len(pending))
	for x, k := range keys {
		pd := pending[k.i]
		jobs[x] = job{p: pd, pr: prs[k.i], sh: ps.shape(pd.Resources), id: pd.JobID, sec: k.sec, timeout: pd.Timeout,
			nsec: k.nsec, tier: int8(tierOf(pd)), rank: int8(pd.Priority.Rank()), backoff: pd.NotBefore.After(ps.now),
			accepted: len(ps.pool.Priorities) == 0 || slices.Contains(ps.pool.Priorities, pd.Priority), preemptible: pd.Preemptible}
	}

	// Phase 1: jobs within their project's guarantee. Phase 2: jobs that
	// need borrowed capacity, so borrowing only takes capacity that no job
	// within its guarantee wants in this pass.
	nlater := 0
	ps.merge(jobs, func(j *job) bool {
		placed, later := ps.decide(j, true)
		if later {
			j.later = true
			nlater++
		}
		return placed
	})
	if nlater == 0 {
		return
	}
	deferred := make([]job, 0, nlater)
	for _, j := range jobs {
		if j.later {
			deferred = append(deferred, j)
		}
	}
	ps.merge(deferred, func(j *job) bool {
		placed, _ := ps.decide(j, false)
		return placed
	})
}

// shape interns a request shape for the pass.
func (ps *poolState) shape(r domain.Resources) *shape {
	id := shapeID{gpus: r.GPUs, cpus: math.Float64bits(r.CPUs), mem: int64(r.Memory), nodes: r.Nodes}
	sh := ps.shapes[id]
	if sh == nil {
		sh = &shape{key: shapeKey{perNode(r), max(r.Nodes, 1)}, capable: -1, need: gangLimits(r)}
		ps.shapes[id] = sh
	}
	return sh
}

// shapeID is a request as map key (integers hash faster than floats).
type shapeID struct {
	gpus  int
	cpus  uint64
	mem   int64
	nodes int
}

// merge visits jobs (sorted by tier, project, submit time, id) in queue
// order. Within a tier, a heap of per-project runs ordered by (fair share,
// head submit time, head id) gives the order; visit reports whether the job
// started, which raises only that project's share, so the heap is fixed by
// sifting the top down.
func (ps *poolState) merge(jobs []job, visit func(*job) bool) {
	type run struct {
		proj  *projState
		jobs  []job
		share float64
	}
	less := func(a, b *run) bool {
		if a.share != b.share {
			return a.share < b.share
		}
		x, y := a.jobs[0], b.jobs[0]
		if x.sec != y.sec {
			return x.sec < y.sec
		}
		if x.nsec != y.nsec {
			return x.nsec < y.nsec
		}
		return x.id < y.id
	}
	var heap []*run
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
		heap = heap[:0]
		for a := start; a < end; {
			b := a
			for b < end && jobs[b].pr == jobs[a].pr {
				b++
			}
			pr := jobs[a].pr
			heap = append(heap, &run{proj: pr, jobs: jobs[a:b], share: pr.share()})
			a = b
		}
		for i := len(heap)/2 - 1; i >= 0; i-- {
			down(i)
		}
		for len(heap) > 0 {
			top := heap[0]
			if visit(&top.jobs[0]) {
				top.share = top.proj.share()
			}
			top.jobs = top.jobs[1:]
			if len(top.jobs) == 0 {
				heap[0] = heap[len(heap)-1]
				heap = heap[:len(heap)-1]
			}
			down(0)
		}
		start = end
	}
}

// decide places one job or says why it waits; it reports whether the job
// started, or, with allowDefer, whether it needs borrowed capacity and is
// left for the second phase.
func (ps *poolState) decide(j *job, allowDefer bool) (placed, deferred bool) {
	pr, sh := j.pr, j.sh
	if j.backoff {
		ps.wait(j, domain.ReasonBackoff, backoffMessage(j.p.NotBefore.Sub(ps.now)), j.p.NotBefore)
		return false, false
	}
	r, k := sh.key.r, sh.key.k
	if msg := ps.static(j); msg != "" {
		ps.wait(j, domain.ReasonNoCapacity, msg, time.Time{})
		return false, false
	}
	rank := int(j.rank)
	if rank > pr.rule.maxRank {
		ps.wait(j, domain.ReasonQuotaExceeded, ps.priorityMessage(j.p, pr), time.Time{})
		return false, false
	}
	if m := ps.pool.MaxRunning; m > 0 && ps.running >= m {
		ps.wait(j, domain.ReasonWaitingForCapacity, ps.maxRunningMessage(), time.Time{})
		return false, false
	}
	need := sh.need
	after := pr.used.plus(need)
	if !pr.rule.ceiling.within(after) {
		if ps.pool.Preemption {
			// The project's own stopping jobs will free quota: wait for them.
			if stop := ps.ownStopping(pr); stop.jobs > 0 && pr.rule.ceiling.within(after.minus(stop)) {
				ps.wait(j, domain.ReasonWaitingForCapacity, stoppingMessage(stop.jobs, false), time.Time{})
				return false, false
			}
			// Higher priority may preempt the project's own lower-priority work.
			if ps.budget > 0 {
				if victims, nodes := ps.preemptOwn(j, after.minus(pr.rule.ceiling)); nodes != nil {
					ps.stopVictims(j.p, victims)
					ps.reserve(j.id, rank, r, nodes, time.Time{})
					ps.wait(j, domain.ReasonWaitingForCapacity, stoppingMessage(len(victims), true), time.Time{})
					return false, false
				}
			}
		}
		ps.wait(j, domain.ReasonQuotaExceeded, ps.quotaMessage(pr, need, pr.rule.ceiling, pr.rule.canBorrow, false), time.Time{})
		return false, false
	}
	borrowed := !pr.rule.guaranteed.within(after)
	if borrowed && !j.preemptible {
		ps.wait(j, domain.ReasonQuotaExceeded, ps.quotaMessage(pr, need, pr.rule.guaranteed, false, true), time.Time{})
		return false, false
	}
	if borrowed && allowDefer {
		return false, true
	}
	if nodes := ps.fit(sh, j.timeout); nodes != nil {
		ps.place(j.p, pr, r, nodes, borrowed)
		return true, false
	}
	if nodes := ps.fitAfterStops(sh); nodes != nil {
		n := countStopping(nodes, r)
		ps.reserve(j.id, rank, r, nodes, time.Time{})
		ps.wait(j, domain.ReasonWaitingForCapacity, stoppingMessage(n, false), time.Time{})
		return false, false
	}
	if ps.pool.Preemption && ps.budget > 0 {
		if victims, nodes := ps.preempt(j.p, pr, r, k, borrowed); nodes != nil {
			ps.stopVictims(j.p, victims)
			ps.reserve(j.id, rank, r, nodes, time.Time{})
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
		}
	}
	ps.wait(j, domain.ReasonWaitingForCapacity, msg, est)
	return false, false
}

func (ps *poolState) wait(j *job, reason domain.Reason, msg string, est time.Time) {
	ps.waiting++
	ps.plan.Waiting = append(ps.plan.Waiting, Waiting{JobID: j.id, Reason: reason, Message: msg, Position: ps.waiting, EstimatedStart: est})
}

func (ps *poolState) place(j *Pending, pr *projState, r req, nodes []*nodeState, borrowed bool) {
	h := &holder{id: j.JobID, project: j.Project, rank: j.Priority.Rank(), res: r, gang: gangLimits(j.Resources),
		start: ps.now, preemptible: j.Preemptible, borrowed: borrowed, placed: true, nodes: nodes, seq: len(ps.holders)}
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
	pr.used = pr.used.plus(h.gang)
	pr.usedVer++
	pr.alloc += costRate(ps.capa, j.Resources)
	pr.msgs = nil
	ps.version++
	ps.plan.Start = append(ps.plan.Start, pl)
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
	if !j.accepted {
		return ps.priorityNotAccepted(j.p)
	}
	sh := j.sh
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
