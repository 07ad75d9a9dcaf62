package control

import (
	"cmp"
	"context"
	"reflect"
	"slices"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/scheduler"
	"trainyard/internal/store"
)

// The loop keeps a view of the live jobs between cycles (refreshView) and,
// from each job that changed, everything derived from the queue: the
// scheduler's pending list, the queued counts by pool and project, the
// retry backoffs still running, the queue view's labels and what the
// Observer is told. A cycle's cost thus follows what changed, not the
// queue; only the check every Resync looks at every job, by its id and
// revision alone.

// View is what the loop sees of the live work, as told to an Observer
// (Observer.View). Its maps and slices are the loop's: read them during
// the call only.
type View struct {
	// Pools are the pools as of this cycle.
	Pools []domain.Pool
	// Queued counts the queued jobs by pool and project.
	Queued map[PoolProject]int
	// Entered are the jobs that entered the queue, or whose entry changed,
	// since the last View; Left are the ids of the jobs that left it. With
	// Reset (the first View), Entered is the whole queue.
	Entered []QueuedJob
	Left    []int64
	Reset   bool
	// Active are the active (starting or running) attempts, by job id
	// ascending, each with its job as the loop last saw it.
	Active []ActiveAttempt
}

// PoolProject names one project's jobs in one pool.
type PoolProject struct{ Pool, Project string }

// QueuedJob is a queued job as an Observer is told of it: Since is when it
// entered the queue (its submit, or its requeue for a retry or after a
// preemption).
type QueuedJob struct {
	ID                             int64
	Name, Project, Pool, Submitter string
	RerunOf                        int64
	Since                          time.Time
}

// ActiveAttempt is an active attempt (JobID, Number, Node, GPUs and
// Borrowed set) and its job.
type ActiveAttempt struct {
	Job     domain.Job
	Attempt domain.Attempt
}

// queueLabel is what the queue view shows of a waiting job besides the
// pass's verdict; kept under queueMu for API readers.
type queueLabel struct {
	name, project, submitter, pool string
	priority                       domain.Priority
	submitted                      time.Time
	resources                      domain.Resources
}

// pendingEdit is one change to the pending list: the job's new entry, or
// its removal.
type pendingEdit struct {
	p   scheduler.Pending
	del bool
}

// labelEdit is one change to the queue view's labels.
type labelEdit struct {
	id  int64
	l   queueLabel
	del bool
}

