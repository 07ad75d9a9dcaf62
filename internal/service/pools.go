package service

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/lazyre"
	"trainyard/internal/store"
)

// PoolService manages pools, quotas, projects and compute requests, shows
// the queue, and admits submitted jobs against them.
type PoolService struct {
	*core
	st PoolStore
}

// PoolStore is what pool, quota, project and compute-request
// administration, and admission, read and write.
type PoolStore interface {
	ActiveGrants(ctx context.Context, now time.Time) ([]domain.QuotaRequest, error)
	CreateRequest(ctx context.Context, r domain.QuotaRequest, audit domain.AuditRecord) (domain.QuotaRequest, error)
	DecideRequest(ctx context.Context, id int64, to domain.RequestState, decider string, at time.Time, note string, audit domain.AuditRecord) (domain.QuotaRequest, error)
	DeleteQuota(ctx context.Context, project, pool string, audit domain.AuditRecord) error
	GetPool(ctx context.Context, name string) (domain.Pool, error)
	GetProject(ctx context.Context, name string) (domain.Project, error)
	GetRequest(ctx context.Context, id int64) (domain.QuotaRequest, error)
	ListPools(ctx context.Context) ([]domain.Pool, error)
	ListProjects(ctx context.Context) ([]domain.Project, error)
	ListQuotas(ctx context.Context, project, pool string) ([]domain.Quota, error)
	ListRequests(ctx context.Context, project, pool string) ([]domain.QuotaRequest, error)
	PutPool(ctx context.Context, p domain.Pool, audit domain.AuditRecord) (domain.Pool, error)
	PutProject(ctx context.Context, p domain.Project, audit domain.AuditRecord) error
	PutQuota(ctx context.Context, q domain.Quota, audit domain.AuditRecord) error
}

var _ PoolStore = store.Store(nil)

