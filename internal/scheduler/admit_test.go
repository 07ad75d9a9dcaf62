package scheduler_test

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/scheduler"
	. "trainyard/internal/scheduler/schedtest"
)

func TestAdmit(t *testing.T) {
	pool := Pool(std).Nodes(2, 8).MaxGPUsPerJob(16).MaxNodesPerJob(2).MaxTimeout(24*time.Hour).Priorities(Low, Normal, High).Obj()
	quota := Quota("vision", std).GPUs(8).MaxPriority(High).Obj()
	spec := func(f func(*domain.Spec)) domain.Spec {
		s := domain.Spec{Project: "vision", Pool: std, Resources: domain.Resources{GPUs: 4, CPUs: 8, Memory: 32 << 30, Nodes: 1},
			Policy: domain.Policy{Timeout: domain.Duration(time.Hour), Priority: Normal, Preemptible: true}}
		f(&s)
		return s
	}
	cases := map[string]struct {
		pool     domain.Pool
		quota    *domain.Quota
		open     bool // no project has a quota in the pool
		spec     domain.Spec
		wantPath []string
		wantMsg  string
	}{
		"fits":                    {pool: pool, quota: &quota, spec: spec(func(*domain.Spec) {})},
		"too many GPUs per node":  {pool: pool, quota: &quota, spec: spec(func(s *domain.Spec) { s.Resources.GPUs = 12 }), wantPath: []string{"resources.gpus", "resources.gpus"}, wantMsg: "largest node in pool standard has 8"},
		"gang above per-job GPUs": {pool: pool, quota: &quota, spec: spec(func(s *domain.Spec) { s.Resources.GPUs, s.Resources.Nodes = 8, 3 }), wantPath: []string{"resources.gpus", "resources.nodes", "resources.nodes", "resources.gpus"}, wantMsg: "accepts at most 16 per job"},
		"priority not accepted":   {pool: pool, quota: &quota, spec: spec(func(s *domain.Spec) { s.Policy.Priority = Urgent }), wantPath: []string{"policy.priority"}, wantMsg: "does not accept priority urgent"},
		"priority above quota":    {pool: Pool(std).Nodes(1, 8).Obj(), quota: &quota, spec: spec(func(s *domain.Spec) { s.Policy.Priority = Urgent }), wantPath: []string{"policy.priority"}, wantMsg: "at most high"},
		"timeout missing":         {pool: pool, quota: &quota, spec: spec(func(s *domain.Spec) { s.Policy.Timeout = 0 }), wantPath: []string{"policy.timeout"}, wantMsg: "requires a timeout of at most 24h"},
		"timeout too long":        {pool: pool, quota: &quota, spec: spec(func(s *domain.Spec) { s.Policy.Timeout = domain.Duration(48 * time.Hour) }), wantPath: []string{"policy.timeout"}, wantMsg: "above the 24h"},
		"no quota, no borrowing":  {pool: pool, spec: spec(func(*domain.Spec) {}), wantPath: []string{"pool"}, wantMsg: "ask an admin for a quota"},
		"no quota, borrowing":     {pool: Pool(std).Nodes(2, 8).Borrowing().Obj(), spec: spec(func(*domain.Spec) {})},
		"not preemptible above guarantee": {pool: Pool(std).Nodes(2, 8).Borrowing().Obj(), quota: func() *domain.Quota { q := Quota("vision", std).GPUs(2).Borrow(8).Obj(); return &q }(),
			spec: spec(func(s *domain.Spec) { s.Policy.Preemptible = false }), wantPath: []string{"policy.preemptible"}, wantMsg: "set policy.preemptible: true"},
		"above quota ceiling": {pool: pool, quota: &quota, spec: spec(func(s *domain.Spec) { s.Resources.GPUs, s.Resources.Nodes = 8, 2 }), wantPath: []string{"resources.gpus"}, wantMsg: "may use at most 8 in pool standard (quota)"},
		// An open pool (a fresh install's default, until an admin sets
		// quotas): any project runs ordinary jobs, at any priority.
		"open pool, plain job": {pool: Pool(std).Nodes(2, 8).Obj(), open: true, spec: spec(func(s *domain.Spec) {
			s.Policy.Preemptible, s.Policy.Priority, s.Resources.GPUs = false, Urgent, 8
		})},
		// A job larger than an open pool's nodes is told so once, not
		// again as a quota the pool does not have.
		"open pool, too many GPUs": {pool: Pool(std).Nodes(1, 1).Obj(), open: true, spec: spec(func(s *domain.Spec) { s.Resources.GPUs = 2 }),
			wantPath: []string{"resources.gpus"}, wantMsg: "the largest node in pool standard has 1"},
		"empty pool": {pool: Pool(std).Obj(), spec: spec(func(*domain.Spec) {}), wantPath: []string{"pool"}, wantMsg: "has no nodes"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			errs := scheduler.Admit(tc.pool, tc.quota, tc.open, tc.spec)
			var paths []string
			for _, e := range errs {
				paths = append(paths, e.Path)
			}
			if strings.Join(paths, ",") != strings.Join(tc.wantPath, ",") {
				t.Fatalf("paths %v, want %v: %v", paths, tc.wantPath, errs)
			}
			if tc.wantMsg != "" && !strings.Contains(errs.Error(), tc.wantMsg) {
				t.Errorf("errors %q do not mention %q", errs.Error(), tc.wantMsg)
			}
		})
	}
}

