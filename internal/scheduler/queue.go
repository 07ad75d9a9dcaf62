package scheduler

import (
	"math"
	"math/bits"
	"reflect"
	"slices"
	"strings"
	"time"

	"trainyard/internal/domain"
)

// job is a pending job prepared for ordering: a compact, pointer-free
// record, so that walking a long queue reads one small record per job
// rather than each Pending (a cache miss per job), and so that a queue can
// be kept between passes (see Queues).
type job struct {
	id      int64
	sec     int64 // submit time: nanoseconds since queue.base when queue.packed, else Unix seconds
	timeout time.Duration
	slot    int32 // queue.slots index of the Pending
	proj    int32 // queue.projs index
	shape   int32 // queue.shapes index
	nsec    int32 // submit nanoseconds when not packed, else 0
	cls     int32 // decision class within the project: (shape*4+rank)*2 + preemptible (see memoIndex)
	tier    int8  // higher first: rank*2 + 2, +1 if previously preempted
	rank    int8
	flags   uint8
}

const (
	jobPreemptible = 1 << iota
	jobNotBefore   // NotBefore is set: read it to decide backoff
	jobBeneficiary // decided first (Pending.Beneficiary)
)

func (j *job) preemptible() bool { return j.flags&jobPreemptible != 0 }

// queue is one pool's pending jobs sorted by tier (descending), project
// name, submit time and id: the order fair share then merges per tier.
type queue struct {
	// beneficiaries counts the jobs with jobBeneficiary (walk decides them
	// first).
	beneficiaries int
	jobs          []job
	// jobsBuf holds jobs at jobsOff when jobs is not a fresh list, with
	// room before and after it: an insert or delete moves the shorter
	// side (see insertAt).
	jobsBuf []job
	jobsOff int
	slots   []*Pending // by job.slot; nil: a free slot
	free    []int32
	projs   []string // by job.proj
	projIx  map[string]int32
	shapes  []shapeID // by job.shape
	shIx    map[shapeID]int32
	packed  bool
	base    int64 // Unix seconds that packed submit times count from

	// The decision memo (see decideJob), kept with the queue so that a
	// later pass over the same pool definition, quotas and config can
	// reuse decisions whose inputs did not change.
	memo     []memoEntry
	decs     []decision // one slot per memo entry that was ever filled
	stateVer int        // where the next pass's state versions start
	pass     int        // passes walked over this queue
	cfg      *memoConfig
	msgs     map[keptMsgKey]string // quota messages, under cfg
	allocs   allocCache            // the pool's running allocations, resolved (newPoolState)

	// The last walk's log and the edits since, for a replay (replay.go).
	vlog      *visitLog
	edits     []queueEdit
	editsLost bool

	// Where the pool's entries are in the last plan, for a pass that
	// reuses them (reuse.go); dirty: jobs were queued or removed since.
	out   poolOut
	dirty bool
	// Scratch for patches (patch.go).
	patch *patchScratch
}

// memoConfig is what decisions of every kind may depend on besides the
// pool's state: the pool's definition, the quotas in it and the config.
type memoConfig struct {
	pool   domain.Pool
	quotas []domain.Quota
	cfg    Config
	same   bool // equal to the queue's last one (set by runQueues)
}

func (a *memoConfig) equal(b *memoConfig) bool {
	if a.cfg != b.cfg || !slices.Equal(a.quotas, b.quotas) || !slices.Equal(a.pool.Priorities, b.pool.Priorities) ||
		len(a.pool.Nodes) != len(b.pool.Nodes) {
		return false
	}
	x, y := a.pool, b.pool
	x.Nodes, y.Nodes, x.Priorities, y.Priorities = nil, nil, nil, nil
	if !reflect.DeepEqual(x, y) {
		return false
	}
	for i := range a.pool.Nodes {
		n, m := &a.pool.Nodes[i], &b.pool.Nodes[i]
		if n.Name != m.Name || n.CPUs != m.CPUs || n.Memory != m.Memory || !slices.Equal(n.GPUs, m.GPUs) {
			return false
		}
	}
	return true
}

