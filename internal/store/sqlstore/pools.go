package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/column"
)

const (
	poolCols  = `name, executor, gpu_type, nodes_json, max_gpus_per_job, max_nodes_per_job, max_timeout, max_running, priorities, borrowing, preemption, log_limit, rates_json, idle_stop_below, idle_stop_for, created_at, updated_at`
	quotaCols = `project, pool, gpus, cpus, memory, jobs, borrow_gpus, borrow_cpus, borrow_memory, borrow_jobs, max_priority, updated_at`
)

var (
	qPoolGet    = Q(`SELECT ` + poolCols + ` FROM pools WHERE name = ?`)
	qPoolList   = Q(`SELECT ` + poolCols + ` FROM pools ORDER BY name{C}`)
	qPoolUpsert = Q(`INSERT INTO pools (` + poolCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET executor = excluded.executor, gpu_type = excluded.gpu_type,
		nodes_json = excluded.nodes_json, max_gpus_per_job = excluded.max_gpus_per_job,
		max_nodes_per_job = excluded.max_nodes_per_job, max_timeout = excluded.max_timeout,
		max_running = excluded.max_running, priorities = excluded.priorities,
		borrowing = excluded.borrowing, preemption = excluded.preemption,
		log_limit = excluded.log_limit, rates_json = excluded.rates_json,
		idle_stop_below = excluded.idle_stop_below, idle_stop_for = excluded.idle_stop_for, updated_at = excluded.updated_at
		RETURNING created_at`)
	// A pool's rate history (pool_rates): its latest entry, and a new one.
	qRateLatest = Q(`SELECT effective_from, rates_json FROM pool_rates WHERE pool = ? ORDER BY effective_from DESC LIMIT 1`)
	qRatePut    = Q(`INSERT INTO pool_rates (pool, effective_from, rates_json) VALUES (?, ?, ?)
		ON CONFLICT (pool, effective_from) DO UPDATE SET rates_json = excluded.rates_json`)
	qRateHistory = Q(`SELECT pool, effective_from, rates_json FROM pool_rates ORDER BY pool{C}, effective_from`)
	qQuotaUpsert = Q(`INSERT INTO quotas (` + quotaCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (project, pool) DO UPDATE SET gpus = excluded.gpus, cpus = excluded.cpus, memory = excluded.memory,
		jobs = excluded.jobs, borrow_gpus = excluded.borrow_gpus, borrow_cpus = excluded.borrow_cpus,
		borrow_memory = excluded.borrow_memory, borrow_jobs = excluded.borrow_jobs,
		max_priority = excluded.max_priority, updated_at = excluded.updated_at`)
	qQuotaDelete   = Q(`DELETE FROM quotas WHERE project = ? AND pool = ?`)
	qQuotaList     = Q(`SELECT ` + quotaCols + ` FROM quotas WHERE (? = '' OR project = ?) AND (? = '' OR pool = ?) ORDER BY project{C}, pool{C}`)
	qProjectUpsert = Q(`INSERT INTO projects (name, shares, created_at) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET shares = excluded.shares`)
	qProjectGet    = Q(`SELECT name, shares, created_at FROM projects WHERE name = ?`)
	qProjectList   = Q(`SELECT name, shares, created_at FROM projects ORDER BY name{C}`)
	// QSettingsRev reads the one row of settings_rev, which the triggers
	// of migration 0031 keep.
	QSettingsRev = Q(`SELECT rev FROM settings_rev WHERE id = 1`)
)

func scanPool(sc Row) (domain.Pool, error) {
	var (
		p                                                             domain.Pool
		executor, gpuType, nodes, prios, rates                        string
		maxGPUs, maxNodes, maxTimeout, maxRunning, bor, pre, logLimit int64
		idleBelow                                                     float64
		idleFor                                                       int64
		created, updated                                              sql.NullInt64
	)
	if err := sc.Scan(&p.Name, &executor, &gpuType, &nodes, &maxGPUs, &maxNodes, &maxTimeout, &maxRunning,
		&prios, &bor, &pre, &logLimit, &rates, &idleBelow, &idleFor, &created, &updated); err != nil {
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
	p.IdleStop = domain.IdleStop{Below: idleBelow, For: domain.Duration(idleFor)}
	if p.Rates, err = column.ParseRates(rates); err != nil {
		return domain.Pool{}, fmt.Errorf("pool %q: %w", p.Name, err)
	}
	p.CreatedAt, p.UpdatedAt = TimeOf(created), TimeOf(updated)
	return p, nil
}

// PutPool creates the pool or replaces the one with the same name. CreatedAt
// is kept from the first write (p.CreatedAt, or p.UpdatedAt when that is
// zero); UpdatedAt is set to p.UpdatedAt.
func (s Shared) PutPool(ctx context.Context, p domain.Pool, audit domain.AuditRecord) (domain.Pool, error) {
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
	err = s.b.Write(ctx, func(x Exec) error {
		var c sql.NullInt64
		if err := x.QueryRow(qPoolUpsert, p.Name, p.Executor, p.GPUType, nodes, int64(p.MaxGPUsPerJob), int64(p.MaxNodesPerJob),
			int64(p.MaxTimeout), int64(p.MaxRunning), column.Priorities(p.Priorities), BoolArg(p.Borrowing), BoolArg(p.Preemption),
			int64(p.LogLimit), column.Rates(p.Rates), p.IdleStop.Below, int64(p.IdleStop.For), TimeArg(created), TimeArg(p.UpdatedAt)).Scan(&c); err != nil {
			return s.err(action, err)
		}
		stored = p
		stored.CreatedAt = TimeOf(c)
		return s.recordRates(x, action, p)
	}, audit)
	if err != nil {
		return domain.Pool{}, err
	}
	stored.UpdatedAt = NormTime(stored.UpdatedAt)
	stored.Nodes = cloneNodes(stored.Nodes)
	stored.Priorities = append([]domain.Priority(nil), stored.Priorities...)
	if len(stored.Priorities) == 0 {
		stored.Priorities = nil
	}
	return stored, nil
}

// recordRates adds p's rates to its history, from p.UpdatedAt (else
// p.CreatedAt, else the epoch), when they differ from its latest entry.
// The pool's row is locked by the write before, so concurrent writers of
// one pool record in turn. A change is never dated before the latest
// entry (a clock that stepped back): the rates just written must be the
// ones in force from now on; a change at the same instant replaces it.
func (s Shared) recordRates(x Exec, action string, p domain.Pool) error {
	from := p.UpdatedAt
	if from.IsZero() {
		from = p.CreatedAt
	}
	var at int64
	if !from.IsZero() {
		at = from.UnixNano()
	}
	var (
		last    int64
		encoded string
	)
	switch err := x.QueryRow(qRateLatest, p.Name).Scan(&last, &encoded); {
	case s.b.IsNoRows(err):
	case err != nil:
		return s.err(action+": read its rate history", err)
	default:
		if r, err := column.ParseRates(encoded); err == nil && r == p.Rates {
			return nil
		}
		at = max(at, last)
	}
	return x.Queue(action+": record its rates", qRatePut, p.Name, at, column.Rates(p.Rates))
}

// RateHistory returns the rate changes of the named pools (of every pool
// when none is named), by pool, then From.
func (s Shared) RateHistory(ctx context.Context, pools ...string) ([]store.RateChange, error) {
	q := qRateHistory
	args := make([]any, len(pools))
	if len(pools) > 0 {
		for i, p := range pools {
			args[i] = p
		}
		q = Q(`SELECT pool, effective_from, rates_json FROM pool_rates WHERE pool IN (?` +
			strings.Repeat(", ?", len(pools)-1) + `) ORDER BY pool{C}, effective_from`)
	}
	return queryAll(ctx, s, "read rate history", func(row Row) (store.RateChange, error) {
		var (
			c       store.RateChange
			from    int64
			encoded string
		)
		if err := row.Scan(&c.Pool, &from, &encoded); err != nil {
			return c, err
		}
		r, err := column.ParseRates(encoded)
		if err != nil {
			return c, fmt.Errorf("pool %q from %d: %w", c.Pool, from, err)
		}
		c.From, c.Rates = time.Unix(0, from).UTC(), r
		return c, nil
	}, q, args...)
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
func (s Shared) GetPool(ctx context.Context, name string) (domain.Pool, error) {
	return queryOne(ctx, s, fmt.Sprintf("get pool %q", name), scanPool, qPoolGet, name)
}

// ListPools returns every pool, sorted by name.
func (s Shared) ListPools(ctx context.Context) ([]domain.Pool, error) {
	return queryAll(ctx, s, "list pools", scanPool, qPoolList)
}

// PutQuota creates or replaces the quota of (q.Project, q.Pool); the pool
// must exist (store.ErrNotFound otherwise).
func (s Shared) PutQuota(ctx context.Context, q domain.Quota, audit domain.AuditRecord) error {
	action := fmt.Sprintf("put quota of project %q in pool %q", q.Project, q.Pool)
	if q.Project == "" || q.Pool == "" {
		return fmt.Errorf("%s: project and pool must both be set: %w", action, store.ErrInvalid)
	}
	return s.b.Write(ctx, func(x Exec) error {
		var n int64
		if err := x.QueryRow(qPoolExists, q.Pool).Scan(&n); err != nil {
			return s.err(action, err)
		}
		if n == 0 {
			return fmt.Errorf("%s: pool %q does not exist: %w", action, q.Pool, store.ErrNotFound)
		}
		g, b := q.Guaranteed, q.Borrow
		return x.Queue(action, qQuotaUpsert, q.Project, q.Pool, int64(g.GPUs), g.CPUs, int64(g.Memory), int64(g.Jobs),
			int64(b.GPUs), b.CPUs, int64(b.Memory), int64(b.Jobs), string(q.MaxPriority), TimeArg(q.UpdatedAt))
	}, audit)
}

// ListQuotas returns quotas sorted by project then pool, filtered by project
// and/or pool when they are not empty.
func (s Shared) ListQuotas(ctx context.Context, project, pool string) ([]domain.Quota, error) {
	r, err := s.b.Reader()
	if err != nil {
		return nil, err
	}
	var out []domain.Quota
	if err := r.Query(ctx, func(row Row) error {
		var (
			q       domain.Quota
			gm, bm  int64
			maxPrio string
			updated sql.NullInt64
		)
		if err := row.Scan(&q.Project, &q.Pool, &q.Guaranteed.GPUs, &q.Guaranteed.CPUs, &gm, &q.Guaranteed.Jobs,
			&q.Borrow.GPUs, &q.Borrow.CPUs, &bm, &q.Borrow.Jobs, &maxPrio, &updated); err != nil {
			return err
		}
		q.Guaranteed.Memory, q.Borrow.Memory = domain.ByteSize(gm), domain.ByteSize(bm)
		q.MaxPriority = domain.Priority(maxPrio)
		q.UpdatedAt = TimeOf(updated)
		out = append(out, q)
		return nil
	}, qQuotaList, project, project, pool, pool); err != nil {
		return nil, s.err("list quotas", err)
	}
	return out, nil
}

// DeleteQuota removes the quota of project in pool; store.ErrNotFound when
// there is none.
func (s Shared) DeleteQuota(ctx context.Context, project, pool string, audit domain.AuditRecord) error {
	action := fmt.Sprintf("delete quota of project %q in pool %q", project, pool)
	return s.b.Write(ctx, func(x Exec) error {
		n, err := x.Exec(qQuotaDelete, project, pool)
		if err != nil {
			return s.err(action, err)
		}
		if n == 0 {
			return fmt.Errorf("%s: %w", action, store.ErrNotFound)
		}
		return nil
	}, audit)
}

// PutProject creates the project or updates its shares. Shares of zero or
// less store the default, 1. CreatedAt is kept from the first write (the
// current time when p.CreatedAt is zero).
func (s Shared) PutProject(ctx context.Context, p domain.Project, audit domain.AuditRecord) error {
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
	return s.b.Write(ctx, func(x Exec) error {
		return x.Queue(action, qProjectUpsert, p.Name, shares, TimeArg(created))
	}, audit)
}

func scanProject(sc Row) (domain.Project, error) {
	var (
		p       domain.Project
		created sql.NullInt64
	)
	if err := sc.Scan(&p.Name, &p.Shares, &created); err != nil {
		return domain.Project{}, err
	}
	p.CreatedAt = TimeOf(created)
	return p, nil
}

// GetProject returns the named project or store.ErrNotFound.
func (s Shared) GetProject(ctx context.Context, name string) (domain.Project, error) {
	return queryOne(ctx, s, fmt.Sprintf("get project %q", name), scanProject, qProjectGet, name)
}

// ListProjects returns every project, sorted by name.
func (s Shared) ListProjects(ctx context.Context) ([]domain.Project, error) {
	return queryAll(ctx, s, "list projects", scanProject, qProjectList)
}

// SettingsRev implements store.Pools: the revision the triggers of
// migration 0031 bump in every transaction that writes pools, quotas,
// projects or compute requests.
func (s Shared) SettingsRev(ctx context.Context) (int64, error) {
	return queryOne(ctx, s, "read the settings revision", func(row Row) (int64, error) {
		var rev int64
		err := row.Scan(&rev)
		return rev, err
	}, QSettingsRev)
}
