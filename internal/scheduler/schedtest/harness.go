package schedtest

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/scheduler"
)

// Harness holds a snapshot, runs the scheduler on it, records every plan and
// applies it: placements become running allocations, victims become stopping,
// and advancing the fake clock stops stopping jobs (requeueing preempted
// ones) and ends jobs whose timeout has passed. It checks every plan's
// invariants with Check.
type Harness struct {
	Snap   scheduler.Snapshot
	Config scheduler.Config
	Plans  []scheduler.Plan
	// Finished lists job ids that ended (finish, timeout or preemption), in order.
	Finished []int64
	pending  map[int64]scheduler.Pending // every job ever submitted, for requeueing
}

// New returns a harness at T0 with the given pools and quotas.
func New(pools []domain.Pool, quotas ...domain.Quota) *Harness {
	return &Harness{Snap: scheduler.Snapshot{Now: T0, Pools: pools, Quotas: quotas}, pending: map[int64]scheduler.Pending{}}
}

// Submit queues jobs.
func (h *Harness) Submit(jobs ...scheduler.Pending) {
	for _, j := range jobs {
		h.pending[j.JobID] = j
		h.Snap.Pending = append(h.Snap.Pending, j)
	}
}

// Run puts allocations in the running set directly.
func (h *Harness) Run(allocs ...scheduler.Allocation) {
	h.Snap.Running = append(h.Snap.Running, allocs...)
}

// Schedule runs one pass, checks it, applies it and returns it.
func (h *Harness) Schedule() (scheduler.Plan, error) {
	plan := scheduler.Schedule(h.Snap, h.Config)
	h.Plans = append(h.Plans, plan)
	if err := Check(h.Snap, plan); err != nil {
		return plan, err
	}
	h.Apply(plan)
	return plan, nil
}

// Apply applies a plan to the snapshot.
func (h *Harness) Apply(plan scheduler.Plan) {
	started := map[int64]scheduler.Placement{}
	for _, p := range plan.Start {
		started[p.JobID] = p
	}
	var still []scheduler.Pending
	for _, j := range h.Snap.Pending {
		p, ok := started[j.JobID]
		if !ok {
			still = append(still, j)
			continue
		}
		h.Snap.Running = append(h.Snap.Running, scheduler.Allocation{JobID: j.JobID, Project: j.Project, Pool: j.Pool,
			Priority: j.Priority, Resources: j.Resources, Nodes: p.Nodes, StartedAt: h.Snap.Now, Timeout: j.Timeout,
			Preemptible: j.Preemptible, Borrowed: p.Borrowed})
	}
	h.Snap.Pending = still
	for _, v := range plan.Preempt {
		for i := range h.Snap.Running {
			if h.Snap.Running[i].JobID == v.JobID {
				h.Snap.Running[i].Stopping = true
			}
		}
		for i := range h.Snap.Pending {
			if h.Snap.Pending[i].JobID == v.For {
				h.Snap.Pending[i].Beneficiary = true
			}
		}
	}
}

// Finish ends running jobs.
func (h *Harness) Finish(ids ...int64) {
	h.Snap.Running = slices.DeleteFunc(h.Snap.Running, func(a scheduler.Allocation) bool {
		if slices.Contains(ids, a.JobID) {
			h.Finished = append(h.Finished, a.JobID)
			return true
		}
		return false
	})
}

// Advance moves the clock: stopping jobs are gone (and requeued with one
// more preemption), and jobs whose timeout passed end.
func (h *Harness) Advance(d time.Duration) {
	h.Snap.Now = h.Snap.Now.Add(d)
	var requeue []scheduler.Pending
	h.Snap.Running = slices.DeleteFunc(h.Snap.Running, func(a scheduler.Allocation) bool {
		switch {
		case a.Stopping:
			j, ok := h.pending[a.JobID]
			if !ok {
				j = scheduler.Pending{JobID: a.JobID, Project: a.Project, Pool: a.Pool, Priority: a.Priority,
					SubmittedAt: a.StartedAt, Resources: a.Resources, Timeout: a.Timeout, Preemptible: a.Preemptible}
			}
			j.Preemptions++
			h.pending[a.JobID] = j
			requeue = append(requeue, j)
		case a.Timeout > 0 && !a.StartedAt.Add(a.Timeout).After(h.Snap.Now):
		default:
			return false
		}
		h.Finished = append(h.Finished, a.JobID)
		return true
	})
	h.Snap.Pending = append(h.Snap.Pending, requeue...)
}

