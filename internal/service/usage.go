package service

import (
	"cmp"
	"context"
	"slices"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// PoolUsage is what one pool's active (starting or running) jobs hold
// now, in all and per project.
type PoolUsage struct {
	Pool      string
	Capacity  domain.Limits
	Allocated domain.Limits // every active job's whole gang; Jobs counts them
	Projects  []ProjectUsage
}

// ProjectUsage is what one project's active jobs hold in one pool, and
// how much of that is borrowed: above its guarantee, on idle capacity,
// so preemptible to reclaim it.
type ProjectUsage struct {
	Project  string
	Used     domain.Limits // Jobs counts its active jobs
	Borrowed domain.Limits // the part of Used held by borrowed jobs; Jobs counts them
	// Guaranteed is the project's effective guarantee in the pool: its
	// quota with the compute grants active now (EffectiveQuotas); CPUs
	// or memory of 0, and Jobs 0, are not limited. HasQuota is false
	// for a project without one (a zero guarantee), Open for a pool
	// where no project has a quota (every project is guaranteed it all).
	Guaranteed domain.Limits
	HasQuota   bool
	Open       bool
}

// Usage returns what every pool's active jobs hold now, per project, by
// pool then project name: the current figures (the server keeps no
// series of them; the metrics endpoint exports them for one).
//
// Which jobs are borrowed is decided as the scheduler decides it on each
// pass: a project's active jobs that are not being stopped, highest
// priority first, then earliest start, then id, fill its guarantee
// first-fit, and those that do not fit are borrowed. So a project back
// under its guarantee has nothing borrowed, whatever its attempts were
// marked when they were placed. (Start is the job's first start; the
// scheduler orders by its current attempt's, which differs only between
// jobs started more than once.)
//
// Usage is aggregate, with no job named, and is read like the quotas it
// is set against: by any role.
func (s *JobService) Usage(ctx context.Context, p Principal) ([]PoolUsage, error) {
	if err := s.authorize(ctx, p, authz.QuotaRead, authz.Resource{Kind: "quota"}); err != nil {
		return nil, err
	}
	v, err := s.pools.admission(ctx)
	if err != nil {
		return nil, err
	}
	jobs, err := s.st.ListJobs(ctx, store.JobFilter{States: []domain.JobState{domain.JobStarting, domain.JobRunning}, Ascending: true})
	if err != nil {
		return nil, err
	}
	now := s.cfg.Clock.Now()
	type key struct{ pool, project string }
	byProject := map[key][]domain.Job{}
	pools := map[string]*PoolUsage{}
	for name, pl := range v.pools {
		pools[name] = &PoolUsage{Pool: name, Capacity: pl.Capacity()}
	}
	for _, j := range jobs {
		pu := pools[j.Pool]
		if pu == nil { // a pool removed under running work
			pu = &PoolUsage{Pool: j.Pool}
			pools[j.Pool] = pu
		}
		pu.Allocated = addLimits(pu.Allocated, gang(j.Resources))
		k := key{j.Pool, j.Project}
		byProject[k] = append(byProject[k], j)
	}
	for k, js := range byProject {
		u := ProjectUsage{Project: k.project, Open: v.open(k.pool, now)}
		for _, q := range domain.EffectiveQuotas(v.quotas[k.project+"/"+k.pool], v.grants, now) {
			if q.Project == k.project && q.Pool == k.pool {
				u.Guaranteed, u.HasQuota = q.Guaranteed, true
			}
		}
		for _, j := range js {
			u.Used = addLimits(u.Used, gang(j.Resources))
		}
		u.Borrowed = borrowed(js, u)
		pools[k.pool].Projects = append(pools[k.pool].Projects, u)
	}
	out := make([]PoolUsage, 0, len(pools))
	for _, pu := range pools {
		slices.SortFunc(pu.Projects, func(a, b ProjectUsage) int { return cmp.Compare(a.Project, b.Project) })
		out = append(out, *pu)
	}
	slices.SortFunc(out, func(a, b PoolUsage) int { return cmp.Compare(a.Pool, b.Pool) })
	return out, nil
}

// borrowed is what a project's active jobs js hold beyond its guarantee,
// by the scheduler's rule (see Usage).
func borrowed(js []domain.Job, u ProjectUsage) domain.Limits {
	if u.Open && !u.HasQuota {
		return domain.Limits{} // the whole pool is its guarantee
	}
	order := make([]domain.Job, 0, len(js))
	for _, j := range js {
		if !j.CancelRequested && !j.PreemptRequested { // being stopped: never borrowed
			order = append(order, j)
		}
	}
	slices.SortFunc(order, func(a, b domain.Job) int {
		if c := cmp.Compare(b.Priority.Rank(), a.Priority.Rank()); c != 0 {
			return c
		}
		if c := a.StartedAt.Compare(b.StartedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	var fill, out domain.Limits
	for _, j := range order {
		g := gang(j.Resources)
		if next := addLimits(fill, g); u.HasQuota && fitsGuarantee(u.Guaranteed, next) {
			fill = next
		} else {
			out = addLimits(out, g)
		}
	}
	return out
}

// gang is a per-node request's whole-gang demand, counting one job.
func gang(r domain.Resources) domain.Limits {
	n := max(r.Nodes, 1)
	return domain.Limits{GPUs: r.GPUs * n, CPUs: r.CPUs * float64(n), Memory: r.Memory * domain.ByteSize(n), Jobs: 1}
}

func addLimits(a, b domain.Limits) domain.Limits {
	return domain.Limits{GPUs: a.GPUs + b.GPUs, CPUs: a.CPUs + b.CPUs, Memory: a.Memory + b.Memory, Jobs: a.Jobs + b.Jobs}
}

// fitsGuarantee reports whether use fits a guarantee g, where CPUs, memory and
// jobs of 0 are not limited (GPUs are literal).
func fitsGuarantee(g, use domain.Limits) bool {
	return use.GPUs <= g.GPUs &&
		(g.CPUs <= 0 || use.CPUs <= g.CPUs+1e-9) &&
		(g.Memory <= 0 || use.Memory <= g.Memory) &&
		(g.Jobs <= 0 || use.Jobs <= g.Jobs)
}
