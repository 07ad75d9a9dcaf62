package service_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store/sqlite"
	"trainyard/internal/store/sqlite/sqlitetest"
)

var admin = service.Principal{Subject: "admin", Role: "admin"}

type poolEnv struct {
	svc   *service.Service
	clk   *clock.Fake
	wakes *atomic.Int64
}

func newPoolEnv(t *testing.T, queue service.QueueFunc) poolEnv {
	t.Helper()
	st := sqlitetest.Open(t, t.TempDir())
	clk := clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	wakes := &atomic.Int64{}
	svc := service.New(service.Config{Store: st, Clock: clk, Queue: queue, Wake: func() { wakes.Add(1) }})
	return poolEnv{svc: svc, clk: clk, wakes: wakes}
}

func validPool() domain.Pool {
	return domain.Pool{
		Name: "standard",
		Nodes: []domain.Node{
			{Name: "node-a", CPUs: 16, Memory: 64 << 30, GPUs: []int{0, 1}},
			{Name: "node-b", CPUs: 8, Memory: 32 << 30, GPUs: []int{2}},
		},
		MaxGPUsPerJob: 2, MaxRunning: 4, Priorities: []domain.Priority{"normal", "high"},
	}
}

// fieldPaths returns the paths of err's field errors, failing when err is
// not domain.FieldErrors.
func fieldPaths(t *testing.T, err error) []string {
	t.Helper()
	var fe domain.FieldErrors
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v (%T), want domain.FieldErrors", err, err)
	}
	var paths []string
	for _, e := range fe {
		paths = append(paths, e.Path)
	}
	return paths
}

func TestPutPoolValidation(t *testing.T) {
	tests := map[string]struct {
		edit  func(p *domain.Pool)
		paths []string
	}{
		"bad name":       {func(p *domain.Pool) { p.Name = "Standard_1" }, []string{"name"}},
		"name too long":  {func(p *domain.Pool) { p.Name = strings.Repeat("a", 64) }, []string{"name"}},
		"trailing dash":  {func(p *domain.Pool) { p.Name = "std-" }, []string{"name"}},
		"executor":       {func(p *domain.Pool) { p.Executor = "slurm" }, []string{"executor"}},
		"no nodes":       {func(p *domain.Pool) { p.Nodes = nil }, []string{"nodes"}},
		"dup node":       {func(p *domain.Pool) { p.Nodes[1].Name = "node-a" }, []string{"nodes[1].name"}},
		"bad node name":  {func(p *domain.Pool) { p.Nodes[0].Name = "" }, []string{"nodes[0].name"}},
		"zero cpus":      {func(p *domain.Pool) { p.Nodes[1].CPUs = 0 }, []string{"nodes[1].cpus"}},
		"zero memory":    {func(p *domain.Pool) { p.Nodes[0].Memory = 0 }, []string{"nodes[0].memory"}},
		"negative gpu":   {func(p *domain.Pool) { p.Nodes[0].GPUs = []int{-1} }, []string{"nodes[0].gpus"}},
		"gpu twice":      {func(p *domain.Pool) { p.Nodes[1].GPUs = []int{1} }, []string{"nodes[1].gpus"}},
		"negative limit": {func(p *domain.Pool) { p.MaxRunning = -1; p.MaxGPUsPerJob = -2 }, []string{"max_gpus_per_job", "max_running"}},
		"timeout":        {func(p *domain.Pool) { p.MaxTimeout = -1 }, []string{"max_timeout"}},
		"log limit":      {func(p *domain.Pool) { p.LogLimit = domain.MinLogLimit - 1 }, []string{"log_limit"}},
		"idle stop half": {func(p *domain.Pool) { p.IdleStop = domain.IdleStop{Below: 0.05} }, []string{"idle_stop.for"}},
		"idle stop range": {func(p *domain.Pool) { p.IdleStop = domain.IdleStop{Below: 5, For: domain.Duration(10 * time.Second)} },
			[]string{"idle_stop.below", "idle_stop.for"}},
		"rates": {func(p *domain.Pool) { p.Rates = domain.Rates{GPUHour: -1, CPUHour: 1, ObjectGiBMonth: -2} },
			[]string{"rates.gpu_hour", "rates.object_gib_month"}},
		"priority": {func(p *domain.Pool) { p.Priorities = []domain.Priority{"normal", "top", "normal"} }, []string{"priorities[1]", "priorities[2]"}},
		"many at once": {func(p *domain.Pool) { p.Name = "X"; p.Nodes[1].CPUs = -1; p.Nodes[1].GPUs = []int{0} },
			[]string{"name", "nodes[1].cpus", "nodes[1].gpus"}},
	}
	e := newPoolEnv(t, nil)
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := validPool()
			tc.edit(&p)
			_, _, err := e.svc.Pools.PutPool(context.Background(), admin, p)
			if !errors.Is(err, domain.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			if got := strings.Join(fieldPaths(t, err), " "); got != strings.Join(tc.paths, " ") {
				t.Errorf("paths = %q, want %q (%v)", got, strings.Join(tc.paths, " "), err)
			}
		})
	}
	if ps, err := e.svc.Pools.ListPools(context.Background(), admin); err != nil || len(ps) != 0 {
		t.Errorf("invalid pools were stored: %v, %v", ps, err)
	}
}

