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
	var quota *domain.Quota
	open := true // no project has a quota in the pool: it is open to all
	for i, q := range snap.Quotas {
		if q.Pool != g.Pool {
			continue
		}
		open = false
		if q.Project == g.Project {
			quota = &snap.Quotas[i]
		}
	}
	if open {
		return
	}
	limit := guarantee(quota)
	var use usage
	var cands []int // indexes into snap.Running
	for i, r := range snap.Running {
		if r.Project != g.Project || r.Pool != g.Pool || r.Borrowed || r.Stopping {
			continue
		}
		use.add(byID[r.JobID].Resources)
		cands = append(cands, i)
	}
	if !use.over(limit) {
		return
	}
	slices.SortFunc(cands, func(a, b int) int {
		x, y := &snap.Running[a], &snap.Running[b]
		return cmp.Or(cmp.Compare(x.Priority.Rank(), y.Priority.Rank()), y.StartedAt.Compare(x.StartedAt), cmp.Compare(y.JobID, x.JobID))
	})
	msg := fmt.Sprintf("preempted: compute grant %d (%s for project %s in pool %s) expired at %s; the job waits for the project's quota there (%s)",
		g.ID, describeLimits(g.Extra, "+"), g.Project, g.Pool, g.Until.UTC().Format("2006-01-02 15:04:05 UTC"), describeQuota(quota))
	var changes []store.Change
	var victims []int
	for _, i := range cands {
		if !use.over(limit) {
			break
		}
		r := snap.Running[i]
		use.sub(byID[r.JobID].Resources)
		changes = append(changes, store.Change{JobID: r.JobID, In: active, RequestPreempt: true,
			SetReason: true, Reason: domain.ReasonPreempted, Message: msg, At: now})
		victims = append(victims, i)
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