// refreshView brings the view of the live jobs up to date: a full read
// at the start and after an error, compared job by job with the view;
// every Resync, a check of every live job's revision against the read its
// row in the view came from, which reads again only the jobs written
// since (and finds those a look since missed); else only the jobs written
// since the last look. Each job that changed updates what is derived from
// the queue (absorb).
func (c *Controller) refreshView(ctx context.Context, now time.Time) error {
	full := c.view == nil || c.resync
	check := !full && (now.Sub(c.viewAt) >= c.cfg.Resync || now.Before(c.viewAt))
	var jobs []domain.Job
	var revs []store.JobRev // check: every live job, by id ascending
	var cur store.JobCursor
	var err error
	switch {
	case full:
		jobs, cur, err = c.cfg.Store.LiveJobs(ctx)
	case check:
		revs, cur, err = c.cfg.Store.LiveJobRevs(ctx)
		if err == nil {
			var stale []int64
			for _, r := range revs {
				if read, ok := c.viewRead[r.ID]; !ok || r.Rev > read {
					stale = append(stale, r.ID)
				}
			}
			if len(stale) > 0 {
				// Read after the revisions: each row is at least as new
				// as cur, all that viewRead will claim of it.
				jobs, err = c.cfg.Store.JobsByID(ctx, stale)
			}
		}
	default:
		// With the jobs, their active attempts and the settings revision,
		// in the same read (attempts.go, settings.go).
		var ch store.JobChanges
		ch, err = c.cfg.Store.ChangedJobsWith(ctx, c.cursor)
		jobs, cur = ch.Jobs, ch.Cursor
		if err == nil {
			c.attempts.noteRead(ch.Jobs, ch.Attempts)
			c.settings.noteRev(ch.SettingsRev)
		}
	}
	if err != nil {
		c.resync = true // read everything next time
		return err
	}
	if full || check {
		c.attempts.full = true // attempts.go
		c.flows.full = true    // workflow.go
	}
	if c.view == nil {
		c.view = map[int64]domain.Job{}
		c.viewRead = map[int64]store.JobCursor{}
		c.queuedBy = map[PoolProject]int{}
		c.backoffs = map[int64]time.Time{}
		c.viewReset = true
	}
	var edits []pendingEdit
	var labels []labelEdit
	var added, removed []int64 // the ids that entered and left the view
	change := func(old domain.Job, had bool, j domain.Job, live bool) {
		c.hintIDs = append(c.hintIDs, j.ID)
		edits, labels = c.absorb(edits, labels, old, had, j, live)
		switch {
		case live && !had:
			added = append(added, j.ID)
		case !live && had:
			removed = append(removed, j.ID)
		}
	}
	// left takes the jobs of the view that are not among the n live ids
	// id(0) < id(1) < ... out of it.
	left := func(n int, id func(i int) int64) {
		i := 0
		for _, vid := range c.viewIDs {
			for i < n && id(i) < vid {
				i++
			}
			if i < n && id(i) == vid {
				continue
			}
			old := c.view[vid]
			gone := old
			gone.State = domain.JobCanceled // any state that is not live
			change(old, true, gone, false)
		}
	}
	switch {
	case full:
		// Every job read is live; those of the view not read are not.
		left(len(jobs), func(i int) int64 { return jobs[i].ID })
		for _, j := range jobs {
			old, had := c.view[j.ID]
			if !had || !sameRow(old, j) {
				change(old, had, j, true)
			}
			c.viewRead[j.ID] = cur
		}
	case check:
		// Those of the view not listed live are not; the rest of the
		// view is as the store has it, but for the jobs read again.
		left(len(revs), func(i int) int64 { return revs[i].ID })
		fallthrough
	default:
		for _, j := range jobs {
			c.flows.note(j) // workflow.go
			old, had := c.view[j.ID]
			live := j.State.Live()
			if live {
				c.viewRead[j.ID] = cur
			}
			if !live && !had || had && live && sameRow(old, j) {
				continue
			}
			change(old, had, j, live)
		}
	}
	if full || check {
		// The jobs that differ are hinted like any change: a look at
		// every job that finds nothing new makes no pass.
		c.viewAt, c.resync = now, false
	}
	c.viewIDs = editIDs(c.viewIDs, added, removed)
	c.cursor = cur
	c.editPending(edits)
	if len(labels) > 0 {
		c.queueMu.Lock()
		if c.labels == nil {
			c.labels = make(map[int64]queueLabel, len(labels))
		}
		for _, e := range labels {
			if e.del {
				delete(c.labels, e.id)
			} else {
				c.labels[e.id] = e.l
			}
		}
		c.queueMu.Unlock()
	}
	if len(c.hintIDs) > 4096 {
		c.hintIDs, c.hintFull = c.hintIDs[:0], true
	}
	return nil
}

// editIDs returns ids (ascending) with removed taken out and added put in:
// ids none of added is among, and all of removed is. A few edits are made
// in place, by binary search; more in one merge of the lists, so that a
// cycle's cost follows the change, not the view.
func editIDs(ids, added, removed []int64) []int64 {
	if len(added) == 0 && len(removed) == 0 {
		return ids
	}
	// Each read comes in id order, but a check removes in two rounds.
	if !slices.IsSorted(added) {
		slices.Sort(added)
	}
	if !slices.IsSorted(removed) {
		slices.Sort(removed)
	}
	if len(added)+len(removed) <= 16 {
		for _, id := range removed {
			if i, ok := slices.BinarySearch(ids, id); ok {
				ids = slices.Delete(ids, i, i+1)
			}
		}
		for _, id := range added {
			if i, ok := slices.BinarySearch(ids, id); !ok {
				ids = slices.Insert(ids, i, id)
			}
		}
		return ids
	}
	next := make([]int64, 0, len(ids)+len(added))
	a, r := 0, 0
	for _, id := range ids {
		for a < len(added) && added[a] < id {
			next = append(next, added[a])
			a++
		}
		for r < len(removed) && removed[r] < id {
			r++
		}
		if r < len(removed) && removed[r] == id {
			continue
		}
		next = append(next, id)
	}
	return append(next, added[a:]...)
}

