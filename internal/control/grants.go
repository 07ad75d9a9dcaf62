package control

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/scheduler"
	"trainyard/internal/store"
)

// grantWatch follows the compute grants in force from cycle to cycle, to
// reclaim what each added once it lapses: the scheduler admits jobs under
// the quota a grant raises, but once running they would hold the extra
// capacity on past the grant's end. Loop goroutine only.
type grantWatch struct {
	active map[int64]domain.QuotaRequest // in force at the last cycle, by id
	loaded bool                          // active holds a cycle's grants
	now    []domain.QuotaRequest         // in force at this cycle (snapshot)
	base   []domain.Quota                // the quotas without any grant (snapshot)
	// warned are the notices told to the Observer last, to tell it again
	// only when they change.
	warned []domain.GrantNotice
}

// reclaimGrants preempts, for each grant that lapsed since the last
// cycle, the jobs of its project in its pool that run beyond the
// project's quota without it: its guarantee now, other grants included.
// They requeue (reason Preempted, the message naming the grant and when
// it expired) and wait under the normal quota. The first cycle of a loop
// also reclaims the grants that lapsed while no loop ran, since the
// oldest running job started. Victims are marked stopping in snap, so
// the scheduler's pass sees them leave.
//
// Every job beyond the quota is a victim, preemptible or not: a grant
// has an end date its approver and its project knew when its jobs were
// admitted, and a job that is not preemptible would otherwise keep the
// capacity indefinitely. Borrowed jobs (above the guarantee on idle
// capacity) are left to the scheduler's own reclaim. The order is the
// scheduler's: lowest priority first, then the most recently started.
func (c *Controller) reclaimGrants(ctx context.Context, now time.Time, snap *scheduler.Snapshot, byID map[int64]domain.Job) {
	w := &c.grants
	cur := make(map[int64]domain.QuotaRequest, len(w.now))
	for _, g := range w.now {
		cur[g.ID] = g
	}
	var lapsed []domain.QuotaRequest
	if !w.loaded {
		oldest := now
		for _, r := range snap.Running {
			if r.StartedAt.Before(oldest) {
				oldest = r.StartedAt
			}
		}
		if len(snap.Running) > 0 {
			reqs, err := c.cfg.Store.ListRequests(ctx, "", "")
			if err != nil {
				c.log.Error("read compute grants; reclaiming lapsed ones next cycle", "err", err)
				return
			}
			for _, r := range reqs {
				if r.State == domain.RequestApproved && !r.Active(now) && r.Until.After(oldest) {
					lapsed = append(lapsed, r)
				}
			}
		}
	} else {
		for id, g := range w.active {
			if _, ok := cur[id]; !ok {
				lapsed = append(lapsed, g)
			}
		}
	}
	w.active, w.loaded = cur, true
	slices.SortFunc(lapsed, func(a, b domain.QuotaRequest) int { return cmp.Compare(a.ID, b.ID) })
	for _, g := range lapsed {
		c.reclaimGrant(ctx, now, g, snap, byID)
	}
}

