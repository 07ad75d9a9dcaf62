package scheduler

import (
	"cmp"
	"iter"
	"slices"
)

// Queues is what a caller that schedules a sequence of snapshots may keep
// between passes (package incremental does): each pool's pending jobs
// sorted in queue order, with the decision memo and the pool's resolved
// running allocations kept beside them, so that a pass after a small
// change neither sorts the queue again nor decides again what it decided
// before on the same inputs. Schedule keeps nothing between passes;
// Queues and ScheduleQueues are the one hook for a caller that does.
//
// A Queues holds the caller's Pending values by pointer: they must not
// change while held. The zero value is not usable; a Queues is not safe
// for concurrent use.
type Queues struct {
	pools map[string]*queue
	last  lastInputs // what the last pass ran on (replay.go)
	// replayed counts the passes replayed from a visit log (replay.go).
	replayed int64
	// passes counts the passes over qs; reused, the pools whose entries
	// a pass took from the previous plan (reuse.go).
	passes, reused int64
	// patched counts the pools decided by a patch (patch.go).
	patched int64
}

// Reused is how many times a pass over qs took a pool's entries from the
// previous plan instead of walking the pool (docs/scheduling.md,
// Performance).
func (qs *Queues) Reused() int64 { return qs.reused }

// NewQueues sorts pending (each job once, by pointer) into one queue per
// pool.
func NewQueues(pending []*Pending) *Queues {
	byPool := slices.Clone(pending)
	slices.SortStableFunc(byPool, func(a, b *Pending) int { return cmp.Compare(a.Pool, b.Pool) })
	qs := &Queues{pools: map[string]*queue{}}
	for i := 0; i < len(byPool); {
		j := i
		for j < len(byPool) && byPool[j].Pool == byPool[i].Pool {
			j++
		}
		qs.pools[byPool[i].Pool] = buildQueue(byPool[i:j:j])
		i = j
	}
	return qs
}

// Insert adds one pending job to its pool's queue, making the queue of a
// pool not seen before. It reports false when the job cannot be inserted
// in place (its submit time is outside what the queue's records can
// hold): the caller then builds the queues afresh with NewQueues.
func (qs *Queues) Insert(pd *Pending) bool {
	q := qs.pools[pd.Pool]
	if q == nil {
		q = buildQueue(nil)
		q.packed, q.base = true, pd.SubmittedAt.Unix()
		qs.pools[pd.Pool] = q
	}
	return q.insert(pd)
}

// Remove deletes pd, the very pointer inserted, from its pool's queue. It
// reports false when pd is not there: the caller then builds the queues
// afresh with NewQueues.
func (qs *Queues) Remove(pd *Pending) bool {
	q := qs.pools[pd.Pool]
	return q != nil && q.remove(pd)
}

// Pools yields the names of the pools whose queues hold jobs, in no
// particular order.
func (qs *Queues) Pools() iter.Seq[string] {
	return func(yield func(string) bool) {
		for name, q := range qs.pools {
			if len(q.jobs) > 0 && !yield(name) {
				return
			}
		}
	}
}

// Kept says how ScheduleQueues may use what the queues keep.
type Kept struct {
	// Told: Changed lists, ascending and each once, the ids of every
	// pending and running job that may differ from the previous pass over
	// the same Queues. A running job not named holds what it held then,
	// so what that pass resolved of its allocation is reused.
	Told    bool
	Changed []int64
	// Waiting, when its capacity suffices, is the storage the plan's
	// Waiting is written to: the caller hands it over and may not use it
	// again.
	Waiting []Waiting
	// Last, when set, is the plan the previous pass over the same Queues
	// returned, handed back unchanged (Waiting is then its Waiting). A
	// told pass after only submits and cancels may edit it into this
	// pass's plan instead of walking the queues (docs/scheduling.md,
	// Performance): the plan returned then shares its storage.
	Last *Plan
	// Prev, when set with Told, is the plan the previous pass over the
	// same Queues returned, unchanged, which this pass only reads: a pool
	// whose inputs did not change takes its entries from it instead of
	// walking its queue. Its Waiting may be Waiting's storage (the pass
	// then takes care not to write over what it reads), but no other
	// storage of it may be.
	Prev *Plan
}

// ScheduleQueues decides one pass as Schedule(s, cfg) does, taking the
// pending jobs from qs instead of s.Pending, and leaves qs holding what
// this pass learned. The caller vouches that qs stands for s.Pending: the
// same jobs, none of them also in s.Running, and every pool whose queue
// holds jobs in s.Pools. Its plan is then byte-identical to Schedule's.
func ScheduleQueues(s Snapshot, cfg Config, qs *Queues, k Kept) Plan {
	p := newPass(s, cfg.withDefaults())
	p.queues, p.qs, p.trackNow = qs.pools, qs, true
	p.waitBuf = k.Waiting
	if k.Told {
		p.told, p.changed, p.last, p.prev = true, k.Changed, k.Last, k.Prev
	}
	return p.run()
}
