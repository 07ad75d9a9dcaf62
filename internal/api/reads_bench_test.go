package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
)

// BenchmarkReadsVsHello compares the API's reads with a hello-world
// net/http server in the same process and the same window. It stores
// TRAINYARD_BENCH_JOBS jobs (default 100,000) in a SQLite store, in a pool
// with rates, each with an ended attempt and a running one (so every job
// shown or listed is priced, with 2 attempts and 5 transitions), then per
// round (-benchtime=5x gives 5) loads, one after the other for
// TRAINYARD_BENCH_PHASE each (default 1s), from 64 concurrent keep-alive
// connections:
//
//   - hello: GET / of a handler that writes "Hello, World!";
//   - show: GET /api/v1/jobs/{id} of a random job, every job having been
//     shown once before the rounds (the store's detail cache warm, as on
//     a server that has answered shows for a while; with
//     TRAINYARD_BENCH_COLD=1 it is not, and most shows miss it);
//   - list: GET /api/v1/jobs?limit=50 at a random cursor.
//
// It reports each one's requests per second over all rounds, show's and
// list's as a fraction of hello's, and the p50 and p99 latency of each
// (from every request of every round). The client runs in this process
// too, and costs the same per request whatever it asks. It also reports
// the CPU time of a request (the process's, client included) and the
// fractions of hello's rate those give (…/hello-cpu): on a busy machine
// the rates follow the share of the CPUs the process gets in each phase,
// the CPU times much less. It reports the share of shows the SQLite
// store's detail cache answered (detail-hit-%), the memory it held
// (detail-cache-MiB), the share of list pages it answered without reading
// their ids from the database (list-memory-only-%), and the size of a list answer (list-KiB: writing
// and reading that many bytes is itself a good share of a list's CPU). With TRAINYARD_BENCH_PROFILE=dir, it writes a
// CPU profile of each load of each round there (list-1.prof, …), which
// go tool pprof merges when given several.
func BenchmarkReadsVsHello(b *testing.B) {
	n := 100_000
	if v := os.Getenv("TRAINYARD_BENCH_JOBS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1000 {
			b.Fatalf("TRAINYARD_BENCH_JOBS=%q: want a number of jobs, 1000 or more", v)
		}
	}
	phase := time.Second
	if v := os.Getenv("TRAINYARD_BENCH_PHASE"); v != "" {
		var err error
		if phase, err = time.ParseDuration(v); err != nil || phase <= 0 {
			b.Fatalf("TRAINYARD_BENCH_PHASE=%q: want a duration such as 2s", v)
		}
	}
	const conns = 64
	e := newEnv(b)
	seedPricedJobs(b, e, n)

	hello := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "Hello, World!\n")
	}))
	b.Cleanup(hello.Close)
	auth := "Bearer " + e.token
	kinds := []struct {
		name string
		url  func(r *rand.Rand) string
	}{
		{"hello", func(*rand.Rand) string { return hello.URL + "/" }},
		{"show", func(r *rand.Rand) string { return e.srv.URL + "/api/v1/jobs/" + strconv.Itoa(1+r.IntN(n)) }},
		{"list", func(r *rand.Rand) string {
			return e.srv.URL + "/api/v1/jobs?limit=50&cursor=" + strconv.Itoa(51+r.IntN(n-50))
		}},
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}}
	b.Cleanup(client.CloseIdleConnections)
	// run loads kind k from conns connections for phase; it returns the
	// number of requests and each one's latency in ms.
	run := func(k int, seed uint64) (int, []float64) {
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			lat  []float64
			stop atomic.Bool
		)
		for c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, uint64(c)))
				var mine []float64
				for !stop.Load() {
					req, _ := http.NewRequest("GET", kinds[k].url(r), nil)
					if k > 0 {
						req.Header.Set("Authorization", auth)
					}
					t0 := time.Now()
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err != nil || resp.StatusCode != 200 {
						b.Errorf("%s: status %d, %v", kinds[k].name, resp.StatusCode, err)
						return
					}
					mine = append(mine, float64(time.Since(t0).Nanoseconds())/1e6)
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
		}
		time.Sleep(phase) // the length of the load, not a wait for state
		stop.Store(true)
		wg.Wait()
		return len(lat), lat
	}
	// Warm both servers' connections and caches before measuring.
	for k := range kinds {
		run(k, 0)
	}
	if os.Getenv("TRAINYARD_BENCH_COLD") == "" {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		showAll(b, e, n)
		runtime.GC()
		runtime.ReadMemStats(&m1)
		// The detail cache, mostly.
		b.Logf("showing every job once added %.1f MiB to the heap", float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/(1<<20))
	}
	sq, _ := e.st.(*sqlite.Store)
	var cache0 sqlite.DetailCacheStats
	if sq != nil {
		cache0 = sq.DetailCacheStats()
	}
	reqs := make([]int, len(kinds))
	took := make([]time.Duration, len(kinds))
	cpu := make([]time.Duration, len(kinds))
	lats := make([][]float64, len(kinds))
	b.ResetTimer()
	profiles := os.Getenv("TRAINYARD_BENCH_PROFILE")
	for round := uint64(1); b.Loop(); round++ {
		for k := range kinds {
			if profiles != "" {
				f, err := os.Create(filepath.Join(profiles, fmt.Sprintf("%s-%d.prof", kinds[k].name, round)))
				if err != nil {
					b.Fatal(err)
				}
				if err := pprof.StartCPUProfile(f); err != nil {
					b.Fatal(err)
				}
			}
			t0, c0 := time.Now(), cpuTime()
			count, lat := run(k, round)
			took[k] += time.Since(t0)
			cpu[k] += cpuTime() - c0
			if profiles != "" {
				pprof.StopCPUProfile()
			}
			reqs[k] += count
			lats[k] = append(lats[k], lat...)
		}
	}
	b.StopTimer()
	rate := make([]float64, len(kinds))
	cpuPer := make([]float64, len(kinds))
	for k, kind := range kinds {
		rate[k] = float64(reqs[k]) / took[k].Seconds()
		b.ReportMetric(rate[k], kind.name+"-req/s")
		cpuPer[k] = float64(cpu[k].Microseconds()) / float64(reqs[k])
		b.ReportMetric(cpuPer[k], kind.name+"-cpu-us/req")
		xs := lats[k]
		if len(xs) < 50 {
			b.Fatalf("%s: %d requests; want at least 50 latency samples (raise TRAINYARD_BENCH_PHASE)", kind.name, len(xs))
		}
		slices.Sort(xs)
		b.ReportMetric(xs[len(xs)/2], kind.name+"-p50-ms")
		b.ReportMetric(xs[len(xs)*99/100], kind.name+"-p99-ms")
	}
	if _, page := e.do("GET", "/api/v1/jobs?limit=50", e.token, nil); len(page) > 0 {
		b.ReportMetric(float64(len(page))/1024, "list-KiB")
	}
	if sq != nil {
		c := sq.DetailCacheStats()
		if reads := c.Hits + c.Misses - cache0.Hits - cache0.Misses; reads > 0 {
			b.ReportMetric(100*float64(c.Hits-cache0.Hits)/float64(reads), "detail-hit-%")
		}
		b.ReportMetric(float64(c.Bytes)/(1<<20), "detail-cache-MiB")
		b.ReportMetric(100*float64(c.CursorPages-cache0.CursorPages)/float64(max(reqs[2], 1)), "list-memory-only-%")
	}
	b.ReportMetric(rate[1]/rate[0], "show/hello")
	b.ReportMetric(rate[2]/rate[0], "list/hello")
	// The same fractions from the CPU time of a request (server and
	// client): what the rates come to when the process has the machine
	// to itself, and steadier than the rates on a shared one.
	b.ReportMetric(cpuPer[0]/cpuPer[1], "show/hello-cpu")
	b.ReportMetric(cpuPer[0]/cpuPer[2], "list/hello-cpu")
	b.ReportMetric(0, "ns/op") // one op is a round of three loads: meaningless
}