// Check verifies a plan's invariants against its snapshot: every pending job
// is started or waiting exactly once; placements name known nodes, distinct
// nodes per gang and exactly the gang's size; no node's CPUs, memory or
// GPU indices are used twice or above capacity; no project goes above its
// ceiling (guaranteed + borrow, or the pool without a quota); no pool goes
// above MaxRunning; victims are running, not stopping, and eligible.
func Check(s scheduler.Snapshot, p scheduler.Plan) error {
	var errs []error
	pending := map[int64]scheduler.Pending{}
	for _, j := range s.Pending {
		pending[j.JobID] = j
	}
	seen := map[int64]bool{}
	for _, st := range p.Start {
		if seen[st.JobID] {
			errs = append(errs, fmt.Errorf("job %d decided twice", st.JobID))
		}
		seen[st.JobID] = true
	}
	for _, w := range p.Waiting {
		if seen[w.JobID] {
			errs = append(errs, fmt.Errorf("job %d decided twice", w.JobID))
		}
		seen[w.JobID] = true
		if w.Message == "" || w.Reason == "" {
			errs = append(errs, fmt.Errorf("job %d waits without reason or message: %+v", w.JobID, w))
		}
	}
	for id := range pending {
		if !seen[id] {
			errs = append(errs, fmt.Errorf("pending job %d is neither started nor waiting", id))
		}
	}

	type use struct {
		cpus float64
		mem  domain.ByteSize
		gpus map[int]int64
	}
	pools := map[string]domain.Pool{}
	nodes := map[[2]string]domain.Node{}
	usage := map[[2]string]*use{}
	running := map[string]int{}
	proj := map[[2]string]domain.Limits{}
	add := func(pool string, id int64, project string, r domain.Resources, nas []scheduler.NodeAlloc) {
		running[pool]++
		l := proj[[2]string{project, pool}]
		n := max(r.Nodes, 1)
		l.GPUs += r.GPUs * n
		l.CPUs += r.CPUs * float64(n)
		l.Memory += r.Memory * domain.ByteSize(n)
		l.Jobs++
		proj[[2]string{project, pool}] = l
		for _, na := range nas {
			k := [2]string{pool, na.Node}
			u := usage[k]
			if u == nil {
				u = &use{gpus: map[int]int64{}}
				usage[k] = u
			}
			u.cpus += r.CPUs
			u.mem += r.Memory
			for _, g := range na.GPUs {
				if other, dup := u.gpus[g]; dup {
					errs = append(errs, fmt.Errorf("GPU %d on node %s held by jobs %d and %d", g, na.Node, other, id))
				}
				u.gpus[g] = id
			}
		}
	}
	for _, pl := range s.Pools {
		pools[pl.Name] = pl
		for _, n := range pl.Nodes {
			nodes[[2]string{pl.Name, n.Name}] = n
		}
	}
	runningByID := map[int64]scheduler.Allocation{}
	for _, a := range s.Running {
		runningByID[a.JobID] = a
		add(a.Pool, a.JobID, a.Project, a.Resources, a.Nodes)
	}
	before := map[[2]string]domain.Limits{}
	for k, v := range proj {
		before[k] = v
	}
	for _, st := range p.Start {
		j, ok := pending[st.JobID]
		if !ok {
			errs = append(errs, fmt.Errorf("started job %d is not pending", st.JobID))
			continue
		}
		if st.Pool != j.Pool {
			errs = append(errs, fmt.Errorf("job %d of pool %s placed in pool %s", j.JobID, j.Pool, st.Pool))
		}
		if len(st.Nodes) != max(j.Resources.Nodes, 1) {
			errs = append(errs, fmt.Errorf("job %d needs %d nodes, placed on %d (partial gang)", j.JobID, max(j.Resources.Nodes, 1), len(st.Nodes)))
		}
		names := map[string]bool{}
		for _, na := range st.Nodes {
			if names[na.Node] {
				errs = append(errs, fmt.Errorf("job %d placed twice on node %s", j.JobID, na.Node))
			}
			names[na.Node] = true
			if _, ok := nodes[[2]string{st.Pool, na.Node}]; !ok {
				errs = append(errs, fmt.Errorf("job %d placed on unknown node %s", j.JobID, na.Node))
			}
			if len(na.GPUs) != j.Resources.GPUs {
				errs = append(errs, fmt.Errorf("job %d got %d GPUs on %s, wants %d", j.JobID, len(na.GPUs), na.Node, j.Resources.GPUs))
			}
		}
		add(st.Pool, j.JobID, j.Project, j.Resources, st.Nodes)
	}
	for k, u := range usage {
		n, ok := nodes[k]
		if !ok {
			continue
		}
		if u.cpus > n.CPUs+1e-6 || u.mem > n.Memory {
			errs = append(errs, fmt.Errorf("node %s over-allocated: %.3f of %.3f CPUs, %s of %s memory", n.Name, u.cpus, n.CPUs, u.mem, n.Memory))
		}
		for g := range u.gpus {
			if !slices.Contains(n.GPUs, g) {
				errs = append(errs, fmt.Errorf("node %s has no GPU %d", n.Name, g))
			}
		}
	}
	// Quotas and caps only constrain new placements: running work may
	// already exceed a quota that shrank.
	quotas := map[[2]string]domain.Quota{}
	quotaPools := map[string]bool{}
	for _, q := range s.Quotas {
		quotas[[2]string{q.Project, q.Pool}] = q
		quotaPools[q.Pool] = true
	}
	for k, after := range proj {
		if after == before[k] {
			continue
		}
		pool := pools[k[1]]
		q, has := quotas[k]
		switch {
		case !quotaPools[k[1]]:
			// An open pool: every project may use all of it.
		case !has && !pool.Borrowing:
			errs = append(errs, fmt.Errorf("project %s has no quota in pool %s without borrowing but started a job", k[0], k[1]))
		case has:
			ceil := q.Guaranteed.GPUs
			if pool.Borrowing {
				ceil += q.Borrow.GPUs
			}
			if after.GPUs > ceil && after.GPUs > before[k].GPUs {
				errs = append(errs, fmt.Errorf("project %s uses %d GPUs in pool %s, ceiling %d", k[0], after.GPUs, k[1], ceil))
			}
			if q.Guaranteed.Jobs > 0 {
				cj := q.Guaranteed.Jobs
				if pool.Borrowing && q.Borrow != (domain.Limits{}) {
					cj += q.Borrow.Jobs
				}
				if after.Jobs > cj {
					errs = append(errs, fmt.Errorf("project %s runs %d jobs in pool %s, limit %d", k[0], after.Jobs, k[1], cj))
				}
			}
		}
	}
	startedIn := map[string]int{}
	for _, st := range p.Start {
		startedIn[st.Pool]++
		if pl := pools[st.Pool]; st.Borrowed && !pending[st.JobID].Preemptible {
			errs = append(errs, fmt.Errorf("job %d is not preemptible but started on borrowed capacity in pool %s", st.JobID, pl.Name))
		}
	}
	for name := range startedIn {
		if m := pools[name].MaxRunning; m > 0 && running[name] > m {
			errs = append(errs, fmt.Errorf("pool %s runs %d jobs, max_running %d", name, running[name], m))
		}
	}
	// Borrowing as it stands with the plan's placements running: placing
	// a job of higher priority can make a project's running job borrowed.
	withStarts := s
	withStarts.Running = slices.Clone(s.Running)
	for _, st := range p.Start {
		j := pending[st.JobID]
		withStarts.Running = append(withStarts.Running, scheduler.Allocation{JobID: j.JobID, Project: j.Project, Pool: j.Pool,
			Priority: j.Priority, Resources: j.Resources, Nodes: st.Nodes, StartedAt: s.Now, Preemptible: j.Preemptible})
	}
	borrowed := Borrowed(withStarts)
	for _, v := range p.Preempt {
		a, ok := runningByID[v.JobID]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("victim %d is not running", v.JobID))
		case a.Stopping:
			errs = append(errs, fmt.Errorf("victim %d is already stopping", v.JobID))
		case !pools[a.Pool].Preemption:
			errs = append(errs, fmt.Errorf("victim %d preempted in pool %s without preemption", v.JobID, a.Pool))
		case !a.Preemptible:
			errs = append(errs, fmt.Errorf("victim %d is not preemptible", v.JobID))
		default:
			b := pending[v.For]
			lower := a.Priority.Rank() < b.Priority.Rank()
			// Own lower-priority work, or another project's borrowed work;
			// never another project's work inside its guarantee. An open
			// pool is one queue: any lower-priority work.
			own := a.Project == b.Project || !quotaPools[a.Pool]
			if own && !lower || !own && !borrowed[a.JobID] {
				errs = append(errs, fmt.Errorf("victim %d (priority %s, borrowed %t) is not eligible for job %d (priority %s)",
					v.JobID, a.Priority, borrowed[a.JobID], v.For, b.Priority))
			}
		}
	}
	return errors.Join(errs...)
}

