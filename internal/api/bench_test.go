package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/store/postgres"
)

// BenchmarkSubmit measures submits through the HTTP API on SQLite from 4
// concurrent clients (spec parsing, validation, store commit, JSON answer).
func BenchmarkSubmit(b *testing.B) { submitFrom(b, newEnv(b), 4) }

// BenchmarkSubmit64 is BenchmarkSubmit from 64 concurrent clients, where
// submits share the writer's transactions.
func BenchmarkSubmit64(b *testing.B) { submitFrom(b, newEnv(b), 64) }

// submitFrom submits b.N jobs from the given number of concurrent clients
// and reports jobs/s. Each client first submits one job untimed, so that
// the figure is the rate of submits on open connections: dialling the
// clients' connections and the store opening its own took about 0.15 s
// of a 4,000-job run on PostgreSQL, when submits ran at half their rate.
func submitFrom(b *testing.B, e *env, clients int) {
	spec, _ := json.Marshal("name: bench\nentrypoint: [python3, train.py]\nresources: {cpus: 1, memory: 1GiB}\nparams: {lr: '0.1'}\n")
	body, _ := json.Marshal(apitypes.SubmitRequest{Spec: spec})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients * 2}}
	submit := func() error {
		req, _ := http.NewRequest("POST", e.srv.URL+"/api/v1/jobs", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer "+e.token)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		// Read the answer, as a client does: a body left unread closes
		// the connection, and every submit would dial anew.
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != 201 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	var next atomic.Int64
	var warm, done sync.WaitGroup
	gate := make(chan struct{})
	for range clients {
		warm.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			err := submit()
			warm.Done()
			if err != nil {
				b.Error(err)
				return
			}
			<-gate
			for next.Add(1) <= int64(b.N) {
				if err := submit(); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	warm.Wait()
	start, cpu0 := time.Now(), cpuTime()
	b.ResetTimer()
	close(gate)
	done.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
	// The process's CPU time per job, client and server (and with SQLite
	// the store) together: what a submit costs, however loaded the machine.
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/job")
}

// cpuTime is the CPU time this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkShowAndList100k measures GET /api/v1/jobs/{id} and a 50-row page
// of GET /api/v1/jobs (all, and filtered by state, with a cursor) with
// 100,000 jobs stored, reporting the median of each.
func BenchmarkShowAndList100k(b *testing.B) {
	e := newEnv(b)
	const n = 100_000
	spec, _ := json.Marshal("name: seed\nentrypoint: [true]\n")
	body := apitypes.SubmitRequest{Spec: spec}
	eachOf(b, n, 8, func(int64) error {
		if code, _ := e.do("POST", "/api/v1/jobs", e.token, body); code != 201 {
			return fmt.Errorf("seed: status %d", code)
		}
		return nil
	})
	if c, _ := e.st.CountJobs(context.Background()); c["queued"] != n {
		b.Fatalf("seeded %d jobs", c["queued"])
	}
	paths := map[string]func(i int) string{
		"show":        func(i int) string { return fmt.Sprintf("/api/v1/jobs/%d", 1+i*7919%n) },
		"list":        func(i int) string { return "/api/v1/jobs?limit=50" },
		"list-cursor": func(i int) string { return fmt.Sprintf("/api/v1/jobs?limit=50&cursor=%d", 1000+i*7919%(n-1000)) },
		"list-state-cursor": func(i int) string {
			return fmt.Sprintf("/api/v1/jobs?state=queued&limit=50&cursor=%d", 1000+i*7919%(n-1000))
		},
	}
	lat := map[string][]float64{}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		for _, name := range []string{"show", "list", "list-cursor", "list-state-cursor"} {
			t0 := time.Now()
			if code, _ := e.do("GET", paths[name](i), e.token, nil); code != 200 {
				b.Fatalf("%s: status %d", name, code)
			}
			lat[name] = append(lat[name], float64(time.Since(t0).Microseconds())/1000)
		}
	}
	for name, xs := range lat {
		slices.Sort(xs)
		b.ReportMetric(xs[len(xs)/2], name+"-p50-ms")
	}
}

// BenchmarkSubmitPostgres is BenchmarkSubmit on a PostgreSQL store
// (TRAINYARD_TEST_POSTGRES; a fresh schema), from 4 and 64 clients.
func BenchmarkSubmitPostgres(b *testing.B) {
	dsn := os.Getenv("TRAINYARD_TEST_POSTGRES")
	if dsn == "" {
		b.Skip("TRAINYARD_TEST_POSTGRES is not set")
	}
	for _, clients := range []int{4, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			ctx := context.Background()
			schema := fmt.Sprintf("bench_api_%d_%d", clients, time.Now().UnixNano())
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
				b.Fatal(err)
			}
			defer conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
			sep := "?"
			if strings.Contains(dsn, "?") {
				sep = "&"
			}
			st, err := postgres.Open(ctx, dsn+sep+"search_path="+schema)
			if err != nil {
				b.Fatal(err)
			}
			e := newEnvOn(b, st)
			submitFrom(b, e, clients)
		})
	}
}