// reclaimGrant preempts what runs beyond the quota of g's project in g's
// pool, now that g no longer adds to it.
func (c *Controller) reclaimGrant(ctx context.Context, now time.Time, g domain.QuotaRequest, snap *scheduler.Snapshot, byID map[int64]domain.Job) {
	quota, open := quotaOf(snap.Quotas, g.Project, g.Pool)
	if open {
		return
	}
	victims := beyondQuota(quota, g.Project, g.Pool, snap.Running, byID)
	if len(victims) == 0 {
		return
	}
	msg := fmt.Sprintf("preempted: compute grant %d (%s for project %s in pool %s) expired at %s; the job waits for the project's quota there (%s)",
		g.ID, describeLimits(g.Extra, "+"), g.Project, g.Pool, g.Until.UTC().Format("2006-01-02 15:04:05 UTC"), describeQuota(quota))
	changes := make([]store.Change, len(victims))
	for k, i := range victims {
		changes[k] = store.Change{JobID: snap.Running[i].JobID, In: active, RequestPreempt: true,
			SetReason: true, Reason: domain.ReasonPreempted, Message: msg, At: now}
	}
	errs, err := c.cfg.Store.Apply(ctx, changes)
	if err != nil {
		c.log.Error("reclaim an expired compute grant", "grant", g.ID, "err", err)
		c.grants.loaded = false // look again next cycle
		return
	}
	for k, i := range victims {
		if errs[k] != nil {
			continue // ended or moved since the snapshot
		}
		r := &snap.Running[i]
		r.Stopping = true
		j := byID[r.JobID]
		c.log.Info("preempting a job to reclaim an expired compute grant", "job", r.JobID, "grant", g.ID,
			"project", g.Project, "pool", g.Pool, "expired", g.Until)
		c.stop(ctx, executor.Ref{JobID: r.JobID, Attempt: j.Attempts}, executor.StopRequest{Reason: domain.ReasonPreempted, Message: msg})
	}
}

// warnGrants tells the Observer which running jobs the end of a grant
// within GrantWarning will preempt: those beyond their project's quota
// without it, as reclaimGrant will choose them. It tells it again only
// when the notices change. Its cost follows the grants near their end
// and the running jobs, not the queue.
func (c *Controller) warnGrants(now time.Time, snap scheduler.Snapshot, byID map[int64]domain.Job) {
	w := &c.grants
	var notices []domain.GrantNotice
	if c.cfg.GrantWarning > 0 {
		for _, g := range w.now {
			if !g.Active(now) || g.Until.Sub(now) > c.cfg.GrantWarning {
				continue
			}
			others := make([]domain.QuotaRequest, 0, len(w.now)-1)
			for _, o := range w.now {
				if o.ID != g.ID {
					others = append(others, o)
				}
			}
			quota, open := quotaOf(domain.EffectiveQuotas(w.base, others, now), g.Project, g.Pool)
			if open {
				continue
			}
			for _, i := range beyondQuota(quota, g.Project, g.Pool, snap.Running, byID) {
				j := byID[snap.Running[i].JobID]
				notices = append(notices, domain.GrantNotice{Job: j, Attempt: j.Attempts, Grant: g})
			}
		}
	}
	slices.SortFunc(notices, func(a, b domain.GrantNotice) int {
		return cmp.Or(cmp.Compare(a.Job.ID, b.Job.ID), cmp.Compare(a.Grant.ID, b.Grant.ID))
	})
	same := func(a, b domain.GrantNotice) bool {
		return a.Job.ID == b.Job.ID && a.Attempt == b.Attempt && a.Grant.ID == b.Grant.ID
	}
	if w.warned != nil && slices.EqualFunc(notices, w.warned, same) {
		return // told already (the first call tells even an empty list)
	}
	for _, n := range notices {
		if !slices.ContainsFunc(w.warned, func(o domain.GrantNotice) bool { return same(o, n) }) {
			c.log.Warn("a compute grant ends soon: its end will preempt a running job", "job", n.Job.ID, "grant", n.Grant.ID, "until", n.Grant.Until)
		}
	}
	if notices == nil {
		notices = []domain.GrantNotice{}
	}
	w.warned = notices
	c.cfg.Observer.GrantsExpiring(notices)
}

// quotaOf finds project's quota in pool among quotas; open reports that
// no project has a quota there (the pool is open to all).
func quotaOf(quotas []domain.Quota, project, pool string) (q *domain.Quota, open bool) {
	open = true
	for i := range quotas {
		if quotas[i].Pool != pool {
			continue
		}
		open = false
		if quotas[i].Project == project {
			q = &quotas[i]
		}
	}
	return q, open
}

