package scheduler

import (
	"trainyard/internal/domain"

	"cmp"
	"slices"
)

// Incremental schedules a sequence of snapshots, keeping the sorted queues
// of pending jobs between passes, so that a pass after a small change (a
// submit, a finish, a cancel) does not sort the whole queue again. Every
// Plan it returns is byte-identical to Schedule's for the same snapshot and
// config; it falls back to a full pass whenever it cannot tell what changed.
//
// The queue keeps copies of the pending jobs it has seen, so callers may
// reuse or modify a snapshot's slices after Schedule returns. A returned
// Plan is valid only until the next call: the next pass reuses its storage
// (copy what must outlive it). The zero value is ready to use. An
// Incremental is not safe for concurrent use.
type Incremental struct {
	prev   []*Pending // the last pass's pending jobs, by id ascending (owned copies)
	ids    []int64    // their ids, so that lookups need not follow the pointers
	runIDs []int64    // scratch: running job ids (usable)
	queues map[string]*queue
	spare  []*Pending // the list before prev, reused as the next one
	// waiting is the last plan's Waiting storage, reused by the next pass.
	waiting []Waiting
}

// maxDelta is the number of changed pending jobs above which a pass
// rebuilds the queues instead of editing them.
const maxDelta = 4096

// Schedule decides one pass like Schedule(s, cfg), reusing what the last
// call learned about the pending jobs that did not change.
func (in *Incremental) Schedule(s Snapshot, cfg Config) Plan {
	return in.schedule(s, cfg, nil, false)
}

// ScheduleChanged is Schedule for a caller that knows which pending jobs
// changed: s.Pending (in ascending id order) differs from the previous
// call's only in the jobs whose ids are in changed — added, removed or
// modified; other ids in changed are ignored. The jobs not named are not
// compared, so a pass after a small change does not read the whole queue.
// A changed list that cannot be right (the pending count does not match)
// falls back to comparing everything.
func (in *Incremental) ScheduleChanged(s Snapshot, cfg Config, changed []int64) Plan {
	return in.schedule(s, cfg, changed, true)
}

func (in *Incremental) schedule(s Snapshot, cfg Config, changed []int64, hinted bool) Plan {
	cfg = cfg.withDefaults()
	told := false // the hint held up: trust it for running jobs too
	if hinted {
		changed = slices.Compact(slices.Sorted(slices.Values(changed))) // each id once, ascending
	}
	switch r := applyRebuild; {
	case in.queues != nil:
		r = applyUnknown
		if hinted {
			r = in.applyChanged(s.Pending, changed)
			told = r != applyUnknown
		}
		if r == applyUnknown {
			r = in.apply(s.Pending)
		}
		if r == applyUnordered {
			in.reset()
			return newPass(s, cfg).run()
		}
		if r == applyRebuild {
			in.rebuild(s.Pending)
		}
	case !increasing(s.Pending, pendingID):
		in.reset()
		return newPass(s, cfg).run()
	default:
		in.rebuild(s.Pending)
	}
	if !in.usable(s, changed, told) {
		in.reset()
		return newPass(s, cfg).run()
	}
	p := newPass(s, cfg)
	p.queues = in.queues
	p.waitBuf = in.waiting
	if told {
		p.told, p.changed = true, changed
	}
	plan := p.run()
	if n := len(plan.Waiting); n < len(in.waiting) {
		clear(in.waiting[n:]) // let the last plan's messages go
	}
	in.waiting = plan.Waiting
	return plan
}

func (in *Incremental) reset() { in.prev, in.ids, in.queues, in.spare = nil, nil, nil, nil }

// increasing reports whether key strictly increases along xs (pending or
// running jobs by id, as a store lists them; GPU indices as nodes list
// them), which lets a pass skip sorting, or compare with the last pass's
// list in one sweep.
func increasing[T any, K cmp.Ordered](xs []T, key func(T) K) bool {
	for i := 1; i < len(xs); i++ {
		if key(xs[i]) <= key(xs[i-1]) {
			return false
		}
	}
	return true
}

