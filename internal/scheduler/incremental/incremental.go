// Package incremental schedules a sequence of snapshots over the pure
// scheduler: it keeps the sorted queues of pending jobs (and, with them,
// the decisions the scheduler memoised) between passes, so that a pass
// after a small change (a submit, a finish, a cancel) does not sort the
// whole queue again nor decide again what did not change. Every Plan is
// byte-identical to scheduler.Schedule's for the same snapshot and config.
//
// It works only through the scheduler's exported API: scheduler.Queues
// and scheduler.ScheduleQueues are the hooks it keeps and runs, and
// everything here is the bookkeeping of what changed between snapshots.
package incremental

import (
	"cmp"
	"slices"

	"trainyard/internal/domain"
	"trainyard/internal/scheduler"
)

// Scheduler schedules a sequence of snapshots, keeping what it learned of
// the pending jobs between passes. It falls back to a full
// scheduler.Schedule whenever it cannot tell what changed.
//
// It keeps copies of the pending jobs it has seen, so callers may reuse
// or modify a snapshot's slices after a call returns. A returned Plan is
// the caller's: nothing it holds is kept or written by a later pass,
// unless the caller hands it back with Recycle (or sets ReadOnlyPlans).
// The zero value is ready to use. A Scheduler is not safe for concurrent
// use.
type Scheduler struct {
	// ReadOnlyPlans is the caller's promise that it never modifies a
	// plan it was returned. A told pass then reads the last plan
	// returned: each pool whose inputs did not change since takes its
	// entries from it instead of walking its queue (the placements' node
	// lists are then shared between the plans), so a submit to one pool
	// does not walk the others' queues.
	ReadOnlyPlans bool

	prev   []*scheduler.Pending // the last pass's pending jobs, by id ascending (owned copies)
	ids    []int64              // their ids, so that lookups need not follow the pointers
	runIDs []int64              // scratch: running job ids (usable)
	queues *scheduler.Queues
	spare  []*scheduler.Pending // the list before prev, reused as the next one
	// waiting is storage handed back by Recycle, for the next pass's
	// Waiting.
	waiting []scheduler.Waiting
	// returned is the last plan returned; recycled is it, when Recycle
	// handed it back (the next pass may then edit it instead of walking).
	returned, recycled scheduler.Plan
	hasReturned        bool // returned came from the queues' last pass
	hasRecycled        bool
	// replayed counts the passes edited from the previous plan; reused,
	// the pools whose entries a pass took from it.
	replayed, reused int64
	// patched counts the pools a pass decided by walking only the jobs of
	// the projects that changed.
	patched int64
	// full is the working memory of the full passes this scheduler falls
	// back to.
	full scheduler.Scratch
}

// Replayed is how many of this scheduler's passes edited the previous
// plan instead of walking the queues.
func (in *Scheduler) Replayed() int64 { return in.replayed }

// Patched is how many times one of this scheduler's passes decided a
// pool by walking only the jobs of the projects whose jobs changed,
// taking the others' entries from the previous plan.
func (in *Scheduler) Patched() int64 { return in.patched }

// Reused is how many times one of this scheduler's passes took a pool's
// entries from the previous plan instead of walking the pool
// (ReadOnlyPlans).
func (in *Scheduler) Reused() int64 { return in.reused }

// maxDelta is the number of changed pending jobs above which a pass
// rebuilds the queues instead of editing them.
const maxDelta = 4096

// Schedule decides one pass like scheduler.Schedule(s, cfg), reusing what
// the last call learned about the pending jobs that did not change.
func (in *Scheduler) Schedule(s scheduler.Snapshot, cfg scheduler.Config) scheduler.Plan {
	return in.schedule(s, cfg, nil, false)
}

// ScheduleChanged is Schedule for a caller that knows which pending jobs
// changed: s.Pending (in ascending id order) differs from the previous
// call's only in the jobs whose ids are in changed — added, removed or
// modified; other ids in changed are ignored. The jobs not named are not
// compared, so a pass after a small change does not read the whole queue.
// A changed list that cannot be right (the pending count does not match)
// falls back to comparing everything.
func (in *Scheduler) ScheduleChanged(s scheduler.Snapshot, cfg scheduler.Config, changed []int64) scheduler.Plan {
	return in.schedule(s, cfg, changed, true)
}