// showAll shows each of jobs 1…n once, from 32 connections.
func showAll(b *testing.B, e *env, n int) {
	eachOf(b, n, 32, func(id int64) error {
		if code, page := e.do("GET", fmt.Sprintf("/api/v1/jobs/%d", id), e.token, nil); code != 200 {
			return fmt.Errorf("show job %d: %d %s", id, code, page)
		}
		return nil
	})
}

// eachOf calls fn for each of 1…n from workers goroutines, and stops the
// benchmark at the first error.
func eachOf(b *testing.B, n, workers int, fn func(i int64) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				if err := fn(i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}

// seedPricedJobs stores n jobs through the API in e's pool "default",
// given rates first, and gives each an attempt that ran an hour and was
// preempted and a second one that runs.
func seedPricedJobs(b *testing.B, e *env, n int) {
	b.Helper()
	ctx := context.Background()
	pool, err := e.st.GetPool(ctx, "default")
	if err != nil {
		b.Fatal(err)
	}
	pool.Rates = domain.Rates{CPUHour: 40_000, MemoryGiBHour: 5_000}
	if _, err := e.st.PutPool(ctx, pool, domain.AuditRecord{Actor: "user:admin", Action: "pool.write", Target: "pool/default", Result: domain.AuditOK}); err != nil {
		b.Fatal(err)
	}
	spec, _ := json.Marshal("name: seed\nentrypoint: [python3, train.py]\nresources: {cpus: 1, memory: 1GiB}\nparams: {lr: '0.1'}\n")
	body := apitypes.SubmitRequest{Spec: spec}
	eachOf(b, n, 32, func(int64) error {
		if code, page := e.do("POST", "/api/v1/jobs", e.token, body); code != 201 {
			return fmt.Errorf("seed: status %d: %s", code, page)
		}
		return nil
	})
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for lo := int64(1); lo <= int64(n); lo += 1000 {
		var changes []store.Change
		for id := lo; id < lo+1000 && id <= int64(n); id++ {
			at := t0.Add(time.Duration(id) * time.Second)
			for num, end := range []time.Duration{time.Hour, 0} {
				changes = append(changes,
					store.Change{JobID: id, Move: domain.MoveStart(), At: at, Actor: "control",
						Attempt: &store.AttemptChange{Number: num + 1, Create: true, To: domain.AttemptStarting, Node: "n1"}},
					store.Change{JobID: id, Move: domain.MoveRun(), At: at, Actor: "control",
						Attempt: &store.AttemptChange{Number: num + 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}})
				if end > 0 {
					changes = append(changes, store.Change{JobID: id, Move: domain.MoveRequeue().Only(domain.JobRunning), At: at.Add(end),
						Reason: domain.ReasonPreempted, Message: "preempted by a higher-priority job", Actor: "control",
						Attempt: &store.AttemptChange{Number: num + 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptPreempted}})
				}
				at = at.Add(end)
			}
		}
		errs, err := e.st.Apply(ctx, changes)
		if err != nil {
			b.Fatal(err)
		}
		for i, err := range errs {
			if err != nil {
				b.Fatalf("seed attempts: change %d: %v", i, err)
			}
		}
	}
	if code, page := e.do("GET", fmt.Sprintf("/api/v1/jobs/%d", n), e.token, nil); code != 200 {
		b.Fatalf("show job %d: %d %s", n, code, page)
	}
}