func pendingID(p Pending) int64 { return p.JobID }

// rebuild copies pending and sorts every pool's queue.
func (in *Incremental) rebuild(pending []Pending) {
	own := slices.Clone(pending)
	in.prev = make([]*Pending, len(own))
	in.ids = make([]int64, len(own))
	for i := range own {
		in.prev[i] = &own[i]
		in.ids[i] = own[i].JobID
	}
	byPool := slices.Clone(in.prev)
	slices.SortStableFunc(byPool, func(a, b *Pending) int { return cmp.Compare(a.Pool, b.Pool) })
	in.queues = map[string]*queue{}
	for i := 0; i < len(byPool); {
		j := i
		for j < len(byPool) && byPool[j].Pool == byPool[i].Pool {
			j++
		}
		in.queues[byPool[i].Pool] = buildQueue(byPool[i:j:j])
		i = j
	}
}

// Results of apply.
const (
	applyDone      = iota // the queues stand for the pending jobs
	applyRebuild          // too many changes, or an edit failed: rebuild
	applyUnordered        // pending ids do not strictly increase: full pass
	applyUnknown          // the changes could not be told from the hint: compare
)

// change is one pending job that differs from the last pass.
type change struct {
	old *Pending // removed (or replaced)
	new int      // index into pending of an added (or replacing) job; -1: none
	pd  *Pending // the queue's copy of pending[new]
}

// applyChanged edits the queues for the jobs named in changed (ascending,
// each once) only (see ScheduleChanged).
func (in *Incremental) applyChanged(pending []Pending, changed []int64) int {
	if len(changed) > maxDelta {
		return applyUnknown
	}
	var changes []change
	n := len(in.prev)
	for _, id := range changed {
		i, isNew := slices.BinarySearchFunc(pending, id, func(p Pending, id int64) int { return cmp.Compare(p.JobID, id) })
		k, wasOld := slices.BinarySearch(in.ids, id)
		switch {
		case isNew && wasOld:
			if pending[i] != *in.prev[k] {
				changes = append(changes, change{old: in.prev[k], new: i})
			}
		case isNew:
			changes = append(changes, change{new: i})
			n++
		case wasOld:
			changes = append(changes, change{old: in.prev[k], new: -1})
			n--
		}
	}
	if n != len(pending) {
		return applyUnknown // the hint missed something
	}
	return in.edit(pending, changes) // in id order, as apply's sweep makes them
}

// apply edits the queues from the last pass's pending jobs to these. It
// checks the ids' order in the same sweep that finds the changes, and
// edits nothing when they are out of order.
func (in *Incremental) apply(pending []Pending) int {
	// One sweep over both id-ordered lists finds the changes.
	var changes []change
	prev := in.prev
	i, k := 0, 0
	for i < len(pending) && k < len(prev) {
		if i > 0 && pending[i].JobID <= pending[i-1].JobID {
			return applyUnordered
		}
		// Runs of unchanged jobs are the common case.
		if p := &pending[i]; p.JobID == prev[k].JobID {
			if *p != *prev[k] {
				changes = append(changes, change{old: prev[k], new: i})
				if len(changes) > maxDelta {
					return applyRebuild
				}
			}
			i++
			k++
			continue
		}
		if pending[i].JobID < prev[k].JobID {
			changes = append(changes, change{new: i})
			i++
		} else {
			changes = append(changes, change{old: prev[k], new: -1})
			k++
		}
		if len(changes) > maxDelta {
			return applyRebuild
		}
	}
	for ; i < len(pending); i++ {
		if i > 0 && pending[i].JobID <= pending[i-1].JobID {
			return applyUnordered
		}
		changes = append(changes, change{new: i})
	}
	for ; k < len(prev); k++ {
		changes = append(changes, change{old: prev[k], new: -1})
	}
	if len(changes) > maxDelta {
		return applyRebuild
	}
	return in.edit(pending, changes)
}

