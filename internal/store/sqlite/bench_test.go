package sqlite

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if seeded.s != nil {
		seeded.s.Close()
		os.RemoveAll(seeded.dir)
	}
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

// BenchmarkCreateJobParallel measures CreateJob throughput with 4 concurrent
// callers.
func BenchmarkCreateJobParallel(b *testing.B) {
	s := openTest(b)
	ctx := context.Background()
	specs := make([]store.NewJob, 16)
	for i := range specs {
		specs[i] = testNewJob(b, fmt.Sprintf("bench-%d", i))
	}
	const callers = 4
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((callers + procs - 1) / procs)
	var n atomic.Int64
	batches0, batched0 := s.batches.Load(), s.batched.Load()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			p := specs[i%int64(len(specs))]
			p.SubmittedAt = t0.Add(time.Duration(i))
			if _, _, err := s.CreateJob(ctx, p, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	if nb := s.batches.Load() - batches0; nb > 0 {
		b.ReportMetric(float64(s.batched.Load()-batched0)/float64(nb), "reqs/batch")
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

// BenchmarkApplyParallel measures guarded transitions (queued → held → queued)
// with 4 concurrent callers, each on its own jobs.
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

// seeded is a store holding 100,000 jobs, shared by the read benchmarks.
var seeded struct {
	once sync.Once
	dir  string
	s    *Store
	err  error
}

const seedJobs = 100_000

// seedStates is the state mix of the seeded jobs: mostly finished, as in a
// store that has run for a while.
var seedStates = []struct {
	state domain.JobState
	per1k int
}{
	{domain.JobSucceeded, 700}, {domain.JobFailed, 100}, {domain.JobCanceled, 50},
	{domain.JobQueued, 100}, {domain.JobHeld, 20}, {domain.JobStarting, 5}, {domain.JobRunning, 25},
}

func seeded100k(b *testing.B) *Store {
	b.Helper()
	seeded.once.Do(func() {
		seeded.dir, seeded.err = os.MkdirTemp("", "trainyard-bench-")
		if seeded.err != nil {
			return
		}
		seeded.s, seeded.err = Open(context.Background(), filepath.Join(seeded.dir, "trainyard.db"))
		if seeded.err != nil {
			return
		}
		start := time.Now()
		seeded.err = bulkInsertJobs(seeded.s, seedJobs)
		b.Logf("seeded %d jobs in %v", seedJobs, time.Since(start).Round(time.Millisecond))
	})
	if seeded.err != nil {
		b.Fatalf("seed: %v", seeded.err)
	}
	return seeded.s
}

// bulkInsertJobs inserts n jobs in one transaction, bypassing CreateJob.
func bulkInsertJobs(s *Store, n int) error {
	p, err := jobInput("seed")
	if err != nil {
		return err
	}
	var cycle []domain.JobState
	for _, st := range seedStates {
		for range st.per1k {
			cycle = append(cycle, st.state)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(cycle), func(i, j int) { cycle[i], cycle[j] = cycle[j], cycle[i] })
	return s.write(context.Background(), func(w *writer) error {
		if _, err := w.exec(insertSnapshotSQL, p.SpecHash, p.SpecJSON); err != nil {
			return err
		}
		for i := range n {
			at := t0.Add(time.Duration(i) * time.Second).UnixNano()
			if _, err := w.exec(`INSERT INTO jobs (name, project, pool, state, reason, message, priority, submitter,
				submitted_at, updated_at, spec_hash, output_dir, idempotency_key)
				VALUES (?, ?, 'standard', ?, 'Submitted', '', 'normal', ?, ?, ?, ?, ?, '')`,
				fmt.Sprintf("job-%d", i), fmt.Sprintf("project-%d", i%20), cycle[i%len(cycle)],
				fmt.Sprintf("user-%d", i%50), at, at, p.SpecHash, fmt.Sprintf("/artifacts/%d", i)); err != nil {
				return err
			}
		}
		return nil
	})
}

func BenchmarkGetJob100k(b *testing.B) {
	s := seeded100k(b)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	var lat latencies
	b.ResetTimer()
	for range b.N {
		id := 1 + rng.Int64N(seedJobs)
		start := time.Now()
		if _, err := s.GetJob(ctx, id); err != nil {
			b.Fatalf("GetJob(%d): %v", id, err)
		}
		lat.add(time.Since(start))
	}
	b.StopTimer()
	lat.report(b)
}

func BenchmarkListJobs100k(b *testing.B) {
	s := seeded100k(b)
	ctx := context.Background()
	tests := map[string]func(rng *rand.Rand) store.JobFilter{
		"all": func(*rand.Rand) store.JobFilter { return store.JobFilter{Limit: 50} },
		"all-cursor": func(rng *rand.Rand) store.JobFilter {
			return store.JobFilter{Limit: 50, BeforeID: 1000 + rng.Int64N(seedJobs-1000)}
		},
		"state=queued": func(*rand.Rand) store.JobFilter {
			return store.JobFilter{Limit: 50, States: []domain.JobState{domain.JobQueued}}
		},
		"state=queued-cursor": func(rng *rand.Rand) store.JobFilter {
			return store.JobFilter{Limit: 50, States: []domain.JobState{domain.JobQueued}, BeforeID: 1000 + rng.Int64N(seedJobs-1000)}
		},
		"states=starting,running": func(*rand.Rand) store.JobFilter {
			return store.JobFilter{Limit: 50, States: []domain.JobState{domain.JobStarting, domain.JobRunning}}
		},
		"states=starting,running-cursor": func(rng *rand.Rand) store.JobFilter {
			return store.JobFilter{Limit: 50, States: []domain.JobState{domain.JobStarting, domain.JobRunning},
				BeforeID: 1000 + rng.Int64N(seedJobs-1000)}
		},
		"project": func(*rand.Rand) store.JobFilter { return store.JobFilter{Limit: 50, Project: "project-7"} },
		// What the control loop reads every cycle: every active job (13,000
		// of the 100,000 here).
		"active-unpaged": func(*rand.Rand) store.JobFilter {
			return store.JobFilter{States: []domain.JobState{domain.JobQueued, domain.JobStarting, domain.JobRunning}, Ascending: true}
		},
		"project+state": func(*rand.Rand) store.JobFilter {
			return store.JobFilter{Limit: 50, Project: "project-7", States: []domain.JobState{domain.JobQueued}}
		},
	}
	for _, name := range slices.Sorted(maps.Keys(tests)) {
		filter := tests[name]
		b.Run(name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(5, 6))
			var lat latencies
			b.ResetTimer()
			for range b.N {
				f := filter(rng)
				start := time.Now()
				jobs, err := s.ListJobs(ctx, f)
				if err != nil {
					b.Fatalf("ListJobs: %v", err)
				}
				lat.add(time.Since(start))
				if len(jobs) == 0 {
					b.Fatalf("ListJobs(%+v) returned nothing", f)
				}
			}
			b.StopTimer()
			lat.report(b)
		})
	}
}

func BenchmarkCountJobs100k(b *testing.B) {
	s := seeded100k(b)
	ctx := context.Background()
	for range b.N {
		if _, err := s.CountJobs(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