func TestDecayUsage(t *testing.T) {
	now := T0.Add(48 * time.Hour)
	got := scheduler.DecayUsage([]scheduler.UsageRecord{
		{Project: "b", Pool: std, Rate: 1, Start: now.Add(-time.Hour), End: now}, // ∫ over the last hour
		{Project: "a", Pool: std, Rate: 2, Start: now.Add(-48 * time.Hour), End: now.Add(-24 * time.Hour)},
		{Project: "a", Pool: std, Rate: 1, Start: now.Add(-time.Hour)},                             // still running
		{Project: "c", Pool: std, Rate: 1, Start: now.Add(time.Hour), End: now.Add(2 * time.Hour)}, // future: ignored
	}, now, 24*time.Hour)
	lambda := math.Ln2 / 24
	lastHour := (1 - math.Exp(-lambda)) / lambda
	dayBefore := 2 * (math.Exp(-lambda*24) - math.Exp(-lambda*48)) / lambda
	want := []scheduler.Usage{{Project: "a", Pool: std, Value: dayBefore + lastHour}, {Project: "b", Pool: std, Value: lastHour}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Project != want[i].Project || math.Abs(got[i].Value-want[i].Value) > 1e-9 {
			t.Errorf("usage %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestCostRate(t *testing.T) {
	pool := Pool(std).Nodes(2, 8).Obj() // 16 GPUs, 128 CPUs, 1TiB
	cases := map[string]struct {
		r    domain.Resources
		want float64
	}{
		"GPUs dominate":   {domain.Resources{GPUs: 4, CPUs: 8, Memory: 32 << 30, Nodes: 1}, 0.25},
		"gang counts all": {domain.Resources{GPUs: 8, Nodes: 2}, 1},
		"CPUs dominate":   {domain.Resources{CPUs: 64, Nodes: 1}, 0.5},
		"nothing":         {domain.Resources{}, 0},
	}
	for name, tc := range cases {
		if got := scheduler.CostRate(pool, tc.r); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: CostRate = %v, want %v", name, got, tc.want)
		}
	}
}

// TestAllocationEqualSeesEveryField changes each field of an allocation in
// turn: Equal must notice every one (a field added later included).
func TestAllocationEqualSeesEveryField(t *testing.T) {
	base := Job(7).Pool("p").Project("a").GPUs(2).Priority(High).Timeout(time.Hour).Preemptible().
		Running(T0, On("n0", 0, 1))
	if !base.Equal(&base) {
		t.Fatal("an allocation differs from itself")
	}
	typ := reflect.TypeOf(base)
	for i := range typ.NumField() {
		other := base
		other.Nodes = []scheduler.NodeAlloc{{Node: "n0", GPUs: []int{0, 1}}}
		f := reflect.ValueOf(&other).Elem().Field(i)
		switch f.Interface().(type) {
		case int64:
			f.SetInt(f.Int() + 1)
		case string, domain.Priority:
			f.SetString(f.String() + "x")
		case domain.Resources:
			f.Set(reflect.ValueOf(domain.Resources{GPUs: 99}))
		case []scheduler.NodeAlloc:
			other.Nodes[0].GPUs = []int{0, 2}
		case time.Time:
			f.Set(reflect.ValueOf(T0.Add(time.Second)))
		case time.Duration:
			f.SetInt(f.Int() + 1)
		case bool:
			f.SetBool(!f.Bool())
		default:
			t.Fatalf("field %s has a type this test does not change; extend it", typ.Field(i).Name)
		}
		if base.Equal(&other) {
			t.Errorf("Equal misses a change of %s", typ.Field(i).Name)
		}
	}
}