// prepareMemo readies the queue's memo for a pass under config c: it keeps
// the previous passes' decisions only when c equals theirs (c.same) and
// the class layout (projects × shapes) did not grow.
func (q *queue) prepareMemo(c *memoConfig) {
	n := len(q.projs) * len(q.shapes) * memoClasses
	if !c.same || len(q.memo) != n || q.stateVer > 1<<30 {
		if cap(q.memo) >= n {
			q.memo = q.memo[:n]
			clear(q.memo)
		} else {
			q.memo = make([]memoEntry, n)
		}
		clear(q.decs)
		q.decs, q.stateVer = q.decs[:0], 0
		q.msgs = nil
		if k := min(n, len(q.jobs)); cap(q.decs) < k {
			// At most one decision per class, and per job: sized once
			// rather than grown (and copied) many times in a pass.
			q.decs = make([]decision, 0, k)
		}
		q.cfg = c
	}
	q.pass++
}

// tierOf is the job's tier given its priority rank.
func tierOf(pd *Pending, rank int) int8 {
	t := max(rank, -1)*2 + 2
	if pd.Preemptions > 0 {
		t++
	}
	return int8(t)
}

func shapeOf(r domain.Resources) shapeID {
	return shapeID{gpus: r.GPUs, cpus: math.Float64bits(r.CPUs), mem: int64(r.Memory), nodes: r.Nodes}
}

func (q *queue) internProj(name string) int32 {
	if i, ok := q.projIx[name]; ok {
		return i
	}
	i := int32(len(q.projs))
	q.projs = append(q.projs, name)
	q.projIx[name] = i
	return i
}

func (q *queue) internShape(id shapeID) int32 {
	// Few shapes: a linear scan beats hashing.
	if len(q.shapes) <= 16 {
		for i, s := range q.shapes {
			if s == id {
				return int32(i)
			}
		}
		if len(q.shapes) < 16 {
			q.shapes = append(q.shapes, id)
			return int32(len(q.shapes) - 1)
		}
		if q.shIx == nil {
			q.shIx = make(map[shapeID]int32, 32)
			for i, s := range q.shapes {
				q.shIx[s] = int32(i)
			}
		}
	}
	if i, ok := q.shIx[id]; ok {
		return i
	}
	i := int32(len(q.shapes))
	q.shapes = append(q.shapes, id)
	q.shIx[id] = i
	return i
}

// record fills a job record for pd in slot; ok is false when its submit
// time cannot be packed against the queue's base.
func (q *queue) record(pd *Pending, slot int32, lastProj *int32) (job, bool) {
	p := *lastProj
	if p < 0 || q.projs[p] != pd.Project {
		p = q.internProj(pd.Project)
		*lastProj = p
	}
	sec, nsec := pd.SubmittedAt.Unix(), int32(pd.SubmittedAt.Nanosecond())
	if q.packed {
		d := sec - q.base
		if d <= -9e9 || d >= 9e9 {
			return job{}, false
		}
		sec, nsec = d*1e9+int64(nsec), 0
	}
	rank := pd.Priority.Rank()
	j := job{id: pd.JobID, sec: sec, nsec: nsec, timeout: pd.Timeout, slot: slot, proj: p, shape: q.internShape(shapeOf(pd.Resources)),
		tier: tierOf(pd, rank), rank: int8(rank)}
	j.cls = (j.shape*4 + int32(max(j.rank, 0))) * 2
	if pd.Preemptible {
		j.cls++
		j.flags |= jobPreemptible
	}
	if !pd.NotBefore.IsZero() {
		j.flags |= jobNotBefore
	}
	if pd.Beneficiary {
		j.flags |= jobBeneficiary
	}
	return j, true
}

// buildQueue sorts one pool's pending jobs. The slice becomes the queue's
// slots.
func buildQueue(pending []*Pending) *queue { return buildQueueIn(pending, nil) }