// Borrowed works out, independently of the scheduler, which running jobs
// are borrowed by the documented rule: per project and pool, the running
// jobs that are not stopping, by priority (highest first), then start time,
// then id, fill the project's guarantee first-fit (a zero CPU, memory or
// job guarantee does not limit); the rest are borrowed, as is every job of
// a project without a quota in the pool — unless no project has a quota
// there (an open pool: nothing is borrowed).
func Borrowed(s scheduler.Snapshot) map[int64]bool {
	quota := map[[2]string]domain.Quota{}
	quotaPools := map[string]bool{}
	for _, q := range s.Quotas {
		quota[[2]string{q.Project, q.Pool}] = q
		quotaPools[q.Pool] = true
	}
	groups := map[[2]string][]scheduler.Allocation{}
	for _, a := range s.Running {
		if !a.Stopping {
			k := [2]string{a.Project, a.Pool}
			groups[k] = append(groups[k], a)
		}
	}
	out := map[int64]bool{}
	for k, as := range groups {
		if !quotaPools[k[1]] {
			continue
		}
		slices.SortFunc(as, func(x, y scheduler.Allocation) int {
			if c := y.Priority.Rank() - x.Priority.Rank(); c != 0 {
				return c
			}
			if c := x.StartedAt.Compare(y.StartedAt); c != 0 {
				return c
			}
			return int(x.JobID - y.JobID)
		})
		q, has := quota[k]
		g := q.Guaranteed
		var gpus, jobs int
		var cpus float64
		var mem domain.ByteSize
		for _, a := range as {
			n := max(a.Resources.Nodes, 1)
			ng, nc, nm := gpus+a.Resources.GPUs*n, cpus+a.Resources.CPUs*float64(n), mem+a.Resources.Memory*domain.ByteSize(n)
			if has && ng <= g.GPUs && (g.CPUs <= 0 || nc <= g.CPUs+1e-9) && (g.Memory <= 0 || nm <= g.Memory) && (g.Jobs <= 0 || jobs+1 <= g.Jobs) {
				gpus, cpus, mem, jobs = ng, nc, nm, jobs+1
				continue
			}
			out[a.JobID] = true
		}
	}
	return out
}