// edit applies changes (in id order) to the queues and the id-ordered list.
func (in *Incremental) edit(pending []Pending, changes []change) int {
	if len(changes) == 0 {
		return applyDone
	}
	for x := range changes {
		c := &changes[x]
		if c.old != nil {
			q := in.queues[c.old.Pool]
			if q == nil || !q.remove(c.old) {
				return applyRebuild
			}
		}
		if c.new >= 0 {
			c.pd = new(Pending)
			*c.pd = pending[c.new]
			q := in.queues[c.pd.Pool]
			if q == nil {
				q = buildQueue(nil)
				q.packed, q.base = true, c.pd.SubmittedAt.Unix()
				in.queues[c.pd.Pool] = q
			}
			if !q.insert(c.pd) {
				return applyRebuild
			}
		}
	}
	// The new id-ordered list: unchanged jobs keep their copies. A few
	// changes are edited in place; many are merged in one sweep.
	if len(changes) <= 64 {
		for _, c := range changes {
			id := int64(0)
			if c.old != nil {
				id = c.old.JobID
			} else {
				id = c.pd.JobID
			}
			x, found := slices.BinarySearch(in.ids, id)
			switch {
			case found && c.pd != nil:
				in.prev[x] = c.pd
			case found:
				in.prev = slices.Delete(in.prev, x, x+1)
				in.ids = slices.Delete(in.ids, x, x+1)
			default:
				in.prev = slices.Insert(in.prev, x, c.pd)
				in.ids = slices.Insert(in.ids, x, id)
			}
		}
		return applyDone
	}
	next := in.spare[:0]
	if cap(next) < len(pending) {
		next = make([]*Pending, 0, len(pending)+len(pending)/8)
	}
	ci, k := 0, 0
	for i := range pending {
		id := pending[i].JobID
		for k < len(in.prev) && in.prev[k].JobID < id {
			k++
		}
		for ci < len(changes) && changes[ci].new >= 0 && changes[ci].new < i || ci < len(changes) && changes[ci].new < 0 {
			ci++
		}
		if ci < len(changes) && changes[ci].new == i {
			next = append(next, changes[ci].pd)
			ci++
			if k < len(in.prev) && in.prev[k].JobID == id {
				k++
			}
			continue
		}
		next = append(next, in.prev[k])
		k++
	}
	clear(in.prev) // let removed jobs' copies go
	in.prev, in.spare = next, in.prev
	in.ids = in.ids[:0]
	for _, p := range next {
		in.ids = append(in.ids, p.JobID)
	}
	return applyDone
}

// usable reports whether the queues can stand for s.Pending: every pending
// job's pool is in the snapshot and no pending job is also running (both
// need the full pass's handling).
//
// Told what changed (and the last pass having used the queues, so that no
// pending job was running then), only a changed job can be both.
func (in *Incremental) usable(s Snapshot, changed []int64, told bool) bool {
	for name, q := range in.queues {
		if len(q.jobs) == 0 {
			continue
		}
		if !slices.ContainsFunc(s.Pools, func(p domain.Pool) bool { return p.Name == name }) {
			return false
		}
	}
	if told && len(changed) <= 16 { // a few: each scans the running list
		for _, id := range changed {
			if _, pending := slices.BinarySearch(in.ids, id); pending &&
				slices.ContainsFunc(s.Running, func(a Allocation) bool { return a.JobID == id }) {
				return false
			}
		}
		return true
	}
	// Running ids in order, each looked up from where the last one was.
	run := in.runIDs[:0]
	for i := range s.Running {
		run = append(run, s.Running[i].JobID)
	}
	slices.Sort(run)
	in.runIDs = run
	ids := in.ids
	for _, id := range run {
		x, found := slices.BinarySearch(ids, id)
		if found {
			return false
		}
		ids = ids[x:]
	}
	return true
}