// absorb takes one changed job into the view (live false: it left it) and
// updates what is derived from the queue, appending the pending list's and
// the labels' edits.
func (c *Controller) absorb(edits []pendingEdit, labels []labelEdit, old domain.Job, had bool, j domain.Job, live bool) ([]pendingEdit, []labelEdit) {
	c.viewChanged = true
	wasQ := had && old.State == domain.JobQueued
	isQ := live && j.State == domain.JobQueued
	if live {
		c.view[j.ID] = j
	} else {
		delete(c.view, j.ID)
		delete(c.viewRead, j.ID)
		delete(c.reasons, j.ID)
	}
	if wasQ {
		k := PoolProject{old.Pool, old.Project}
		if c.queuedBy[k]--; c.queuedBy[k] <= 0 {
			delete(c.queuedBy, k)
		}
	}
	if isQ {
		c.queuedBy[PoolProject{j.Pool, j.Project}]++
		edits = append(edits, pendingEdit{p: c.pendingOf(j)})
		l := labelOf(j)
		if !wasQ || l != labelOf(old) {
			labels = append(labels, labelEdit{id: j.ID, l: l})
		}
		if !wasQ || !old.UpdatedAt.Equal(j.UpdatedAt) || l != labelOf(old) || old.RerunOf != j.RerunOf {
			c.entered = append(c.entered, QueuedJob{ID: j.ID, Name: j.Name, Project: j.Project, Pool: j.Pool,
				Submitter: j.Submitter, RerunOf: j.RerunOf, Since: j.UpdatedAt}) // a queued job's UpdatedAt is when it entered the queue
		}
	} else if wasQ {
		edits = append(edits, pendingEdit{p: scheduler.Pending{JobID: j.ID}, del: true})
		labels = append(labels, labelEdit{id: j.ID, del: true})
		c.left = append(c.left, j.ID)
		delete(c.beneficiaries, j.ID) // started, or gone
	}
	if isQ && j.NextAttempt.After(c.passNow) {
		// The last pass saw it wait (or did not see it): one is due when
		// the backoff runs out, even if it has by now.
		c.backoffs[j.ID] = j.NextAttempt
	} else {
		delete(c.backoffs, j.ID)
	}
	if live && j.State != domain.JobQueued && (j.CancelRequested || j.PreemptRequested) && j.Attempts > 0 {
		c.cancels = append(c.cancels, j.ID)
	}
	return edits, labels
}

func labelOf(j domain.Job) queueLabel {
	return queueLabel{name: j.Name, project: j.Project, submitter: j.Submitter, pool: j.Pool, priority: j.Priority,
		submitted: j.SubmittedAt, resources: j.Resources}
}

// pendingOf is the scheduler's entry of a queued job.
func (c *Controller) pendingOf(j domain.Job) scheduler.Pending {
	return scheduler.Pending{JobID: j.ID, Project: j.Project, Pool: j.Pool,
		Priority: j.Priority, SubmittedAt: j.SubmittedAt, Resources: j.Resources, Timeout: j.Timeout.D(),
		Preemptible: j.Preemptible, NotBefore: j.NextAttempt, Preemptions: j.Preemptions,
		Beneficiary: c.beneficiaries[j.ID]}
}

// editPending applies edits to the pending list (by job id ascending),
// noting whether any entry changed: a few by binary search, more in one
// merge.
func (c *Controller) editPending(edits []pendingEdit) {
	if len(edits) == 0 {
		return
	}
	slices.SortStableFunc(edits, func(a, b pendingEdit) int { return cmp.Compare(a.p.JobID, b.p.JobID) })
	byID := func(p scheduler.Pending, id int64) int { return cmp.Compare(p.JobID, id) }
	if len(edits) <= 16 {
		for _, e := range edits {
			i, found := slices.BinarySearchFunc(c.pending, e.p.JobID, byID)
			switch {
			case e.del && found:
				c.pending = slices.Delete(c.pending, i, i+1)
				c.pendingDirty = true
			case e.del:
			case found && c.pending[i] == e.p:
			case found:
				c.pending[i] = e.p
				c.pendingDirty = true
			default:
				c.pending = slices.Insert(c.pending, i, e.p)
				c.pendingDirty = true
			}
		}
		return
	}
	next := c.pendingSpare[:0]
	if cap(next) < len(c.pending)+len(edits) {
		next = make([]scheduler.Pending, 0, len(c.pending)+len(edits)+len(c.pending)/8)
	}
	i := 0
	for k, e := range edits {
		if k+1 < len(edits) && edits[k+1].p.JobID == e.p.JobID {
			continue // a later edit of the same job wins
		}
		for i < len(c.pending) && c.pending[i].JobID < e.p.JobID {
			next = append(next, c.pending[i])
			i++
		}
		found := i < len(c.pending) && c.pending[i].JobID == e.p.JobID
		if found {
			if e.del || c.pending[i] != e.p {
				c.pendingDirty = true
			}
			i++
		} else if !e.del {
			c.pendingDirty = true
		}
		if !e.del {
			next = append(next, e.p)
		}
	}
	next = append(next, c.pending[i:]...)
	c.pending, c.pendingSpare = next, c.pending
}

