package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/column"
)

const (
	poolCols      = `name, executor, gpu_type, nodes_json, max_gpus_per_job, max_nodes_per_job, max_timeout, max_running, priorities, borrowing, preemption, log_limit, created_at, updated_at`
	getPoolSQL    = `SELECT ` + poolCols + ` FROM pools WHERE name = ?`
	listPoolsSQL  = `SELECT ` + poolCols + ` FROM pools ORDER BY name`
	upsertPoolSQL = `INSERT INTO pools (` + poolCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET executor = excluded.executor, gpu_type = excluded.gpu_type,
		nodes_json = excluded.nodes_json, max_gpus_per_job = excluded.max_gpus_per_job,
		max_nodes_per_job = excluded.max_nodes_per_job, max_timeout = excluded.max_timeout,
		max_running = excluded.max_running, priorities = excluded.priorities,
		borrowing = excluded.borrowing, preemption = excluded.preemption,
		log_limit = excluded.log_limit, updated_at = excluded.updated_at`
	poolCreatedSQL = `SELECT created_at FROM pools WHERE name = ?`

	quotaCols       = `project, pool, gpus, cpus, memory, jobs, borrow_gpus, borrow_cpus, borrow_memory, borrow_jobs, max_priority, updated_at`
	upsertQuotaSQL  = `INSERT OR REPLACE INTO quotas (` + quotaCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	poolExistsSQL   = `SELECT COUNT(*) FROM pools WHERE name = ?`
	deleteQuotaSQL  = `DELETE FROM quotas WHERE project = ? AND pool = ?`
	listQuotasSQL   = `SELECT ` + quotaCols + ` FROM quotas WHERE (?1 = '' OR project = ?1) AND (?2 = '' OR pool = ?2) ORDER BY project, pool`
	upsertProjSQL   = `INSERT INTO projects (name, shares, created_at) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET shares = excluded.shares`
	getProjectSQL   = `SELECT name, shares, created_at FROM projects WHERE name = ?`
	listProjectsSQL = `SELECT name, shares, created_at FROM projects ORDER BY name`
)

func scanPool(sc rowScanner) (domain.Pool, error) {
	var (
		p                                                             domain.Pool
		executor, gpuType, nodes, prios                               string
		maxGPUs, maxNodes, maxTimeout, maxRunning, bor, pre, logLimit int64
		created, updated                                              sql.NullInt64
	)
	if err := sc.Scan(&p.Name, &executor, &gpuType, &nodes, &maxGPUs, &maxNodes, &maxTimeout, &maxRunning,
		&prios, &bor, &pre, &logLimit, &created, &updated); err != nil {
		return domain.Pool{}, err
	}
	ns, err := column.ParseNodes(nodes)
	if err != nil {
		return domain.Pool{}, fmt.Errorf("pool %q: %w", p.Name, err)
	}
	p.Executor, p.GPUType, p.Nodes = executor, gpuType, ns
	p.MaxGPUsPerJob, p.MaxNodesPerJob, p.MaxRunning = int(maxGPUs), int(maxNodes), int(maxRunning)
	p.MaxTimeout = domain.Duration(maxTimeout)
	p.Priorities = column.ParsePriorities(prios)
	p.Borrowing, p.Preemption = bor != 0, pre != 0
	p.LogLimit = domain.ByteSize(logLimit)
	p.CreatedAt, p.UpdatedAt = timeOf(created), timeOf(updated)
	return p, nil
}

// PutPool creates the pool or replaces the one with the same name. CreatedAt
// is kept from the first write (p.CreatedAt, or p.UpdatedAt when that is
// zero); UpdatedAt is set to p.UpdatedAt.
func (s *Store) PutPool(ctx context.Context, p domain.Pool, audit domain.AuditRecord) (domain.Pool, error) {
	if p.Name == "" {
		return domain.Pool{}, fmt.Errorf("put pool: the name is empty: %w", store.ErrInvalid)
	}
	nodes, err := column.Nodes(p.Nodes)
	if err != nil {
		return domain.Pool{}, fmt.Errorf("put pool %q: encode nodes: %w", p.Name, err)
	}
	created := p.CreatedAt
	if created.IsZero() {
		created = p.UpdatedAt
	}
	var stored domain.Pool
	action := fmt.Sprintf("put pool %q", p.Name)
	err = s.write(ctx, func(w *writer) error {
		if _, err := w.exec(upsertPoolSQL, p.Name, p.Executor, p.GPUType, nodes, p.MaxGPUsPerJob, p.MaxNodesPerJob,
			int64(p.MaxTimeout), p.MaxRunning, column.Priorities(p.Priorities), boolArg(p.Borrowing), boolArg(p.Preemption),
			int64(p.LogLimit), timeArg(created), timeArg(p.UpdatedAt)); err != nil {
			return interpretError(action, err)
		}
		var c sql.NullInt64
		if err := w.queryRow(poolCreatedSQL, p.Name).Scan(&c); err != nil {
			return interpretError(action+": read back", err)
		}
		stored = p
		stored.CreatedAt = timeOf(c)
		return nil
	}, withAudit(audit))
	if err != nil {
		return domain.Pool{}, err
	}
	stored.UpdatedAt = normTime(stored.UpdatedAt)
	stored.Nodes = cloneNodes(stored.Nodes)
	stored.Priorities = append([]domain.Priority(nil), stored.Priorities...)
	if len(stored.Priorities) == 0 {
		stored.Priorities = nil
	}
	return stored, nil
}

func cloneNodes(ns []domain.Node) []domain.Node {
	if len(ns) == 0 {
		return nil
	}
	out := make([]domain.Node, len(ns))
	for i, n := range ns {
		out[i] = n
		if len(n.GPUs) > 0 {
			out[i].GPUs = append([]int(nil), n.GPUs...)
		} else {
			out[i].GPUs = nil
		}
	}
	return out
}

// GetPool returns the named pool or store.ErrNotFound.
func (s *Store) GetPool(ctx context.Context, name string) (domain.Pool, error) {
	if err := s.checkOpen(); err != nil {
		return domain.Pool{}, err
	}
	action := fmt.Sprintf("get pool %q", name)
	st, err := s.readStmt(ctx, getPoolSQL)
	if err != nil {
		return domain.Pool{}, interpretError(action, err)
	}
	p, err := scanPool(st.QueryRowContext(ctx, name))
	if err != nil {
		return domain.Pool{}, interpretError(action, err)
	}
	return p, nil
}

// ListPools returns every pool, sorted by name.
func (s *Store) ListPools(ctx context.Context) ([]domain.Pool, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	st, err := s.readStmt(ctx, listPoolsSQL)
	if err != nil {
		return nil, interpretError("list pools", err)
	}
	rows, err := st.QueryContext(ctx)
	if err != nil {
		return nil, interpretError("list pools", err)
	}
	defer rows.Close()
	var out []domain.Pool
	for rows.Next() {
		p, err := scanPool(rows)
		if err != nil {
			return nil, interpretError("list pools", err)
		}
		out = append(out, p)
	}
	return out, interpretError("list pools", rows.Err())
}

// PutQuota creates or replaces the quota of (q.Project, q.Pool); the pool
// must exist (store.ErrNotFound otherwise).
func (s *Store) PutQuota(ctx context.Context, q domain.Quota, audit domain.AuditRecord) error {
	action := fmt.Sprintf("put quota of project %q in pool %q", q.Project, q.Pool)
	if q.Project == "" || q.Pool == "" {
		return fmt.Errorf("%s: project and pool must both be set: %w", action, store.ErrInvalid)
	}
	return s.write(ctx, func(w *writer) error {
		var n int
		if err := w.queryRow(poolExistsSQL, q.Pool).Scan(&n); err != nil {
			return interpretError(action, err)
		}
		if n == 0 {
			return fmt.Errorf("%s: pool %q does not exist: %w", action, q.Pool, store.ErrNotFound)
		}
		g, b := q.Guaranteed, q.Borrow
		_, err := w.exec(upsertQuotaSQL, q.Project, q.Pool, g.GPUs, g.CPUs, int64(g.Memory), g.Jobs,
			b.GPUs, b.CPUs, int64(b.Memory), b.Jobs, string(q.MaxPriority), timeArg(q.UpdatedAt))
		return interpretError(action, err)
	}, withAudit(audit))
}

// ListQuotas returns quotas sorted by project then pool, filtered by project
// and/or pool when they are not empty.
func (s *Store) ListQuotas(ctx context.Context, project, pool string) ([]domain.Quota, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	st, err := s.readStmt(ctx, listQuotasSQL)
	if err != nil {
		return nil, interpretError("list quotas", err)
	}
	rows, err := st.QueryContext(ctx, project, pool)
	if err != nil {
		return nil, interpretError("list quotas", err)
	}
	defer rows.Close()
	var out []domain.Quota
	for rows.Next() {
		var (
			q       domain.Quota
			gm, bm  int64
			maxPrio string
			updated sql.NullInt64
		)
		if err := rows.Scan(&q.Project, &q.Pool, &q.Guaranteed.GPUs, &q.Guaranteed.CPUs, &gm, &q.Guaranteed.Jobs,
			&q.Borrow.GPUs, &q.Borrow.CPUs, &bm, &q.Borrow.Jobs, &maxPrio, &updated); err != nil {
			return nil, interpretError("list quotas", err)
		}
		q.Guaranteed.Memory, q.Borrow.Memory = domain.ByteSize(gm), domain.ByteSize(bm)
		q.MaxPriority = domain.Priority(maxPrio)
		q.UpdatedAt = timeOf(updated)
		out = append(out, q)
	}
	return out, interpretError("list quotas", rows.Err())
}

// DeleteQuota removes the quota of project in pool; store.ErrNotFound when
// there is none.
func (s *Store) DeleteQuota(ctx context.Context, project, pool string, audit domain.AuditRecord) error {
	action := fmt.Sprintf("delete quota of project %q in pool %q", project, pool)
	return s.write(ctx, func(w *writer) error {
		res, err := w.exec(deleteQuotaSQL, project, pool)
		if err != nil {
			return interpretError(action, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return interpretError(action, err)
		}
		if n == 0 {
			return fmt.Errorf("%s: %w", action, store.ErrNotFound)
		}
		return nil
	}, withAudit(audit))
}

// PutProject creates the project or updates its shares. Shares of zero or
// less store the default, 1. CreatedAt is kept from the first write (the
// current time when p.CreatedAt is zero).
func (s *Store) PutProject(ctx context.Context, p domain.Project, audit domain.AuditRecord) error {
	action := fmt.Sprintf("put project %q", p.Name)
	if p.Name == "" {
		return fmt.Errorf("put project: the name is empty: %w", store.ErrInvalid)
	}
	shares := p.Shares
	if shares <= 0 {
		shares = 1
	}
	created := p.CreatedAt
	if created.IsZero() {
		created = time.Now()
	}
	return s.write(ctx, func(w *writer) error {
		_, err := w.exec(upsertProjSQL, p.Name, shares, timeArg(created))
		return interpretError(action, err)
	}, withAudit(audit))
}

func scanProject(sc rowScanner) (domain.Project, error) {
	var (
		p       domain.Project
		created sql.NullInt64
	)
	if err := sc.Scan(&p.Name, &p.Shares, &created); err != nil {
		return domain.Project{}, err
	}
	p.CreatedAt = timeOf(created)
	return p, nil
}

// GetProject returns the named project or store.ErrNotFound.
func (s *Store) GetProject(ctx context.Context, name string) (domain.Project, error) {
	if err := s.checkOpen(); err != nil {
		return domain.Project{}, err
	}
	action := fmt.Sprintf("get project %q", name)
	st, err := s.readStmt(ctx, getProjectSQL)
	if err != nil {
		return domain.Project{}, interpretError(action, err)
	}
	p, err := scanProject(st.QueryRowContext(ctx, name))
	if err != nil {
		return domain.Project{}, interpretError(action, err)
	}
	return p, nil
}

// ListProjects returns every project, sorted by name.
func (s *Store) ListProjects(ctx context.Context) ([]domain.Project, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	st, err := s.readStmt(ctx, listProjectsSQL)
	if err != nil {
		return nil, interpretError("list projects", err)
	}
	rows, err := st.QueryContext(ctx)
	if err != nil {
		return nil, interpretError("list projects", err)
	}
	defer rows.Close()
	var out []domain.Project
	for rows.Next() {
		p, err := scanProject(rows)
		if err != nil {
			return nil, interpretError("list projects", err)
		}
		out = append(out, p)
	}
	return out, interpretError("list projects", rows.Err())
}
