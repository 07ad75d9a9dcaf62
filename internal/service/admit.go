package service

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/scheduler"
)

// admit rejects at submit what could never run: an unknown pool, a request
// shape or priority the pool or the project's quota does not accept, or no
// quota where the pool lends nothing. A job is never left pending forever.
func (s *PoolService) admit(ctx context.Context, spec domain.Spec) error {
	v, err := s.admission(ctx)
	if err != nil {
		return err
	}
	pool, ok := v.pools[spec.Pool]
	if !ok {
		names := make([]string, 0, len(v.pools))
		for name := range v.pools {
			names = append(names, name)
		}
		slices.Sort(names)
		return domain.FieldErrors{{Path: "pool", Message: fmt.Sprintf("pool %q does not exist; choose one of: %s", spec.Pool, strings.Join(names, ", "))}}
	}
	var quota *domain.Quota
	for _, q := range domain.EffectiveQuotas(v.quotas[spec.Project+"/"+spec.Pool], v.grants, s.cfg.Clock.Now()) {
		if q.Project == spec.Project && q.Pool == spec.Pool {
			quota = &q
		}
	}
	errs := scheduler.Admit(pool, quota, v.open(spec.Pool, s.cfg.Clock.Now()), spec)
	caps := s.capabilities(pool.Executor)
	if spec.Resources.Nodes > 1 && !caps.MultiNode {
		errs = append(errs, domain.FieldError{Path: "resources.nodes",
			Message: fmt.Sprintf("pool %s runs on the %s executor, which runs single-node jobs; set resources.nodes: 1, or use a pool on an executor that runs multi-node jobs (Kubernetes, Slurm)", pool.Name, pool.Executor)})
	}
	if spec.Policy.Warn != nil && !caps.Warn {
		errs = append(errs, domain.FieldError{Path: "policy.warn",
			Message: fmt.Sprintf("pool %s runs on the %s executor, which cannot send the warning (on Kubernetes only the in-job agent can signal a job's processes); remove policy.warn, or ask an admin to set the executor's agent (operator guide)", pool.Name, pool.Executor)})
	}
	return errs.Err()
}

// capabilities is what the executor of that name can do
// (Config.Capabilities).
func (s *PoolService) capabilities(name string) executor.Capabilities {
	if s.cfg.Capabilities == nil {
		return executor.Capabilities{Warn: true}
	}
	return s.cfg.Capabilities(name)
}

// admissionView is what admission reads: pools, quotas and grants. It is
// loaded once and reused until schedulingChanged says it is stale, because
// every submit needs it and it changes rarely.
type admissionView struct {
	gen        uint64
	pools      map[string]domain.Pool
	quotas     map[string][]domain.Quota // "project/pool" → its quota (0 or 1)
	quotaPools map[string]bool           // pools where some project has a quota
	grants     []domain.QuotaRequest     // approved and unexpired when loaded; Active(now) decides
	loaded     time.Time
}

// open reports whether no project has a quota in the pool (nor an active
// grant, which makes one): then every project may run there (see
// scheduler.Admit).
func (v *admissionView) open(pool string, now time.Time) bool {
	if v.quotaPools[pool] {
		return false
	}
	for _, g := range v.grants {
		if g.Pool == pool && g.Active(now) {
			return false
		}
	}
	return true
}

// PoolOpen reports whether no project has a quota in the pool (an open
// pool: every project may run any job there; docs/pools.md).
func (s *PoolService) PoolOpen(ctx context.Context, pool string) (bool, error) {
	v, err := s.admission(ctx)
	if err != nil {
		return false, err
	}
	return v.open(pool, s.cfg.Clock.Now()), nil
}

// admission returns the current admission view, loading it when stale.
func (s *PoolService) admission(ctx context.Context) (*admissionView, error) {
	gen := s.schedGen.Load()
	now := s.cfg.Clock.Now()
	if v := s.admitView.Load(); v != nil && v.gen == gen && (s.cfg.CacheTTL <= 0 || now.Sub(v.loaded) < s.cfg.CacheTTL) {
		return v, nil
	}
	v := &admissionView{gen: gen, pools: map[string]domain.Pool{}, quotas: map[string][]domain.Quota{}, quotaPools: map[string]bool{}, loaded: now}
	pools, err := s.st.ListPools(ctx)
	if err != nil {
		return nil, fmt.Errorf("load pools: %w", err)
	}
	for _, p := range pools {
		v.pools[p.Name] = p
	}
	quotas, err := s.st.ListQuotas(ctx, "", "")
	if err != nil {
		return nil, fmt.Errorf("load quotas: %w", err)
	}
	for _, q := range quotas {
		k := q.Project + "/" + q.Pool
		v.quotas[k] = append(v.quotas[k], q)
		v.quotaPools[q.Pool] = true
	}
	if v.grants, err = s.st.ActiveGrants(ctx, s.cfg.Clock.Now()); err != nil {
		return nil, fmt.Errorf("load compute grants: %w", err)
	}
	s.admitView.Store(v)
	return v, nil
}

// schedulingChanged marks the admission view stale after a change to pools,
// quotas, projects or grants, and wakes the control loop.
func (s *PoolService) schedulingChanged() {
	s.schedGen.Add(1)
	if s.cfg.Broadcast != nil {
		s.cfg.Broadcast("sched")
	}
	s.cfg.Wake()
}