func TestPutPoolCreateAndReplace(t *testing.T) {
	ctx := context.Background()
	e := newPoolEnv(t, nil)
	created0 := e.clk.Now()
	got, created, err := e.svc.Pools.PutPool(ctx, admin, validPool())
	if err != nil || !created {
		t.Fatalf("PutPool: created %v, %v", created, err)
	}
	if got.Executor != "local" || !got.CreatedAt.Equal(created0) || !got.UpdatedAt.Equal(created0) {
		t.Errorf("new pool = executor %q created %v updated %v; want local, %v, %v", got.Executor, got.CreatedAt, got.UpdatedAt, created0, created0)
	}
	if e.wakes.Load() != 1 {
		t.Errorf("wakes = %d after PutPool, want 1", e.wakes.Load())
	}

	e.clk.Advance(time.Hour)
	p := validPool()
	p.MaxRunning = 9
	got, created, err = e.svc.Pools.PutPool(ctx, admin, p)
	if err != nil || created {
		t.Fatalf("PutPool (replace): created %v, %v", created, err)
	}
	if got.MaxRunning != 9 || !got.CreatedAt.Equal(created0) || !got.UpdatedAt.Equal(created0.Add(time.Hour)) {
		t.Errorf("replaced pool = %+v", got)
	}
	read, err := e.svc.Pools.GetPool(ctx, admin, "standard")
	if err != nil || read.MaxRunning != 9 || read.Capacity().GPUs != 3 {
		t.Errorf("GetPool = %+v, %v", read, err)
	}
}

func TestPoolNotFoundMessages(t *testing.T) {
	ctx := context.Background()
	e := newPoolEnv(t, nil)
	_, err := e.svc.Pools.GetPool(ctx, admin, "gpu")
	if !errors.Is(err, domain.ErrNotFound) || err.Error() != `pool "gpu" does not exist; list pools with: trainyard pool ls` {
		t.Errorf("GetPool: %v", err)
	}
	_, err = e.svc.Pools.SetQuota(ctx, admin, domain.Quota{Project: "vision", Pool: "gpu"})
	if !errors.Is(err, domain.ErrNotFound) || !strings.Contains(err.Error(), `pool "gpu" does not exist`) {
		t.Errorf("SetQuota in a missing pool: %v", err)
	}
	err = e.svc.Pools.DeleteQuota(ctx, admin, "vision", "gpu")
	if !errors.Is(err, domain.ErrNotFound) || !strings.Contains(err.Error(), `project "vision" has no quota in pool "gpu"`) {
		t.Errorf("DeleteQuota of a missing quota: %v", err)
	}
}

