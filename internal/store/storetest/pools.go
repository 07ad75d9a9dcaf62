package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// poolTests are the subtests of the Pools contract; Exercise runs them with
// the others.
var poolTests = map[string]func(t *testing.T, s store.Store){
	"PoolsRoundTrip":           testPoolsRoundTrip,
	"PoolsReplaceKeepsCreated": testPoolsReplaceKeepsCreated,
	"PoolsListOrder":           testPoolsListOrder,
	"PoolsNotFound":            testPoolsNotFound,
	"PoolsQuotaNeedsPool":      testPoolsQuotaNeedsPool,
	"PoolsQuotaRoundTrip":      testPoolsQuotaRoundTrip,
	"PoolsQuotaListFilters":    testPoolsQuotaListFilters,
	"PoolsQuotaDelete":         testPoolsQuotaDelete,
	"PoolsProjects":            testPoolsProjects,
	"Budgets":                  testBudgets,
}

// testPool returns a pool with every field set.
func testPool(name string) domain.Pool {
	return domain.Pool{
		Name: name, Executor: "local", GPUType: "a100-80g",
		Nodes: []domain.Node{
			{Name: "node-a", CPUs: 32, Memory: 256 << 30, GPUs: []int{0, 1, 2, 3}},
			{Name: "node-b", CPUs: 7.5, Memory: 1536 << 20, GPUs: []int{7, 5}},
		},
		MaxGPUsPerJob: 4, MaxNodesPerJob: 2, MaxTimeout: domain.Duration(36*time.Hour + time.Second),
		MaxRunning: 8,
		Priorities: []domain.Priority{domain.PriorityLow, domain.PriorityNormal, domain.PriorityHigh},
		Borrowing:  true, Preemption: true,
		LogLimit: 3 << 30,
		// Micros that no float would keep exactly.
		Rates: domain.Rates{GPUHour: 2_100_000, CPUHour: 48_001, MemoryGiBHour: 1,
			LocalGiBMonth: 100_000, ObjectGiBMonth: 1<<53 + 1},
		IdleStop:  domain.IdleStop{Below: 0.05, For: domain.Duration(30*time.Minute + time.Second)},
		CreatedAt: at(1), UpdatedAt: at(1),
	}
}

func putPool(t *testing.T, s store.Store, p domain.Pool) domain.Pool {
	t.Helper()
	got, err := s.PutPool(context.Background(), p, setupAudit)
	if err != nil {
		t.Fatalf("PutPool(%q): %v", p.Name, err)
	}
	return got
}

func getPool(t *testing.T, s store.Store, name string) domain.Pool {
	t.Helper()
	got, err := s.GetPool(context.Background(), name)
	if err != nil {
		t.Fatalf("GetPool(%q): %v", name, err)
	}
	return got
}

func testPoolsRoundTrip(t *testing.T, s store.Store) {
	want := testPool("standard")
	if d := diff(want, putPool(t, s, want)); d != "" {
		t.Errorf("PutPool returned a different pool:%s", d)
	}
	if d := diff(want, getPool(t, s, "standard")); d != "" {
		t.Errorf("GetPool differs from what was put:%s", d)
	}
	// A pool with the zero value in every optional field reads back the same.
	bare := domain.Pool{Name: "bare", Executor: "local", Nodes: []domain.Node{{Name: "n1", CPUs: 1, Memory: 1 << 30}},
		CreatedAt: at(2), UpdatedAt: at(2)}
	putPool(t, s, bare)
	if d := diff(bare, getPool(t, s, "bare")); d != "" {
		t.Errorf("GetPool of a minimal pool differs:%s", d)
	}
}