// nameRule is the rule for pool, node and project names: lowercase letters,
// digits and inner dashes, 1 to 63 characters (a DNS label).
var nameRule = lazyre.New(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

const nameRuleText = "use 1-63 lowercase letters, digits or dashes, starting and ending with a letter or digit"

// maxShares bounds a project's shares.
const maxShares = 1000

// ExecutorLocal is the executor every server has: processes on this
// machine. Others are configured by name (Config.Executors).
const ExecutorLocal = "local"

// ListPools returns every pool, sorted by name.
func (s *PoolService) ListPools(ctx context.Context, p Principal) ([]domain.Pool, error) {
	if err := s.authorize(ctx, p, authz.PoolRead, authz.Resource{Kind: "pool"}); err != nil {
		return nil, err
	}
	return s.st.ListPools(ctx)
}

// GetPool returns the named pool.
func (s *PoolService) GetPool(ctx context.Context, p Principal, name string) (domain.Pool, error) {
	if err := s.authorize(ctx, p, authz.PoolRead, authz.Resource{Kind: "pool", ID: name}); err != nil {
		return domain.Pool{}, err
	}
	pool, err := s.st.GetPool(ctx, name)
	if err != nil {
		return domain.Pool{}, poolErr(name, err)
	}
	return pool, nil
}

// PutPool validates the pool and creates it, or replaces the pool with the
// same name (its creation time is kept). An empty Executor means "local".
// created reports whether the pool is new.
func (s *PoolService) PutPool(ctx context.Context, p Principal, pool domain.Pool) (stored domain.Pool, created bool, err error) {
	if pool.Executor == "" {
		pool.Executor = ExecutorLocal
	}
	managed := pool.Executor != ExecutorLocal && slices.Contains(s.cfg.Executors, pool.Executor)
	if managed {
		pool.Nodes = nil // the executor's, below
	}
	if err := ValidatePoolOn(pool, s.cfg.Executors); err != nil {
		return domain.Pool{}, false, err
	}
	if err := s.authorize(ctx, p, authz.PoolWrite, authz.Resource{Kind: "pool", ID: pool.Name}); err != nil {
		return domain.Pool{}, false, err
	}
	if managed {
		// The cluster's nodes, whatever the definition declares: they
		// change as the cluster does (SyncPoolNodes).
		nodes, err := s.cfg.ExecutorNodes(ctx, pool.Executor)
		if err != nil {
			return domain.Pool{}, false, fmt.Errorf("read the nodes of executor %q for pool %q: %w", pool.Executor, pool.Name, err)
		}
		pool.Nodes = nodes
	}
	return s.storePool(ctx, p, pool)
}

// storePool stores a validated pool, audited as p's write.
func (s *PoolService) storePool(ctx context.Context, p Principal, pool domain.Pool) (stored domain.Pool, created bool, err error) {
	old, err := s.st.GetPool(ctx, pool.Name)
	var before any
	switch {
	case errors.Is(err, domain.ErrNotFound):
		created = true
	case err != nil:
		return domain.Pool{}, false, err
	default:
		before = poolSum(old)
	}
	now := s.cfg.Clock.Now()
	pool.CreatedAt, pool.UpdatedAt = now, now
	stored, err = s.st.PutPool(ctx, pool, s.audited(ctx, p, authz.PoolWrite, "pool/"+pool.Name, before, poolSum(pool)))
	if err != nil {
		return domain.Pool{}, false, fmt.Errorf("store pool %q: %w", pool.Name, err)
	}
	s.schedulingChanged()
	return stored, created, nil
}

// SyncPoolNodes gives every pool on executor its nodes as the executor
// offers them now (a cluster that grew, shrank or drained a node), as the
// system; pools whose nodes did not change are not written. It returns
// the pools it changed.
func (s *PoolService) SyncPoolNodes(ctx context.Context, executor string) ([]string, error) {
	if executor == ExecutorLocal || !slices.Contains(s.cfg.Executors, executor) {
		return nil, nil
	}
	pools, err := s.st.ListPools(ctx)
	if err != nil {
		return nil, err
	}
	var nodes []domain.Node
	var changed []string
	for _, pool := range pools {
		if pool.Executor != executor {
			continue
		}
		if nodes == nil {
			if nodes, err = s.cfg.ExecutorNodes(ctx, executor); err != nil {
				return changed, fmt.Errorf("read the nodes of executor %q: %w", executor, err)
			}
			if nodes == nil {
				nodes = []domain.Node{}
			}
		}
		if slices.EqualFunc(pool.Nodes, nodes, sameNode) {
			continue
		}
		pool.Nodes = nodes
		if _, _, err := s.storePool(ctx, Principal{Subject: "system:" + executor, Role: "admin"}, pool); err != nil {
			return changed, err
		}
		changed = append(changed, pool.Name)
	}
	return changed, nil
}

func sameNode(a, b domain.Node) bool {
	return a.Name == b.Name && a.CPUs == b.CPUs && a.Memory == b.Memory && slices.Equal(a.GPUs, b.GPUs)
}

// ValidatePool reports every problem with a pool definition as
// domain.FieldErrors, with paths named as in the API (nodes[1].gpus), for
// a server whose only executor is the local one.
func ValidatePool(pool domain.Pool) error { return ValidatePoolOn(pool, nil) }

// ValidatePoolOn validates a pool for a server that also has executors
// (Config.Executors): a pool on one of them takes its nodes from it, so it
// needs none of its own.
func ValidatePoolOn(pool domain.Pool, executors []string) error {
	var errs domain.FieldErrors
	checkName(&errs, "name", pool.Name)
	managed := false
	switch {
	case pool.Executor == ExecutorLocal:
	case slices.Contains(executors, pool.Executor):
		managed = true
	case len(executors) == 0:
		errs.Add("executor", "executor %q is not configured on this server; use %q, or declare it in the server config's executors (docs/operator.md)", pool.Executor, ExecutorLocal)
	default:
		errs.Add("executor", "executor %q is not configured on this server; use one of %s, or declare it in the server config's executors (docs/operator.md)",
			pool.Executor, strings.Join(append([]string{ExecutorLocal}, executors...), ", "))
	}
	if msg := domain.TextProblem(pool.GPUType, false); msg != "" {
		errs.Add("gpu_type", "%s", msg)
	}
	if len(pool.Nodes) == 0 && !managed {
		errs.Add("nodes", "a pool needs at least one node; add one such as {name: node-a, cpus: 8, memory: 32GiB, gpus: [0, 1]}")
	}
	nodeAt := map[string]int{}
	gpuAt := map[int]string{}
	for i, n := range pool.Nodes {
		path := fmt.Sprintf("nodes[%d]", i)
		checkName(&errs, path+".name", n.Name)
		if j, dup := nodeAt[n.Name]; dup && n.Name != "" {
			errs.Add(path+".name", "node %q is already declared at nodes[%d]; node names must be unique in a pool", n.Name, j)
		} else {
			nodeAt[n.Name] = i
		}
		if !(n.CPUs > 0) || math.IsInf(n.CPUs, 0) {
			errs.Add(path+".cpus", "must be more than 0 (got %v)", n.CPUs)
		}
		if n.Memory <= 0 {
			errs.Add(path+".memory", "must be more than 0; give a size such as 32GiB")
		}
		for _, g := range n.GPUs {
			if g < 0 {
				errs.Add(path+".gpus", "GPU index %d is negative; indices start at 0", g)
				continue
			}
			if other, dup := gpuAt[g]; dup {
				errs.Add(path+".gpus", "GPU %d is already on node %q; each GPU index may appear once in a pool", g, other)
				continue
			}
			gpuAt[g] = n.Name
		}
	}
	checkNonNegative(&errs, "max_gpus_per_job", pool.MaxGPUsPerJob)
	checkNonNegative(&errs, "max_nodes_per_job", pool.MaxNodesPerJob)
	checkNonNegative(&errs, "max_running", pool.MaxRunning)
	if pool.MaxTimeout < 0 {
		errs.Add("max_timeout", "must be 0 (no limit) or more")
	}
	if l := pool.LogLimit; l != 0 && l < domain.MinLogLimit {
		errs.Add("log_limit", "must be 0 (the server's log_limit) or at least %s, got %s; give a size such as 2GiB",
			domain.ByteSize(domain.MinLogLimit), l)
	}
	checkRates(&errs, pool.Rates)
	checkIdleStop(&errs, pool.IdleStop)
	seen := map[domain.Priority]bool{}
	for i, pr := range pool.Priorities {
		path := fmt.Sprintf("priorities[%d]", i)
		switch {
		case pr.Rank() < 0:
			errs.Add(path, "unknown priority %q; %s", pr, priorityChoices())
		case seen[pr]:
			errs.Add(path, "priority %q is listed twice", pr)
		}
		seen[pr] = true
	}
	return errs.Err()
}

// SetQuota validates the quota and creates or replaces it. The pool must
// exist.
func (s *PoolService) SetQuota(ctx context.Context, p Principal, q domain.Quota) (domain.Quota, error) {
	var errs domain.FieldErrors
	checkName(&errs, "project", q.Project)
	checkName(&errs, "pool", q.Pool)
	checkLimits(&errs, "", q.Guaranteed)
	checkLimits(&errs, "borrow.", q.Borrow)
	if q.MaxPriority != "" && q.MaxPriority.Rank() < 0 {
		errs.Add("max_priority", "unknown priority %q; %s", q.MaxPriority, priorityChoices())
	}
	if err := errs.Err(); err != nil {
		return domain.Quota{}, err
	}
	if err := s.authorize(ctx, p, authz.QuotaWrite, quotaResource(q.Project, q.Pool)); err != nil {
		return domain.Quota{}, err
	}
	if _, err := s.st.GetPool(ctx, q.Pool); err != nil {
		return domain.Quota{}, poolErr(q.Pool, err)
	}
	before, err := s.quotaBefore(ctx, q.Project, q.Pool)
	if err != nil {
		return domain.Quota{}, err
	}
	q.UpdatedAt = s.cfg.Clock.Now()
	if err := s.st.PutQuota(ctx, q, s.audited(ctx, p, authz.QuotaWrite, "quota/"+q.Project+"/"+q.Pool, before, quotaSum(q))); err != nil {
		return domain.Quota{}, poolErr(q.Pool, err) // the pool may have gone in between
	}
	s.schedulingChanged()
	return q, nil
}

// ListQuotas returns quotas sorted by project then pool, filtered by project
// and/or pool when they are not empty.
func (s *PoolService) ListQuotas(ctx context.Context, p Principal, project, pool string) ([]domain.Quota, error) {
	if err := s.authorize(ctx, p, authz.QuotaRead, authz.Resource{Kind: "quota", Project: project}); err != nil {
		return nil, err
	}
	return s.st.ListQuotas(ctx, project, pool)
}

// DeleteQuota removes the quota of project in pool.
func (s *PoolService) DeleteQuota(ctx context.Context, p Principal, project, pool string) error {
	if err := s.authorize(ctx, p, authz.QuotaWrite, quotaResource(project, pool)); err != nil {
		return err
	}
	before, err := s.quotaBefore(ctx, project, pool)
	if err != nil {
		return err
	}
	err = s.st.DeleteQuota(ctx, project, pool, s.audited(ctx, p, authz.QuotaWrite, "quota/"+project+"/"+pool, before, nil))
	if errors.Is(err, domain.ErrNotFound) {
		return domain.Errorf(domain.ErrNotFound, "project %q has no quota in pool %q; list quotas with: trainyard quota ls", project, pool)
	}
	if err != nil {
		return err
	}
	s.schedulingChanged()
	return nil
}

// SetProject creates the project or updates its shares (more than 0, at most
// 1000) and returns it as stored.
func (s *PoolService) SetProject(ctx context.Context, p Principal, proj domain.Project) (domain.Project, error) {
	var errs domain.FieldErrors
	checkName(&errs, "name", proj.Name)
	if !(proj.Shares > 0) || proj.Shares > maxShares {
		errs.Add("shares", "must be more than 0 and at most %d (got %v); 1 is an equal share", maxShares, proj.Shares)
	}
	if err := errs.Err(); err != nil {
		return domain.Project{}, err
	}
	if err := s.authorize(ctx, p, authz.ProjectWrite, authz.Resource{Kind: "project", ID: proj.Name, Project: proj.Name}); err != nil {
		return domain.Project{}, err
	}
	var before any
	if old, err := s.st.GetProject(ctx, proj.Name); err == nil {
		before = map[string]float64{"shares": old.Shares}
	} else if !errors.Is(err, domain.ErrNotFound) {
		return domain.Project{}, err
	}
	proj.CreatedAt = s.cfg.Clock.Now()
	rec := s.audited(ctx, p, authz.ProjectWrite, "project/"+proj.Name, before, map[string]float64{"shares": proj.Shares})
	if err := s.st.PutProject(ctx, proj, rec); err != nil {
		return domain.Project{}, fmt.Errorf("store project %q: %w", proj.Name, err)
	}
	s.schedulingChanged()
	return s.st.GetProject(ctx, proj.Name)
}

// ListProjects returns every project with stored shares, sorted by name.
func (s *PoolService) ListProjects(ctx context.Context, p Principal) ([]domain.Project, error) {
	if err := s.authorize(ctx, p, authz.ProjectRead, authz.Resource{Kind: "project"}); err != nil {
		return nil, err
	}
	return s.st.ListProjects(ctx)
}

// Queue returns the waiting jobs of pool (every pool when pool is ""), in
// scheduling order, as the control loop last ordered them. Without a
// control loop the queue is empty. An unknown pool with nothing queued in it
// is ErrNotFound, so a mistyped name does not look like an empty queue.
// The caller gets only the jobs it may list (authz.VisibleJobs).
func (s *PoolService) Queue(ctx context.Context, p Principal, pool string) ([]QueueEntry, error) {
	if err := s.authorize(ctx, p, authz.QueueRead, authz.Resource{Kind: "queue", ID: pool}); err != nil {
		return nil, err
	}
	entries := []QueueEntry{}
	if s.cfg.Queue != nil {
		q, err := s.cfg.Queue(ctx, pool)
		if err != nil {
			return nil, fmt.Errorf("read the queue: %w", err)
		}
		if q != nil {
			entries = q
		}
	}
	if pool != "" && len(entries) == 0 {
		if _, err := s.st.GetPool(ctx, pool); err != nil {
			return nil, poolErr(pool, err)
		}
	}
	// Only the jobs the caller may list: the queue names jobs as the job
	// list does. Positions stay those of the whole pool, so a caller still
	// sees how many jobs wait ahead of theirs, though not whose.
	if v := authz.VisibleJobs(p); !v.All {
		seen := make([]QueueEntry, 0, len(entries))
		for _, e := range entries {
			if v.Sees(e.Project, e.Submitter) {
				seen = append(seen, e)
			}
		}
		entries = seen
	}
	return entries, nil
}

// quotaResource is the authorization view of the quota of project in pool.
func quotaResource(project, pool string) authz.Resource {
	return authz.Resource{Kind: "quota", ID: project + "/" + pool, Project: project}
}

// quotaBefore summarises the quota of project in pool before a change (nil
// when there is none).
func (s *PoolService) quotaBefore(ctx context.Context, project, pool string) (any, error) {
	qs, err := s.st.ListQuotas(ctx, project, pool)
	if err != nil {
		return nil, err
	}
	for _, q := range qs {
		if q.Project == project && q.Pool == pool {
			return quotaSum(q), nil
		}
	}
	return nil, nil
}

func poolErr(name string, err error) error {
	if errors.Is(err, domain.ErrNotFound) {
		return domain.Errorf(domain.ErrNotFound, "pool %q does not exist; list pools with: trainyard pool ls", name)
	}
	return err
}

// ValidName says whether name is a valid pool, node, project or executor
// name, and if not, why.
func ValidName(name string) error {
	var errs domain.FieldErrors
	checkName(&errs, "", name)
	if len(errs) > 0 {
		return errors.New(errs[0].Message)
	}
	return nil
}

func checkName(errs *domain.FieldErrors, path, name string) {
	switch {
	case name == "":
		errs.Add(path, "is required; %s", nameRuleText)
	case !nameRule.MatchString(name):
		errs.Add(path, "%q is not a valid name; %s", name, nameRuleText)
	}
}

// checkRates reports every negative rate (domain.Rates.Check stops at the
// first), each under its own path.
func checkRates(errs *domain.FieldErrors, r domain.Rates) {
	if r.Check() == nil {
		return
	}
	for _, f := range []struct {
		name string
		v    domain.Money
	}{{"gpu_hour", r.GPUHour}, {"cpu_hour", r.CPUHour}, {"memory_gib_hour", r.MemoryGiBHour},
		{"local_gib_month", r.LocalGiBMonth}, {"object_gib_month", r.ObjectGiBMonth}} {
		if f.v < 0 {
			errs.Add("rates."+f.name, "is %s; a rate cannot be negative: give an amount such as 2.10, or 0 for free", f.v)
		}
	}
}

// checkIdleStop reports an idle stop that is half set or out of range:
// both fields, or neither.
func checkIdleStop(errs *domain.FieldErrors, s domain.IdleStop) {
	if s == (domain.IdleStop{}) {
		return
	}
	if !(s.Below > 0 && s.Below <= 1) {
		errs.Add("idle_stop.below", "must be a GPU utilisation ratio in (0, 1] (got %g); write 5%% as 0.05", s.Below)
	}
	if s.For <= 0 {
		errs.Add("idle_stop.for", "must be a positive duration such as 30m (got %s); to turn the idle stop off, leave out idle_stop", s.For)
	} else if s.For.D() < time.Minute {
		errs.Add("idle_stop.for", "must be at least 1m (got %s): shorter windows stop jobs between two GPU samples", s.For)
	}
}

func checkNonNegative(errs *domain.FieldErrors, path string, v int) {
	if v < 0 {
		errs.Add(path, "must be 0 or more (got %d)", v)
	}
}

func checkLimits(errs *domain.FieldErrors, prefix string, l domain.Limits) {
	checkNonNegative(errs, prefix+"gpus", l.GPUs)
	if !(l.CPUs >= 0) || math.IsInf(l.CPUs, 0) {
		errs.Add(prefix+"cpus", "must be 0 or more (got %v)", l.CPUs)
	}
	if l.Memory < 0 {
		errs.Add(prefix+"memory", "must be 0 or more")
	}
	checkNonNegative(errs, prefix+"jobs", l.Jobs)
}

func priorityChoices() string {
	names := make([]string, 0, 4)
	for _, p := range domain.Priorities() {
		names = append(names, string(p))
	}
	return "use one of " + strings.Join(names, ", ")
}
