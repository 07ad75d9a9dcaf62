package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// BenchmarkListPriced100k measures a 50-row page of GET /api/v1/jobs
// (the newest, and one further back by cursor) with 100,000 jobs stored
// in a pool with rates, each with a finished attempt and a running one,
// so that every listed job is priced; it reports the median of each.
func BenchmarkListPriced100k(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	const n = 100_000
	pool, err := e.st.GetPool(ctx, "default")
	if err != nil {
		b.Fatal(err)
	}
	pool.Rates = domain.Rates{CPUHour: 40_000, MemoryGiBHour: 5_000}
	if _, err := e.st.PutPool(ctx, pool, domain.AuditRecord{Actor: "user:admin", Action: "pool.write", Target: "pool/default", Result: domain.AuditOK}); err != nil {
		b.Fatal(err)
	}
	spec, _ := json.Marshal("name: seed\nentrypoint: [true]\n")
	body := apitypes.SubmitRequest{Spec: spec}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= n {
				if code, _ := e.do("POST", "/api/v1/jobs", e.token, body); code != 201 {
					b.Errorf("seed: status %d", code)
					return
				}
			}
		}()
	}
	wg.Wait()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for lo := int64(1); lo <= n; lo += 1000 {
		var changes []store.Change
		for id := lo; id < lo+1000 && id <= n; id++ {
			at := t0.Add(time.Duration(id) * time.Second)
			for num, end := range []time.Duration{time.Hour, 0} {
				changes = append(changes,
					store.Change{JobID: id, Move: domain.MoveStart(), At: at,
						Attempt: &store.AttemptChange{Number: num + 1, Create: true, To: domain.AttemptStarting, Node: "n1"}},
					store.Change{JobID: id, Move: domain.MoveRun(), At: at,
						Attempt: &store.AttemptChange{Number: num + 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}})
				if end > 0 {
					changes = append(changes, store.Change{JobID: id, Move: domain.MoveRequeue().Only(domain.JobRunning), At: at.Add(end),
						Attempt: &store.AttemptChange{Number: num + 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptPreempted}})
				}
				at = at.Add(end)
			}
		}
		if _, err := e.st.Apply(ctx, changes); err != nil {
			b.Fatal(err)
		}
	}
	code, page := e.do("GET", "/api/v1/jobs?limit=1", e.token, nil)
	b.Logf("newest job: %d %s", code, page)
	paths := map[string]func(i int) string{
		"list":        func(i int) string { return "/api/v1/jobs?limit=50" },
		"list-cursor": func(i int) string { return fmt.Sprintf("/api/v1/jobs?limit=50&cursor=%d", 1000+i*7919%(n-1000)) },
	}
	lat := map[string][]float64{}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		for _, name := range []string{"list", "list-cursor"} {
			start := time.Now()
			if code, _ := e.do("GET", paths[name](i), e.token, nil); code != 200 {
				b.Fatalf("%s: status %d", name, code)
			}
			lat[name] = append(lat[name], float64(time.Since(start).Microseconds())/1000)
		}
	}
	for name, xs := range lat {
		slices.Sort(xs)
		b.ReportMetric(xs[len(xs)/2], name+"-p50-ms")
	}
}