func testPoolsReplaceKeepsCreated(t *testing.T, s store.Store) {
	first := testPool("standard")
	putPool(t, s, first)

	second := testPool("standard")
	second.Nodes = []domain.Node{{Name: "node-c", CPUs: 64, Memory: 512 << 30, GPUs: []int{0, 1}}}
	second.Priorities = nil
	second.Borrowing, second.Preemption = false, false
	second.MaxRunning = 0
	second.LogLimit = 2 << 20                       // a replace updates the limit too
	second.Rates = domain.Rates{GPUHour: 3_500_000} // and the rates, dropping those not given
	second.IdleStop = domain.IdleStop{}             // and turns the idle stop off
	second.CreatedAt = at(50)                       // ignored: the first write's CreatedAt stays
	second.UpdatedAt = at(50)
	got := putPool(t, s, second)

	want := second
	want.CreatedAt = at(1)
	if d := diff(want, got); d != "" {
		t.Errorf("PutPool (replace) returned:%s", d)
	}
	if d := diff(want, getPool(t, s, "standard")); d != "" {
		t.Errorf("GetPool after replace:%s", d)
	}
	if ps, err := s.ListPools(context.Background()); err != nil || len(ps) != 1 {
		t.Errorf("ListPools after replace = %d pools, %v; want 1", len(ps), err)
	}
}

func testPoolsListOrder(t *testing.T, s store.Store) {
	ctx := context.Background()
	if ps, err := s.ListPools(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("ListPools on an empty store = %v, %v", ps, err)
	}
	for _, n := range []string{"gamma", "alpha", "beta"} {
		putPool(t, s, testPool(n))
	}
	ps, err := s.ListPools(ctx)
	if err != nil {
		t.Fatalf("ListPools: %v", err)
	}
	var names []string
	for _, p := range ps {
		names = append(names, p.Name)
	}
	if d := diff([]string{"alpha", "beta", "gamma"}, names); d != "" {
		t.Errorf("ListPools order:%s", d)
	}
	want := testPool("beta")
	if d := diff(want, ps[1]); d != "" {
		t.Errorf("ListPools row differs from GetPool's:%s", d)
	}
}

func testPoolsNotFound(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.GetPool(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetPool of a missing pool: err = %v, want ErrNotFound", err)
	}
	if _, err := s.GetProject(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetProject of a missing project: err = %v, want ErrNotFound", err)
	}
	if err := s.DeleteQuota(ctx, "vision", "nope", setupAudit); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteQuota of a missing quota: err = %v, want ErrNotFound", err)
	}
}

func testQuota(project, pool string) domain.Quota {
	return domain.Quota{
		Project: project, Pool: pool,
		Guaranteed:  domain.Limits{GPUs: 2, CPUs: 16.5, Memory: 128 << 30, Jobs: 4},
		Borrow:      domain.Limits{GPUs: 2, CPUs: 8, Memory: 64 << 30, Jobs: 1},
		MaxPriority: domain.PriorityHigh,
		UpdatedAt:   at(3),
	}
}

func testPoolsQuotaNeedsPool(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.PutQuota(ctx, testQuota("vision", "missing"), setupAudit); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("PutQuota in a missing pool: err = %v, want ErrNotFound", err)
	}
	if qs, err := s.ListQuotas(ctx, "", ""); err != nil || len(qs) != 0 {
		t.Errorf("ListQuotas after a failed PutQuota = %v, %v; want none", qs, err)
	}
}

func testPoolsQuotaRoundTrip(t *testing.T, s store.Store) {
	ctx := context.Background()
	putPool(t, s, testPool("standard"))
	q := testQuota("vision", "standard")
	if err := s.PutQuota(ctx, q, setupAudit); err != nil {
		t.Fatalf("PutQuota: %v", err)
	}
	qs, err := s.ListQuotas(ctx, "", "")
	if err != nil || len(qs) != 1 {
		t.Fatalf("ListQuotas = %v, %v; want one quota", qs, err)
	}
	if d := diff(q, qs[0]); d != "" {
		t.Errorf("ListQuotas differs from what was put:%s", d)
	}
	// Replace: every field takes the new value.
	r := domain.Quota{Project: "vision", Pool: "standard", Guaranteed: domain.Limits{GPUs: 1}, UpdatedAt: at(9)}
	if err := s.PutQuota(ctx, r, setupAudit); err != nil {
		t.Fatalf("PutQuota (replace): %v", err)
	}
	qs, err = s.ListQuotas(ctx, "vision", "standard")
	if err != nil || len(qs) != 1 {
		t.Fatalf("ListQuotas after replace = %v, %v; want one quota", qs, err)
	}
	if d := diff(r, qs[0]); d != "" {
		t.Errorf("ListQuotas after replace:%s", d)
	}
}