// Format writes plan p, made from snapshot s, as stable text for golden
// files. A waiting job's position (#n) is counted within its pool, taken
// from s.Pending: 1 + the number of entries of the same pool before it
// (#? for a job s does not hold).
func Format(s scheduler.Snapshot, p scheduler.Plan) string {
	pools := make(map[int64]string, len(s.Pending))
	for _, j := range s.Pending {
		pools[j.JobID] = j.Pool
	}
	var b strings.Builder
	for _, st := range p.Start {
		fmt.Fprintf(&b, "start   job %d pool %s", st.JobID, st.Pool)
		for _, n := range st.Nodes {
			fmt.Fprintf(&b, " %s%v", n.Node, n.GPUs)
		}
		if st.Borrowed {
			b.WriteString(" borrowed")
		}
		b.WriteString("\n")
	}
	for _, v := range p.Preempt {
		fmt.Fprintf(&b, "preempt job %d for %d: %s\n", v.JobID, v.For, v.Message)
	}
	counts := map[string]int{}
	for _, w := range p.Waiting {
		pos := "?"
		if pool, ok := pools[w.JobID]; ok {
			counts[pool]++
			pos = strconv.Itoa(counts[pool])
		}
		fmt.Fprintf(&b, "wait    job %d #%s %s: %s", w.JobID, pos, w.Reason, w.Message)
		if !w.EstimatedStart.IsZero() {
			fmt.Fprintf(&b, " (estimated start %s)", w.EstimatedStart.UTC().Format(time.RFC3339))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Started returns the ids of started jobs in decision order.
func Started(p scheduler.Plan) []int64 {
	ids := make([]int64, 0, len(p.Start))
	for _, s := range p.Start {
		ids = append(ids, s.JobID)
	}
	return ids
}

// Victims returns the ids of preempted jobs.
func Victims(p scheduler.Plan) []int64 {
	ids := make([]int64, 0, len(p.Preempt))
	for _, v := range p.Preempt {
		ids = append(ids, v.JobID)
	}
	return ids
}

// WaitingFor returns the waiting entry of a job.
func WaitingFor(p scheduler.Plan, id int64) (scheduler.Waiting, bool) {
	i := slices.IndexFunc(p.Waiting, func(w scheduler.Waiting) bool { return w.JobID == id })
	if i < 0 {
		return scheduler.Waiting{}, false
	}
	return p.Waiting[i], true
}

// SortedIDs returns ids sorted ascending.
func SortedIDs(ids []int64) []int64 {
	s := slices.Clone(ids)
	slices.SortFunc(s, cmp.Compare[int64])
	return s
}
