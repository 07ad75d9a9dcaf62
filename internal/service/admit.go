package service

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"trainyard/internal/domain"
	"trainyard/internal/scheduler"
)

// admit rejects at submit what could never run: an unknown pool, a request
// shape or priority the pool or the project's quota does not accept, or no
// quota where the pool lends nothing. A job is never left pending forever.
func (s *Service) admit(ctx context.Context, spec domain.Spec) error {
	pool, err := s.cfg.Store.GetPool(ctx, spec.Pool)
	if errors.Is(err, domain.ErrNotFound) {
		pools, _ := s.cfg.Store.ListPools(ctx)
		names := make([]string, len(pools))
		for i, p := range pools {
			names[i] = p.Name
		}
		return domain.FieldErrors{{Path: "pool", Message: fmt.Sprintf("pool %q does not exist; choose one of: %s", spec.Pool, strings.Join(names, ", "))}}
	}
	if err != nil {
		return fmt.Errorf("load pool %s: %w", spec.Pool, err)
	}
	quota, err := s.effectiveQuota(ctx, spec.Project, spec.Pool)
	if err != nil {
		return err
	}
	errs := scheduler.Admit(pool, quota, spec)
	if pool.Executor == ExecutorLocal && spec.Resources.Nodes > 1 {
		errs = append(errs, domain.FieldError{Path: "resources.nodes",
			Message: fmt.Sprintf("pool %s runs on the local executor, which runs single-node jobs; set resources.nodes: 1, or use a pool backed by Slurm or Kubernetes", pool.Name)})
	}
	return errs.Err()
}