func testPoolsQuotaListFilters(t *testing.T, s store.Store) {
	ctx := context.Background()
	putPool(t, s, testPool("standard"))
	putPool(t, s, testPool("big"))
	for _, pq := range [][2]string{{"vision", "standard"}, {"nlp", "standard"}, {"vision", "big"}, {"audio", "big"}} {
		if err := s.PutQuota(ctx, testQuota(pq[0], pq[1]), setupAudit); err != nil {
			t.Fatalf("PutQuota(%s, %s): %v", pq[0], pq[1], err)
		}
	}
	tests := map[string]struct {
		project, pool string
		want          []string
	}{
		"all":          {want: []string{"audio/big", "nlp/standard", "vision/big", "vision/standard"}},
		"by project":   {project: "vision", want: []string{"vision/big", "vision/standard"}},
		"by pool":      {pool: "standard", want: []string{"nlp/standard", "vision/standard"}},
		"both":         {project: "nlp", pool: "standard", want: []string{"nlp/standard"}},
		"none matches": {project: "nlp", pool: "big"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			qs, err := s.ListQuotas(ctx, tc.project, tc.pool)
			if err != nil {
				t.Fatalf("ListQuotas: %v", err)
			}
			var got []string
			for _, q := range qs {
				got = append(got, q.Project+"/"+q.Pool)
			}
			if d := diff(tc.want, got); d != "" {
				t.Errorf("ListQuotas(%q, %q):%s", tc.project, tc.pool, d)
			}
		})
	}
}

func testPoolsQuotaDelete(t *testing.T, s store.Store) {
	ctx := context.Background()
	putPool(t, s, testPool("standard"))
	for _, p := range []string{"vision", "nlp"} {
		if err := s.PutQuota(ctx, testQuota(p, "standard"), setupAudit); err != nil {
			t.Fatalf("PutQuota: %v", err)
		}
	}
	if err := s.DeleteQuota(ctx, "vision", "standard", setupAudit); err != nil {
		t.Fatalf("DeleteQuota: %v", err)
	}
	qs, err := s.ListQuotas(ctx, "", "")
	if err != nil || len(qs) != 1 || qs[0].Project != "nlp" {
		t.Errorf("ListQuotas after delete = %+v, %v; want only nlp's", qs, err)
	}
	if err := s.DeleteQuota(ctx, "vision", "standard", setupAudit); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second DeleteQuota: err = %v, want ErrNotFound", err)
	}
}

func testPoolsProjects(t *testing.T, s store.Store) {
	ctx := context.Background()
	if ps, err := s.ListProjects(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("ListProjects on an empty store = %v, %v", ps, err)
	}
	if err := s.PutProject(ctx, domain.Project{Name: "vision", Shares: 2.5, CreatedAt: at(1)}, setupAudit); err != nil {
		t.Fatalf("PutProject: %v", err)
	}
	if err := s.PutProject(ctx, domain.Project{Name: "audio", CreatedAt: at(2)}, setupAudit); err != nil {
		t.Fatalf("PutProject without shares: %v", err)
	}
	got, err := s.GetProject(ctx, "vision")
	if err != nil {
		t.Fatalf("GetProject: %v", err)
	}
	if d := diff(domain.Project{Name: "vision", Shares: 2.5, CreatedAt: at(1)}, got); d != "" {
		t.Errorf("GetProject with explicit shares:%s", d)
	}
	got, err = s.GetProject(ctx, "audio")
	if err != nil {
		t.Fatalf("GetProject: %v", err)
	}
	if d := diff(domain.Project{Name: "audio", Shares: 1, CreatedAt: at(2)}, got); d != "" {
		t.Errorf("GetProject with default shares (want 1):%s", d)
	}
	// An update changes the shares and keeps CreatedAt.
	if err := s.PutProject(ctx, domain.Project{Name: "vision", Shares: 4, CreatedAt: at(9)}, setupAudit); err != nil {
		t.Fatalf("PutProject (update): %v", err)
	}
	ps, err := s.ListProjects(ctx)
	if err != nil {
		t.Fatalf("ListProjects: %v", err)
	}
	want := []domain.Project{{Name: "audio", Shares: 1, CreatedAt: at(2)}, {Name: "vision", Shares: 4, CreatedAt: at(1)}}
	if d := diff(want, ps); d != "" {
		t.Errorf("ListProjects:%s", d)
	}
}