func TestQuotas(t *testing.T) {
	ctx := context.Background()
	e := newPoolEnv(t, nil)
	if _, _, err := e.svc.Pools.PutPool(ctx, admin, validPool()); err != nil {
		t.Fatal(err)
	}
	invalid := map[string]struct {
		q     domain.Quota
		paths []string
	}{
		"bad project":     {domain.Quota{Project: "Vision", Pool: "standard"}, []string{"project"}},
		"negative":        {domain.Quota{Project: "vision", Pool: "standard", Guaranteed: domain.Limits{GPUs: -1, CPUs: -1, Memory: -1, Jobs: -1}}, []string{"gpus", "cpus", "memory", "jobs"}},
		"negative borrow": {domain.Quota{Project: "vision", Pool: "standard", Borrow: domain.Limits{GPUs: -1}}, []string{"borrow.gpus"}},
		"max priority":    {domain.Quota{Project: "vision", Pool: "standard", MaxPriority: "top"}, []string{"max_priority"}},
	}
	for name, tc := range invalid {
		t.Run(name, func(t *testing.T) {
			_, err := e.svc.Pools.SetQuota(ctx, admin, tc.q)
			if got := strings.Join(fieldPaths(t, err), " "); got != strings.Join(tc.paths, " ") {
				t.Errorf("paths = %q, want %q", got, strings.Join(tc.paths, " "))
			}
		})
	}
	q := domain.Quota{Project: "vision", Pool: "standard", Guaranteed: domain.Limits{GPUs: 2, CPUs: 8, Memory: 32 << 30, Jobs: 2},
		Borrow: domain.Limits{GPUs: 1}, MaxPriority: domain.PriorityHigh}
	got, err := e.svc.Pools.SetQuota(ctx, admin, q)
	if err != nil {
		t.Fatalf("SetQuota: %v", err)
	}
	if !got.UpdatedAt.Equal(e.clk.Now()) {
		t.Errorf("UpdatedAt = %v, want the clock's %v", got.UpdatedAt, e.clk.Now())
	}
	qs, err := e.svc.Pools.ListQuotas(ctx, admin, "vision", "")
	if err != nil || len(qs) != 1 || qs[0].Guaranteed != q.Guaranteed || qs[0].Borrow != q.Borrow || qs[0].MaxPriority != "high" {
		t.Fatalf("ListQuotas = %+v, %v", qs, err)
	}
	if err := e.svc.Pools.DeleteQuota(ctx, admin, "vision", "standard"); err != nil {
		t.Fatalf("DeleteQuota: %v", err)
	}
	if qs, _ := e.svc.Pools.ListQuotas(ctx, admin, "", ""); len(qs) != 0 {
		t.Errorf("quotas after delete: %+v", qs)
	}
}

func TestSetProject(t *testing.T) {
	ctx := context.Background()
	e := newPoolEnv(t, nil)
	for name, shares := range map[string]float64{"zero": 0, "negative": -1, "too many": 1001} {
		t.Run(name, func(t *testing.T) {
			_, err := e.svc.Pools.SetProject(ctx, admin, domain.Project{Name: "vision", Shares: shares})
			if got := strings.Join(fieldPaths(t, err), " "); got != "shares" {
				t.Errorf("paths = %q, want shares", got)
			}
		})
	}
	if _, err := e.svc.Pools.SetProject(ctx, admin, domain.Project{Name: "Vision", Shares: 1}); err == nil {
		t.Error("SetProject with an invalid name succeeded")
	}
	p, err := e.svc.Pools.SetProject(ctx, admin, domain.Project{Name: "vision", Shares: 2})
	if err != nil || p.Shares != 2 || !p.CreatedAt.Equal(e.clk.Now()) {
		t.Fatalf("SetProject = %+v, %v", p, err)
	}
	e.clk.Advance(time.Minute)
	p, err = e.svc.Pools.SetProject(ctx, admin, domain.Project{Name: "vision", Shares: 1000})
	if err != nil || p.Shares != 1000 || !p.CreatedAt.Equal(e.clk.Now().Add(-time.Minute)) {
		t.Fatalf("SetProject (update) = %+v, %v; want shares 1000 and the first CreatedAt", p, err)
	}
	ps, err := e.svc.Pools.ListProjects(ctx, admin)
	if err != nil || len(ps) != 1 || ps[0].Name != "vision" {
		t.Errorf("ListProjects = %+v, %v", ps, err)
	}
}