// markBeneficiary notes that jobs were preempted for the queued job id:
// its pending entry says so from now on.
func (c *Controller) markBeneficiary(id int64) {
	if c.beneficiaries[id] {
		return
	}
	c.beneficiaries[id] = true
	c.hintIDs = append(c.hintIDs, id) // its Pending changed
	if i, ok := slices.BinarySearchFunc(c.pending, id, func(p scheduler.Pending, id int64) int { return cmp.Compare(p.JobID, id) }); ok {
		c.pending[i].Beneficiary = true
		c.pendingDirty = true
	}
}

// sameRow reports whether two reads of a job's row (as the store lists
// jobs: without the spec) are the same.
func sameRow(a, b domain.Job) bool {
	return a.ID == b.ID && a.Name == b.Name && a.Project == b.Project && a.Pool == b.Pool && a.State == b.State &&
		a.Reason == b.Reason && a.Message == b.Message && a.Priority == b.Priority && a.Submitter == b.Submitter &&
		a.SubmittedAt.Equal(b.SubmittedAt) && a.UpdatedAt.Equal(b.UpdatedAt) && a.StartedAt.Equal(b.StartedAt) &&
		a.FinishedAt.Equal(b.FinishedAt) && a.Resources == b.Resources && a.OutputDir == b.OutputDir &&
		a.Attempts == b.Attempts && a.NextAttempt.Equal(b.NextAttempt) && a.CancelRequested == b.CancelRequested &&
		a.PreemptRequested == b.PreemptRequested && a.Preemptions == b.Preemptions && a.IdempotencyKey == b.IdempotencyKey &&
		a.Timeout == b.Timeout && a.Preemptible == b.Preemptible && a.RerunOf == b.RerunOf && a.SpecHash == b.SpecHash
}

// poolWaits reports whether any job is queued in the pool.
func (c *Controller) poolWaits(pool string) bool {
	for k := range c.queuedBy {
		if k.Pool == pool {
			return true
		}
	}
	return false
}

// observeView tells the Observer the view when it changed since the last
// time: a job, the active attempts or the pools.
func (c *Controller) observeView(snap scheduler.Snapshot) {
	if _, ok := c.cfg.Observer.(nopObserver); ok {
		c.entered, c.left = c.entered[:0], c.left[:0]
		return
	}
	runChanged := len(snap.Running) != len(c.viewRun)
	for i := 0; !runChanged && i < len(snap.Running); i++ {
		runChanged = !snap.Running[i].Equal(&c.viewRun[i])
	}
	if !c.viewChanged && !runChanged && c.viewPools != nil && reflect.DeepEqual(c.viewPools, snap.Pools) {
		return
	}
	if len(c.entered) > 0 && len(c.left) > 0 {
		// A job that left and came back, or came and left, since the last
		// View (cycles that failed to read told nothing): its state now
		// decides.
		queued := func(id int64) bool { return c.view[id].State == domain.JobQueued }
		c.entered = slices.DeleteFunc(c.entered, func(q QueuedJob) bool { return !queued(q.ID) })
		c.left = slices.DeleteFunc(c.left, queued)
	}
	v := View{Pools: snap.Pools, Queued: c.queuedBy, Entered: c.entered, Left: c.left, Reset: c.viewReset,
		Active: make([]ActiveAttempt, 0, len(snap.Running))}
	for _, r := range snap.Running {
		j := c.view[r.JobID]
		a := domain.Attempt{JobID: r.JobID, Number: j.Attempts, Borrowed: r.Borrowed}
		if len(r.Nodes) > 0 {
			a.Node, a.GPUs = r.Nodes[0].Node, r.Nodes[0].GPUs
		}
		v.Active = append(v.Active, ActiveAttempt{Job: j, Attempt: a})
	}
	c.cfg.Observer.View(v)
	c.entered, c.left = c.entered[:0], c.left[:0]
	c.viewChanged, c.viewReset = false, false
	c.viewPools = snap.Pools
	c.viewRun = append(c.viewRun[:0], snap.Running...)
}