// buildQueueIn is buildQueue with its records and working lists in sc's
// memory when sc is set: the queue then lives only until sc is used again.
func buildQueueIn(pending []*Pending, sc *Scratch) *queue {
	q := &queue{slots: pending, projIx: map[string]int32{}}
	var recs []job // the queue's, once in order
	var dest []int32
	if sc != nil {
		recs, dest = grow(&sc.recs, len(pending)), grow(&sc.dest, len(pending))
		q.decs = sc.decs[:0]
	} else {
		recs, dest = make([]job, len(pending)), make([]int32, len(pending))
	}
	minSec, maxSec := int64(math.MaxInt64), int64(math.MinInt64)
	for _, pd := range pending {
		sec := pd.SubmittedAt.Unix()
		minSec, maxSec = min(minSec, sec), max(maxSec, sec)
	}
	q.packed = len(pending) > 0 && maxSec-minSec < 9e9
	q.base = minSec
	last := int32(-1)
	for i, pd := range pending {
		recs[i], _ = q.record(pd, int32(i), &last)
		if pd.Beneficiary {
			q.beneficiaries++
		}
	}
	// Counting sort into (tier descending, project by name) groups, then
	// sort small keys (submit time, id) within each group.
	const tiers = 10
	order := make([]int32, len(q.projs))
	names := slices.Clone(q.projs)
	slices.Sort(names)
	for i, n := range names {
		order[q.projIx[n]] = int32(i)
	}
	nproj := max(len(names), 1)
	groups := tiers * nproj
	start := make([]int32, groups+1)
	for i := range recs {
		start[(tiers-1-int(recs[i].tier))*nproj+int(order[recs[i].proj])+1]++
	}
	for g := 1; g <= groups; g++ {
		start[g] += start[g-1]
	}
	// Each record to its group's next place, following cycles of the
	// permutation in place (a second list as long would cost more to
	// allocate than the moves).
	next := slices.Clone(start[:groups])
	for i := range recs {
		r := &recs[i]
		g := (tiers-1-int(r.tier))*nproj + int(order[r.proj])
		dest[i] = next[g]
		next[g]++
	}
	for i := range recs {
		for d := dest[i]; d != int32(i); d = dest[i] {
			recs[i], recs[d] = recs[d], recs[i]
			dest[i], dest[d] = dest[d], d
		}
	}
	q.jobs = recs
	// Each group by (submit time, id): keys sorted, then the group's
	// records put in their order (all within the group, which is small).
	var keys []qkey
	var tmp []job
	for g := range groups {
		grp := q.jobs[start[g]:start[g+1]]
		sorted := true
		for x := 1; x < len(grp); x++ {
			a, b := &grp[x-1], &grp[x]
			if b.sec < a.sec || b.sec == a.sec && (b.nsec < a.nsec || b.nsec == a.nsec && b.id < a.id) {
				sorted = false
				break
			}
		}
		if sorted {
			continue
		}
		keys = keys[:0]
		for x := range grp {
			keys = append(keys, qkey{sec: grp[x].sec, id: grp[x].id, nsec: grp[x].nsec, i: int32(x)})
		}
		sortKeys(keys, bits.Len(uint(len(keys)))*2)
		tmp = append(tmp[:0], grp...)
		for x, k := range keys {
			grp[x] = tmp[k.i]
		}
	}
	return q
}

// qkey is a job's order within its (tier, project) group, and its record.
type qkey struct {
	sec  int64
	id   int64
	nsec int32
	i    int32
}

func (a *qkey) less(b *qkey) bool {
	if a.sec != b.sec {
		return a.sec < b.sec
	}
	if a.nsec != b.nsec {
		return a.nsec < b.nsec
	}
	return a.id < b.id
}

// sortKeys sorts keys (ids are distinct, so any sort gives one order):
// a quicksort with the comparison inlined, as groups are sorted by the
// thousand per pass; stores list jobs by id, so groups are often sorted
// already. Past depth it leaves the rest to the library's sort.
func sortKeys(k []qkey, depth int) {
	for len(k) > 12 {
		if depth == 0 {
			slices.SortFunc(k, func(a, b qkey) int {
				if a.less(&b) {
					return -1
				}
				if b.less(&a) {
					return 1
				}
				return 0
			})
			return
		}
		depth--
		sorted := true
		for i := 1; i < len(k); i++ {
			if k[i].less(&k[i-1]) {
				sorted = false
				break
			}
		}
		if sorted {
			return
		}
		// Median of three to k[0], then partition (Hoare).
		m, l := len(k)/2, len(k)-1
		if k[m].less(&k[0]) {
			k[m], k[0] = k[0], k[m]
		}
		if k[l].less(&k[0]) {
			k[l], k[0] = k[0], k[l]
		}
		if k[l].less(&k[m]) {
			k[l], k[m] = k[m], k[l]
		}
		k[0], k[m] = k[m], k[0]
		p := k[0]
		i, j := 1, l
		for {
			for i <= j && k[i].less(&p) {
				i++
			}
			for i <= j && p.less(&k[j]) {
				j--
			}
			if i >= j {
				break
			}
			k[i], k[j] = k[j], k[i]
			i++
			j--
		}
		k[0], k[j] = k[j], k[0]
		// Recurse into the smaller side.
		if j < len(k)-j {
			sortKeys(k[:j], depth)
			k = k[j+1:]
		} else {
			sortKeys(k[j+1:], depth)
			k = k[:j]
		}
	}
	for i := 1; i < len(k); i++ {
		for x := i; x > 0 && k[x].less(&k[x-1]); x-- {
			k[x], k[x-1] = k[x-1], k[x]
		}
	}
}