func TestQueue(t *testing.T) {
	ctx := context.Background()
	t.Run("no control loop", func(t *testing.T) {
		e := newPoolEnv(t, nil)
		q, err := e.svc.Pools.Queue(ctx, admin, "")
		if err != nil || q == nil || len(q) != 0 {
			t.Errorf("Queue = %#v, %v; want an empty, non-nil queue", q, err)
		}
	})
	t.Run("passes the pool through", func(t *testing.T) {
		var asked string
		e := newPoolEnv(t, func(_ context.Context, pool string) ([]service.QueueEntry, error) {
			asked = pool
			return []service.QueueEntry{{JobID: 7, Pool: pool, Position: 1}}, nil
		})
		q, err := e.svc.Pools.Queue(ctx, admin, "standard")
		if err != nil || asked != "standard" || len(q) != 1 || q[0].JobID != 7 {
			t.Errorf("Queue = %+v, %v (asked for %q)", q, err, asked)
		}
	})
	t.Run("unknown empty pool", func(t *testing.T) {
		e := newPoolEnv(t, func(context.Context, string) ([]service.QueueEntry, error) { return nil, nil })
		if _, err := e.svc.Pools.Queue(ctx, admin, "nope"); !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("Queue of an unknown pool: err = %v, want ErrNotFound", err)
		}
		if _, _, err := e.svc.Pools.PutPool(ctx, admin, validPool()); err != nil {
			t.Fatal(err)
		}
		if q, err := e.svc.Pools.Queue(ctx, admin, "standard"); err != nil || len(q) != 0 {
			t.Errorf("Queue of an existing empty pool = %+v, %v", q, err)
		}
	})
	t.Run("error", func(t *testing.T) {
		e := newPoolEnv(t, func(context.Context, string) ([]service.QueueEntry, error) { return nil, errors.New("loop stopped") })
		if _, err := e.svc.Pools.Queue(ctx, admin, ""); err == nil || !strings.Contains(err.Error(), "loop stopped") {
			t.Errorf("Queue error = %v", err)
		}
	})
}

// TestQueueShowsOnlyListableJobs: the queue names jobs, so it is filtered
// as the job list is; positions stay those of the whole pool.
func TestQueueShowsOnlyListableJobs(t *testing.T) {
	ctx := context.Background()
	e := newPoolEnv(t, func(context.Context, string) ([]service.QueueEntry, error) {
		return []service.QueueEntry{
			{JobID: 1, Name: "secret-merger", Project: "other", Submitter: "carol", Pool: "standard", Position: 1},
			{JobID: 2, Name: "mine", Project: "vision", Submitter: "alice", Pool: "standard", Position: 2},
			{JobID: 3, Name: "bobs", Project: "vision", Submitter: "bob", Pool: "standard", Position: 3},
		}, nil
	})
	ids := func(p service.Principal) []int64 {
		t.Helper()
		q, err := e.svc.Pools.Queue(ctx, p, "")
		if err != nil {
			t.Fatalf("Queue as %s: %v", p.Subject, err)
		}
		var out []int64
		for _, en := range q {
			out = append(out, en.JobID)
		}
		return out
	}
	member := service.Principal{Subject: "alice", Projects: []domain.ProjectRole{{Project: "vision", Role: domain.RoleMember}}}
	lead := service.Principal{Subject: "lee", Projects: []domain.ProjectRole{{Project: "vision", Role: domain.RoleLead}}}
	auditor := service.Principal{Subject: "aud", Roles: []domain.Role{domain.RoleAuditor}, Role: domain.RoleAuditor}
	for _, tc := range []struct {
		p    service.Principal
		want []int64
	}{
		{member, []int64{2}},  // own jobs only
		{lead, []int64{2, 3}}, // the project's jobs
		{auditor, []int64{1, 2, 3}},
		{admin, []int64{1, 2, 3}},
	} {
		if got := ids(tc.p); !slices.Equal(got, tc.want) {
			t.Errorf("queue as %s = %v, want %v", tc.p.Subject, got, tc.want)
		}
	}
	q, _ := e.svc.Pools.Queue(ctx, member, "")
	if len(q) != 1 || q[0].Position != 2 {
		t.Errorf("member's entry = %+v, want position 2 (one hidden job ahead)", q)
	}
}