// beyondQuota returns the running allocations (indexes into running) of
// project in pool to preempt until the rest fits quota: lowest priority
// first, then the most recently started. Borrowed and stopping ones are
// neither counted nor chosen.
func beyondQuota(quota *domain.Quota, project, pool string, running []scheduler.Allocation, byID map[int64]domain.Job) []int {
	limit := guarantee(quota)
	var use usage
	var cands []int
	for i, r := range running {
		if r.Project != project || r.Pool != pool || r.Borrowed || r.Stopping {
			continue
		}
		use.add(byID[r.JobID].Resources)
		cands = append(cands, i)
	}
	if !use.over(limit) {
		return nil
	}
	slices.SortFunc(cands, func(a, b int) int {
		x, y := &running[a], &running[b]
		return cmp.Or(cmp.Compare(x.Priority.Rank(), y.Priority.Rank()), y.StartedAt.Compare(x.StartedAt), cmp.Compare(y.JobID, x.JobID))
	})
	var victims []int
	for _, i := range cands {
		if !use.over(limit) {
			break
		}
		use.sub(byID[running[i].JobID].Resources)
		victims = append(victims, i)
	}
	return victims
}

// usage is what a project's running jobs hold in one pool.
type usage struct {
	gpus int
	cpus float64
	mem  float64
	jobs int
}

func (u *usage) add(r domain.Resources) {
	n := max(r.Nodes, 1)
	u.gpus += r.GPUs * n
	u.cpus += r.CPUs * float64(n)
	u.mem += float64(r.Memory) * float64(n)
	u.jobs++
}

func (u *usage) sub(r domain.Resources) {
	n := max(r.Nodes, 1)
	u.gpus -= r.GPUs * n
	u.cpus -= r.CPUs * float64(n)
	u.mem -= float64(r.Memory) * float64(n)
	u.jobs--
}

// over reports whether u exceeds the guarantee g in any dimension.
func (u usage) over(g usage) bool {
	return u.gpus > g.gpus || u.cpus > g.cpus+1e-9 || u.mem > g.mem || u.jobs > g.jobs
}

// guarantee is a quota's guarantee as the scheduler reads it: GPUs are
// literal; CPUs, memory or jobs of 0 are not limited. No quota (in a pool
// others have quotas in) guarantees nothing.
func guarantee(q *domain.Quota) usage {
	if q == nil {
		return usage{}
	}
	g := q.Guaranteed
	u := usage{gpus: g.GPUs, cpus: g.CPUs, mem: float64(g.Memory), jobs: g.Jobs}
	if g.CPUs <= 0 {
		u.cpus = math.Inf(1)
	}
	if g.Memory <= 0 {
		u.mem = math.Inf(1)
	}
	if g.Jobs <= 0 {
		u.jobs = math.MaxInt
	}
	return u
}

// describeLimits writes the dimensions l sets: "+4 GPUs, +16 CPUs".
func describeLimits(l domain.Limits, sign string) string {
	var parts []string
	if l.GPUs > 0 {
		parts = append(parts, fmt.Sprintf("%s%d GPUs", sign, l.GPUs))
	}
	if l.CPUs > 0 {
		parts = append(parts, fmt.Sprintf("%s%g CPUs", sign, l.CPUs))
	}
	if l.Memory > 0 {
		parts = append(parts, sign+l.Memory.String()+" memory")
	}
	if l.Jobs > 0 {
		parts = append(parts, fmt.Sprintf("%s%d jobs", sign, l.Jobs))
	}
	if len(parts) == 0 {
		return "no extra capacity"
	}
	return strings.Join(parts, ", ")
}

// describeQuota writes a project's guarantee in a pool for a message:
// "1 GPUs", "2 GPUs, 16 CPUs", or "none".
func describeQuota(q *domain.Quota) string {
	if q == nil {
		return "none"
	}
	out := fmt.Sprintf("%d GPUs", q.Guaranteed.GPUs)
	if rest := (domain.Limits{CPUs: q.Guaranteed.CPUs, Memory: q.Guaranteed.Memory, Jobs: q.Guaranteed.Jobs}); rest != (domain.Limits{}) {
		out += ", " + describeLimits(rest, "")
	}
	return out
}