// compare is the queue's order on records.
func (q *queue) compare(a, b *job) int {
	if a.tier != b.tier {
		return int(b.tier) - int(a.tier)
	}
	if a.proj != b.proj {
		if c := strings.Compare(q.projs[a.proj], q.projs[b.proj]); c != 0 {
			return c
		}
	}
	if a.sec != b.sec {
		return compareInt64(a.sec, b.sec)
	}
	if a.nsec != b.nsec {
		return int(a.nsec) - int(b.nsec)
	}
	return compareInt64(a.id, b.id)
}

// insert adds a job (the queue owns pd); false when its submit time does
// not fit the queue's packing, and the queue must be rebuilt.
func (q *queue) insert(pd *Pending) bool {
	var slot int32
	if n := len(q.free); n > 0 {
		slot = q.free[n-1]
	} else {
		slot = int32(len(q.slots))
	}
	last := int32(-1)
	j, ok := q.record(pd, slot, &last)
	if !ok {
		return false
	}
	if n := len(q.free); n > 0 {
		q.free = q.free[:n-1]
		q.slots[slot] = pd
	} else {
		q.slots = append(q.slots, pd)
	}
	i, _ := slices.BinarySearchFunc(q.jobs, j, func(a, b job) int { return q.compare(&a, &b) })
	q.insertAt(i, j)
	if pd.Beneficiary {
		q.beneficiaries++
	}
	q.noteEdit(j, true)
	q.dirty = true
	return true
}

// inBuf reports whether q.jobs lies in q.jobsBuf at q.jobsOff.
func (q *queue) inBuf() bool {
	return len(q.jobs) > 0 && q.jobsOff+len(q.jobs) <= len(q.jobsBuf) && &q.jobsBuf[q.jobsOff] == &q.jobs[0]
}

// insertAt puts j at index i of q.jobs, moving the jobs before it one
// place back when they are fewer and there is room, else those after it
// (urgent jobs go near the front of a long queue).
func (q *queue) insertAt(i int, j job) {
	n := len(q.jobs)
	switch buf := q.inBuf(); {
	case buf && i < n/2 && q.jobsOff > 0:
		q.jobsOff--
		q.jobs = q.jobsBuf[q.jobsOff : q.jobsOff+n+1]
		copy(q.jobs[:i], q.jobs[1:i+1])
	case n < cap(q.jobs):
		q.jobs = q.jobs[:n+1]
		copy(q.jobs[i+1:], q.jobs[i:n])
	default: // a new list, with room at both ends
		slack := n/16 + 64
		nb := make([]job, n+1+2*slack)
		copy(nb[slack:], q.jobs[:i])
		copy(nb[slack+i+1:], q.jobs[i:])
		q.jobsBuf, q.jobsOff = nb, slack
		q.jobs = nb[slack : slack+n+1 : len(nb)]
	}
	q.jobs[i] = j
}

// deleteAt removes index i of q.jobs, moving the shorter side.
func (q *queue) deleteAt(i int) {
	n := len(q.jobs)
	if i < n/2 && q.inBuf() {
		copy(q.jobs[1:i+1], q.jobs[:i])
		q.jobsOff++
		q.jobs = q.jobsBuf[q.jobsOff : q.jobsOff+n-1 : len(q.jobsBuf)]
		return
	}
	copy(q.jobs[i:], q.jobs[i+1:])
	q.jobs[n-1] = job{}
	q.jobs = q.jobs[:n-1]
}

// remove deletes the job that was queued as pd (the Pending the queue owns).
func (q *queue) remove(pd *Pending) bool {
	last := int32(-1)
	j, ok := q.record(pd, 0, &last)
	if !ok {
		return false
	}
	i, found := slices.BinarySearchFunc(q.jobs, j, func(a, b job) int { return q.compare(&a, &b) })
	if !found || q.slots[q.jobs[i].slot] != pd {
		return false
	}
	slot := q.jobs[i].slot
	q.noteEdit(q.jobs[i], false)
	q.dirty = true
	q.slots[slot] = nil
	q.free = append(q.free, slot)
	q.deleteAt(i)
	if pd.Beneficiary {
		q.beneficiaries--
	}
	return true
}

// shapeID is a request as map key (integers hash faster than floats).
type shapeID struct {
	gpus  int
	cpus  uint64
	mem   int64
	nodes int
}
