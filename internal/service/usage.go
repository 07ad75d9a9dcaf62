package service

import (
	"cmp"
	"context"
	"slices"
	"time"

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
// so preemptible to reclaim it. Every project with a quota or a grant
// in the pool has one, holding something or not.
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
// pool then project name (UsageHistory says what they held before).
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
	// Every project with a quota (or a grant) in a pool, and every one
	// holding part of it.
	var stored []domain.Quota
	for _, qs := range v.quotas {
		stored = append(stored, qs...)
	}
	quotaOf := map[key]domain.Quota{}
	for _, q := range domain.EffectiveQuotas(stored, v.grants, now) {
		k := key{q.Pool, q.Project}
		quotaOf[k] = q
		if _, ok := byProject[k]; !ok && pools[q.Pool] != nil {
			byProject[k] = nil
		}
	}
	for k, js := range byProject {
		u := ProjectUsage{Project: k.project, Open: v.open(k.pool, now)}
		if q, ok := quotaOf[k]; ok {
			u.Guaranteed, u.HasQuota = q.Guaranteed, true
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

// PoolHistory is what one pool's attempts held over a window, step by
// step: the average over each step of the GPUs, CPUs and memory (bytes)
// held, so that a job shorter than a step still counts.
type PoolHistory struct {
	Pool     string
	Capacity domain.Limits // now
	Start    time.Time     // of the first step
	Step     time.Duration
	GPUs     []float64
	CPUs     []float64
	Memory   []float64
}

// Maximum steps and window of a UsageHistory.
const (
	MaxHistorySteps  = 1000
	MaxHistoryWindow = 90 * 24 * time.Hour
)

// UsageHistory returns what every pool's attempts held in the window
// before now, in steps steps, by pool name, from the attempt history that
// spend reports read (an attempt holds its job's request from its start
// to its end); the server keeps no other series of pool use. It is
// aggregate per pool, with no project or job named, and is read like
// pools, by any role.
func (s *CostService) UsageHistory(ctx context.Context, p Principal, window time.Duration, steps int) ([]PoolHistory, error) {
	var errs domain.FieldErrors
	if window <= 0 || window > MaxHistoryWindow {
		errs.Add("window", "must be more than 0 and at most %s, got %s", domain.Duration(MaxHistoryWindow), domain.Duration(window))
	}
	if steps < 1 || steps > MaxHistorySteps {
		errs.Add("steps", "must be between 1 and %d, got %d", MaxHistorySteps, steps)
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	if err := s.authorize(ctx, p, authz.PoolRead, authz.Resource{Kind: "pool"}); err != nil {
		return nil, err
	}
	pools, err := s.st.ListPools(ctx)
	if err != nil {
		return nil, err
	}
	now := s.cfg.Clock.Now()
	step := window / time.Duration(steps)
	start := now.Add(-step * time.Duration(steps))
	spans, err := s.st.AttemptSpans(ctx, start)
	if err != nil {
		return nil, err
	}
	byName := map[string]*PoolHistory{}
	add := func(name string) *PoolHistory {
		h := &PoolHistory{Pool: name, Start: start, Step: step,
			GPUs: make([]float64, steps), CPUs: make([]float64, steps), Memory: make([]float64, steps)}
		byName[name] = h
		return h
	}
	for _, pl := range pools {
		add(pl.Name).Capacity = pl.Capacity()
	}
	for _, sp := range spans {
		h := byName[sp.Pool]
		if h == nil { // a pool removed since
			h = add(sp.Pool)
		}
		from, to := sp.StartedAt, sp.FinishedAt
		if to.IsZero() || to.After(now) {
			to = now
		}
		if from.Before(start) {
			from = start
		}
		if !to.After(from) {
			continue
		}
		g := gang(sp.Resources)
		first := int(from.Sub(start) / step)
		for i := first; i < steps; i++ {
			lo, hi := start.Add(step*time.Duration(i)), start.Add(step*time.Duration(i+1))
			if !lo.Before(to) {
				break
			}
			part := earlier(hi, to).Sub(later(lo, from)).Seconds() / step.Seconds()
			h.GPUs[i] += float64(g.GPUs) * part
			h.CPUs[i] += g.CPUs * part
			h.Memory[i] += float64(g.Memory) * part
		}
	}
	out := make([]PoolHistory, 0, len(byName))
	for _, h := range byName {
		out = append(out, *h)
	}
	slices.SortFunc(out, func(a, b PoolHistory) int { return cmp.Compare(a.Pool, b.Pool) })
	return out, nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