// TestPoolOnClusterExecutor: a pool on a configured executor takes its
// nodes from it, whatever its definition declares, and follows them as
// the cluster changes; an executor the server does not configure is
// refused with those it does named.
func TestPoolOnClusterExecutor(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var nodes []domain.Node
	var reads atomic.Int64
	svc := service.New(service.Config{Store: st, Clock: clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)),
		Executors: []string{"gpu-cluster"},
		ExecutorNodes: func(ctx context.Context, name string) ([]domain.Node, error) {
			if name != "gpu-cluster" {
				t.Errorf("nodes of executor %q asked", name)
			}
			reads.Add(1)
			return slices.Clone(nodes), nil
		}})

	_, _, err = svc.Pools.PutPool(ctx, admin, domain.Pool{Name: "a100", Executor: "slurm-east"})
	if err == nil || !strings.Contains(err.Error(), `"slurm-east"`) || !strings.Contains(err.Error(), "local, gpu-cluster") {
		t.Errorf("pool on an unconfigured executor: %v, want refused with the configured ones named", err)
	}

	// An empty cluster (scaled to zero) is a valid pool, with no nodes.
	p, created, err := svc.Pools.PutPool(ctx, admin, domain.Pool{Name: "a100", Executor: "gpu-cluster",
		Nodes: []domain.Node{{Name: "declared", CPUs: 1}}})
	if err != nil || !created {
		t.Fatalf("PutPool: %v (created %v)", err, created)
	}
	if len(p.Nodes) != 0 {
		t.Errorf("nodes %+v, want the cluster's (none), not the declared ones", p.Nodes)
	}

	nodes = []domain.Node{{Name: "ip-10-0-0-7.ec2.internal", CPUs: 96, Memory: 1 << 40, GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}}}
	changed, err := svc.Pools.SyncPoolNodes(ctx, "gpu-cluster")
	if err != nil || !slices.Equal(changed, []string{"a100"}) {
		t.Fatalf("SyncPoolNodes = %v, %v; want a100 changed", changed, err)
	}
	got, err := svc.Pools.GetPool(ctx, admin, "a100")
	if err != nil || !slices.EqualFunc(got.Nodes, nodes, func(a, b domain.Node) bool { return a.Name == b.Name && len(a.GPUs) == len(b.GPUs) }) {
		t.Fatalf("pool nodes %+v (%v), want the cluster's %+v", got.Nodes, err, nodes)
	}
	if changed, err := svc.Pools.SyncPoolNodes(ctx, "gpu-cluster"); err != nil || len(changed) != 0 {
		t.Errorf("SyncPoolNodes with nothing changed = %v, %v; want no write", changed, err)
	}
	if changed, err := svc.Pools.SyncPoolNodes(ctx, service.ExecutorLocal); err != nil || len(changed) != 0 {
		t.Errorf("SyncPoolNodes(local) = %v, %v; want nothing (its pools declare their nodes)", changed, err)
	}
	before := reads.Load()
	if _, err := svc.Pools.SyncPoolNodes(ctx, "elsewhere"); err != nil || reads.Load() != before {
		t.Errorf("SyncPoolNodes of an unknown executor: %v, %d reads", err, reads.Load()-before)
	}
}