func (in *Scheduler) schedule(s scheduler.Snapshot, cfg scheduler.Config, changed []int64, hinted bool) scheduler.Plan {
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
			return scheduler.ScheduleIn(s, cfg, &in.full)
		}
		if r == applyRebuild {
			in.rebuild(s.Pending)
		}
	case !increasing(s.Pending, pendingID):
		in.reset()
		return scheduler.ScheduleIn(s, cfg, &in.full)
	default:
		in.rebuild(s.Pending)
	}
	if !in.usable(s, changed, told) {
		in.reset()
		return scheduler.ScheduleIn(s, cfg, &in.full)
	}
	buf := in.waiting
	in.waiting = nil // the plan's now, if the pass writes to it
	k := scheduler.Kept{Waiting: buf}
	if told {
		k.Told, k.Changed = true, changed
		if in.ReadOnlyPlans && in.hasReturned {
			prev := in.returned
			k.Prev = &prev
		}
		if in.hasRecycled {
			last := in.recycled
			k.Last = &last
		}
	}
	in.recycled, in.hasRecycled = scheduler.Plan{}, false
	before, reusedBefore, patchedBefore := in.queues.Replayed(), in.queues.Reused(), in.queues.Patched()
	plan := scheduler.ScheduleQueues(s, cfg, in.queues, k)
	in.replayed += in.queues.Replayed() - before
	in.reused += in.queues.Reused() - reusedBefore
	in.patched += in.queues.Patched() - patchedBefore
	if n := len(plan.Waiting); n < len(buf) {
		clear(buf[n:]) // let the recycled plan's messages go
	}
	in.returned, in.hasReturned = plan, true
	return plan
}

// Recycle hands back a plan that this Scheduler returned, unchanged, once
// the caller reads none of it any more: the next pass may write its
// Waiting entries over the plan's, instead of allocating a list as long
// as the queue, and when the plan is the last one returned, a told pass
// after only submits and cancels may edit it into the next plan instead
// of walking the queue. A caller that keeps its plans simply does not call
// it. Hand a plan back once at most.
func (in *Scheduler) Recycle(p scheduler.Plan) {
	if cap(p.Waiting) > cap(in.waiting) {
		in.waiting = p.Waiting
	}
	if samePlan(p, in.returned) {
		in.recycled, in.hasRecycled = p, true
		in.waiting = p.Waiting
	}
}

// samePlan reports whether a and b are the same plan: the same lists,
// not equal ones.
func samePlan(a, b scheduler.Plan) bool {
	return sameSlice(a.Start, b.Start) && sameSlice(a.Preempt, b.Preempt) && sameSlice(a.Waiting, b.Waiting)
}

func sameSlice[T any](a, b []T) bool {
	if len(a) != len(b) || cap(a) != cap(b) {
		return false
	}
	return cap(a) == 0 || &a[:cap(a)][0] == &b[:cap(b)][0]
}

func (in *Scheduler) reset() {
	in.prev, in.ids, in.queues, in.spare = nil, nil, nil, nil
	in.returned, in.recycled, in.hasReturned, in.hasRecycled = scheduler.Plan{}, scheduler.Plan{}, false, false
}

// increasing reports whether key strictly increases along xs (pending
// jobs by id, as a store lists them), which lets a pass compare with the
// last pass's list in one sweep.
func increasing[T any, K cmp.Ordered](xs []T, key func(T) K) bool {
	for i := 1; i < len(xs); i++ {
		if key(xs[i]) <= key(xs[i-1]) {
			return false
		}
	}
	return true
}

func pendingID(p scheduler.Pending) int64 { return p.JobID }

// rebuild copies pending and sorts every pool's queue.
func (in *Scheduler) rebuild(pending []scheduler.Pending) {
	own := slices.Clone(pending)
	in.prev = make([]*scheduler.Pending, len(own))
	in.ids = make([]int64, len(own))
	for i := range own {
		in.prev[i] = &own[i]
		in.ids[i] = own[i].JobID
	}
	in.queues = scheduler.NewQueues(in.prev)
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
	old *scheduler.Pending // removed (or replaced)
	new int                // index into pending of an added (or replacing) job; -1: none
	pd  *scheduler.Pending // the queue's copy of pending[new]
}

// applyChanged edits the queues for the jobs named in changed (ascending,
// each once) only (see ScheduleChanged).
func (in *Scheduler) applyChanged(pending []scheduler.Pending, changed []int64) int {
	if len(changed) > maxDelta {
		return applyUnknown
	}
	var changes []change
	n := len(in.prev)
	for _, id := range changed {
		i, isNew := slices.BinarySearchFunc(pending, id, func(p scheduler.Pending, id int64) int { return cmp.Compare(p.JobID, id) })
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
func (in *Scheduler) apply(pending []scheduler.Pending) int {
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
func (in *Scheduler) edit(pending []scheduler.Pending, changes []change) int {
	if len(changes) == 0 {
		return applyDone
	}
	for x := range changes {
		c := &changes[x]
		if c.old != nil && !in.queues.Remove(c.old) {
			return applyRebuild
		}
		if c.new >= 0 {
			c.pd = new(scheduler.Pending)
			*c.pd = pending[c.new]
			if !in.queues.Insert(c.pd) {
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
		next = make([]*scheduler.Pending, 0, len(pending)+len(pending)/8)
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
func (in *Scheduler) usable(s scheduler.Snapshot, changed []int64, told bool) bool {
	for name := range in.queues.Pools() {
		if !slices.ContainsFunc(s.Pools, func(p domain.Pool) bool { return p.Name == name }) {
			return false
		}
	}
	if told && len(changed) <= 16 { // a few: each scans the running list
		for _, id := range changed {
			if _, pending := slices.BinarySearch(in.ids, id); pending &&
				slices.ContainsFunc(s.Running, func(a scheduler.Allocation) bool { return a.JobID == id }) {
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
