package api_test

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkListPriced100k measures a 50-row page of GET /api/v1/jobs
// (the newest, and one further back by cursor) with 100,000 jobs stored
// in a pool with rates, each with a finished attempt and a running one,
// so that every listed job is priced; it reports the median of each.
func BenchmarkListPriced100k(b *testing.B) {
	e := newEnv(b)
	const n = 100_000
	seedPricedJobs(b, e, n)
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
