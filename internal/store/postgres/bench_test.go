package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"trainyard/internal/store/postgres/pgtest"

	"github.com/jackc/pgx/v5"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

func TestMain(m *testing.M) {
	code := m.Run()
	seeded.drop()
	os.Exit(code)
}

// latencies records per-operation durations and reports their median and
// 99th percentile as benchmark metrics.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B) {
	if len(l.d) == 0 {
		return
	}
	slices.Sort(l.d)
	b.ReportMetric(float64(l.d[len(l.d)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(l.d[len(l.d)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// BenchmarkCreateJobParallel measures CreateJob throughput with 4 and 64
// concurrent callers, each submit carrying one audit record as the service
// attaches.
func BenchmarkCreateJobParallel(b *testing.B) {
	for _, callers := range []int{4, 64} {
		b.Run(fmt.Sprintf("clients=%d", callers), func(b *testing.B) {
			s := openTest(b)
			specs := make([]store.NewJob, 16)
			for i := range specs {
				specs[i] = testNewJob(b, fmt.Sprintf("bench-%d", i))
			}
			ctx := context.Background()
			submit := domain.AuditRecord{
				Actor: "user:alice", Action: "job.submit", Target: "job/" + store.AuditIDPlaceholder, Result: domain.AuditOK}
			procs := runtime.GOMAXPROCS(0)
			b.SetParallelism((callers + procs - 1) / procs)
			var n atomic.Int64
			var lat latencies
			batches0, batched0 := s.batches.Load(), s.batched.Load()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					p := specs[i%int64(len(specs))]
					p.SubmittedAt = t0.Add(time.Duration(i))
					start := time.Now()
					if _, _, err := s.CreateJob(ctx, p, submit); err != nil {
						b.Error(err)
						return
					}
					lat.add(time.Since(start))
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			if nb := s.batches.Load() - batches0; nb > 0 {
				b.ReportMetric(float64(s.batched.Load()-batched0)/float64(nb), "reqs/batch")
			}
			lat.report(b)
		})
	}
}

// BenchmarkCreateJobSerial measures CreateJob latency with one caller (no
// batching possible).
func BenchmarkCreateJobSerial(b *testing.B) {
	s := openTest(b)
	ctx := context.Background()
	p := testNewJob(b, "bench")
	var lat latencies
	b.ResetTimer()
	for i := range b.N {
		p.SubmittedAt = t0.Add(time.Duration(i))
		start := time.Now()
		if _, _, err := s.CreateJob(ctx, p, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); err != nil {
			b.Fatal(err)
		}
		lat.add(time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	lat.report(b)
}

// BenchmarkApplyParallel measures guarded transitions (queued → held →
// queued) with 4 concurrent callers, each on its own jobs.
func BenchmarkApplyParallel(b *testing.B) {
	s := openTest(b)
	ctx := context.Background()
	const callers = 4
	var ids []int64
	for i := range callers * 64 {
		j, _, err := s.CreateJob(ctx, testNewJob(b, fmt.Sprintf("apply-%d", i)), domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK})
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((callers + procs - 1) / procs)
	var worker atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := int(worker.Add(1)-1) % callers
		mine := ids[w*64 : (w+1)*64]
		held := make([]bool, len(mine))
		for i := 0; pb.Next(); i++ {
			k := i % len(mine)
			mv := domain.MoveHold()
			if held[k] {
				mv = domain.MoveRelease()
			}
			errs, err := s.Apply(ctx, []store.Change{{JobID: mine[k], Move: mv, At: t0}})
			if err != nil || errs[0] != nil {
				b.Errorf("Apply: %v %v", err, errs)
				return
			}
			held[k] = !held[k]
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "changes/s")
}

// seeded is a store holding 100,000 pending jobs (and 50,000 finished
// ones), shared by the read benchmarks; TestMain drops its schema.
var seeded seedStore

type seedStore struct {
	once   sync.Once
	dsn    string // the base DSN
	schema string
	s      *Store
	err    error
}

const (
	seedPending  = 100_000
	seedFinished = 50_000
)

func (sd *seedStore) drop() {
	if sd.s == nil {
		return
	}
	sd.s.Close()
	ctx := context.Background()
	if conn, err := pgx.Connect(ctx, sd.dsn); err == nil {
		_, _ = conn.Exec(ctx, "DROP SCHEMA "+sd.schema+" CASCADE")
		conn.Close(ctx)
	}
}

func seeded150k(b *testing.B) *Store {
	b.Helper()
	dsn := testDSN(b)
	seeded.once.Do(func() {
		ctx := context.Background()
		var r [8]byte
		_, _ = rand.Read(r[:])
		seeded.dsn, seeded.schema = dsn, "bench_"+hex.EncodeToString(r[:])
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			seeded.err = err
			return
		}
		_, seeded.err = conn.Exec(ctx, "CREATE SCHEMA "+seeded.schema)
		conn.Close(ctx)
		if seeded.err != nil {
			return
		}
		if seeded.s, seeded.err = Open(ctx, pgtest.WithSearchPath(dsn, seeded.schema)); seeded.err != nil {
			return
		}
		start := time.Now()
		seeded.err = bulkInsertJobs(seeded.s)
		b.Logf("seeded %d pending and %d finished jobs in %v", seedPending, seedFinished, time.Since(start).Round(time.Millisecond))
	})
	if seeded.err != nil {
		b.Fatalf("seed: %v", seeded.err)
	}
	return seeded.s
}

// bulkInsertJobs copies the seed jobs in, bypassing CreateJob: pending ones
// mostly queued (some starting and running), interleaved with finished ones.
func bulkInsertJobs(s *Store) error {
	ctx := context.Background()
	p, err := jobInput("seed")
	if err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, insertSnapshotSQL, p.SpecHash, string(p.SpecJSON)); err != nil {
		return err
	}
	total := seedPending + seedFinished
	rows := make([][]any, 0, total)
	pending := 0
	for i := range total {
		var state domain.JobState
		switch {
		case i%3 == 2 && i/3 < seedFinished:
			state = domain.JobSucceeded
		case pending%20 == 0:
			state, pending = domain.JobRunning, pending+1
		case pending%20 == 1:
			state, pending = domain.JobStarting, pending+1
		default:
			state, pending = domain.JobQueued, pending+1
		}
		at := t0.Add(time.Duration(i) * time.Second).UnixNano()
		rows = append(rows, []any{int64(i + 1), fmt.Sprintf("job-%d", i), fmt.Sprintf("project-%d", i%20), "standard",
			string(state), "Submitted", "normal", fmt.Sprintf("user-%d", i%50), at, at, p.SpecHash,
			fmt.Sprintf("/artifacts/%d", i), int64(1), 4.0, int64(16 << 30), int64(1)})
	}
	_, err = s.pool.CopyFrom(ctx, pgx.Identifier{"jobs"}, []string{"id", "name", "project", "pool", "state", "reason", "priority",
		"submitter", "submitted_at", "updated_at", "spec_hash", "output_dir", "req_gpus", "req_cpus", "req_memory", "req_nodes"},
		pgx.CopyFromRows(rows))
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `SELECT setval('jobs_id_seq', (SELECT MAX(id) FROM jobs)); ANALYZE jobs`)
	return err
}

// BenchmarkSnapshotLoad100k measures what the control loop reads each round:
// every queued, starting and running job in submit order, out of 150,000.
func BenchmarkSnapshotLoad100k(b *testing.B) {
	s := seeded150k(b)
	ctx := context.Background()
	f := store.JobFilter{States: []domain.JobState{domain.JobQueued, domain.JobStarting, domain.JobRunning}, Ascending: true}
	var lat latencies
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		jobs, err := s.ListJobs(ctx, f)
		if err != nil {
			b.Fatalf("ListJobs: %v", err)
		}
		lat.add(time.Since(start))
		if len(jobs) != seedPending {
			b.Fatalf("ListJobs returned %d jobs, want %d", len(jobs), seedPending)
		}
	}
	b.StopTimer()
	lat.report(b)
}

func BenchmarkListJobsPage(b *testing.B) {
	s := seeded150k(b)
	ctx := context.Background()
	filters := map[string]store.JobFilter{
		"all":                     {Limit: 50},
		"state=queued":            {Limit: 50, States: []domain.JobState{domain.JobQueued}},
		"states=starting,running": {Limit: 50, States: []domain.JobState{domain.JobStarting, domain.JobRunning}},
		"project+state":           {Limit: 50, Project: "project-7", States: []domain.JobState{domain.JobQueued}},
	}
	for _, name := range []string{"all", "state=queued", "states=starting,running", "project+state"} {
		f := filters[name]
		b.Run(name, func(b *testing.B) {
			var lat latencies
			for range b.N {
				start := time.Now()
				jobs, err := s.ListJobs(ctx, f)
				if err != nil || len(jobs) == 0 {
					b.Fatalf("ListJobs(%+v) = %d jobs, %v", f, len(jobs), err)
				}
				lat.add(time.Since(start))
			}
			lat.report(b)
		})
	}
}

func BenchmarkGetJob(b *testing.B) {
	s := seeded150k(b)
	ctx := context.Background()
	var lat latencies
	for i := range b.N {
		id := int64(1 + (i*7919)%(seedPending+seedFinished))
		start := time.Now()
		if _, err := s.GetJob(ctx, id); err != nil {
			b.Fatalf("GetJob(%d): %v", id, err)
		}
		lat.add(time.Since(start))
	}
	lat.report(b)
}
