package storetest

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// BenchOptions tells Benchmark what it cannot learn through store.Store.
// The zero value works for any backend, only slower to set up and with
// fewer metrics.
type BenchOptions struct {
	// InProcess says the store does its work in this process (SQLite):
	// the spend and report benchmarks then report its CPU time per query,
	// which load on the machine changes less than latency.
	InProcess bool
	// Seed, when set, writes jobs into the empty store s in bulk, straight
	// into their tables, so that the read benchmarks' stores of 100,000 and
	// 150,000 jobs take seconds to fill. Every job is submitted as spec
	// (one shared snapshot, pool, priority and resources) with the fields
	// SeedJob gives it, and jobs[i] must get id i+1. Seed reports its own
	// failures on b. Without Seed, Benchmark fills the stores through
	// CreateJob and Apply, which writes events too and takes minutes.
	Seed func(b *testing.B, s store.Store, spec store.NewJob, jobs []SeedJob)
	// Batches, when set, returns how many write batches the store has
	// committed and how many requests they carried, so the CreateJob
	// benchmarks report reqs/batch: how well concurrent submits share a
	// transaction, which their throughput depends on.
	Batches func(s store.Store) (batches, requests int64)
	// SeedAttempts, when set, writes attempts straight into the attempts
	// table of a store Seed filled: n attempts, perJob to each of jobs
	// 1, 2, …, attempt i (from 0) of job i/perJob+1 numbered i%perJob+1,
	// started at from + i×step and ended held later, failed when i%10 is
	// 0 and succeeded otherwise. Without it the spend benchmark is skipped.
	SeedAttempts func(b *testing.B, s store.Store, n, perJob int, from time.Time, step, held time.Duration)
}

// SeedJob is one job for BenchOptions.Seed to write: already in State,
// with reason Submitted, submitted and last updated at SubmittedAt, and no
// events, attempts or audit records.
type SeedJob struct {
	Name, Project, Submitter, OutputDir string
	State                               domain.JobState
	SubmittedAt                         time.Time
}

// Benchmark runs the store benchmarks against the backend open builds, so
// that every backend is measured on the same workloads and their figures
// compare. Like Exercise's newStore, open must return a fresh, empty store
// for each call and close it when the b it is given ends.
//
// The write benchmarks open a store of their own for each run. The read
// benchmarks share a seeded store, which a sub-benchmark named after it
// opens and fills (Jobs100k, Live100k): it is then seeded only when one of
// its benchmarks is selected, once, and closed after the last of them.
// There are two because reads cost what the states of the jobs make them
// cost: pages of a store of mostly finished jobs, which the API and UI
// read, and the live jobs of a deep backlog, which the control loop loads.
func Benchmark(b *testing.B, open func(b *testing.B) store.Store, opts BenchOptions) {
	b.Run("CreateJobParallel", func(b *testing.B) {
		for _, clients := range []int{4, 64} {
			b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
				benchCreateJobParallel(b, open(b), clients, opts.Batches)
			})
		}
	})
	b.Run("CreateJobSerial", func(b *testing.B) { benchCreateJobSerial(b, open(b)) })
	b.Run("ApplyParallel", func(b *testing.B) { benchApplyParallel(b, open(b)) })
	// A store that has run for a while: 100,000 jobs, most finished.
	b.Run("Jobs100k", func(b *testing.B) {
		s, ids := seedStore(b, open, opts.Seed, historyJobs())
		b.Run("GetJob", func(b *testing.B) { benchGetJob(b, s, ids) })
		b.Run("ListJobs", func(b *testing.B) { benchListJobs(b, s, historyFilters(ids)) })
		b.Run("CountJobs", func(b *testing.B) { benchCountJobs(b, s) })
	})
	// Spend reports over a busy month: 1,000,000 attempts of 100,000 jobs
	// over 40 days, summed over the last 30.
	b.Run("Attempts1M", func(b *testing.B) {
		if opts.Seed == nil || opts.SeedAttempts == nil {
			b.Skip("needs BenchOptions.Seed and SeedAttempts")
		}
		s, _ := seedStore(b, open, opts.Seed, historyJobs())
		start := time.Now()
		opts.SeedAttempts(b, s, spendAttempts, spendAttempts/len(historyJobs()), spendNow.Add(-40*24*time.Hour),
			40*24*time.Hour/spendAttempts, 50*time.Minute)
		b.Logf("seeded %d attempts in %s", spendAttempts, time.Since(start).Round(time.Millisecond))
		for _, by := range []string{"project", "user", "job"} {
			b.Run("SpendTotals/by="+by, func(b *testing.B) { benchSpendTotals(b, s, by, 0, opts.InProcess) })
		}
		// Rates changed once, or 4 times, in the window: pieces summed apart.
		for _, n := range []int{1, 4} {
			b.Run(fmt.Sprintf("SpendTotals/by=project/splits=%d", n), func(b *testing.B) { benchSpendTotals(b, s, "project", n, opts.InProcess) })
		}
		for _, by := range []string{"project", "pool"} {
			b.Run("ReportTotals/by="+by, func(b *testing.B) { benchReportTotals(b, s, by, opts.InProcess) })
		}
	})
	// A deep backlog: 100,000 live jobs (mostly queued) among 150,000.
	b.Run("Live100k", func(b *testing.B) {
		s, _ := seedStore(b, open, opts.Seed, backlogJobs())
		b.Run("SnapshotLoad", func(b *testing.B) { benchSnapshotLoad(b, s, backlogLive, opts.InProcess) })
		b.Run("LiveJobRevs", func(b *testing.B) { benchLiveJobRevs(b, s, backlogLive, opts.InProcess) })
		b.Run("ListJobs", func(b *testing.B) { benchListJobs(b, s, backlogFilters()) })
	})
}

// latencies records per-operation durations and reports their median and
// 99th percentile: a mean hides the tail that batching and lock waits add.
type latencies struct {
	mu  sync.Mutex
	d   []time.Duration
	cpu time.Duration // CPU time of the process over the samples, where measured
}

// cpuTime is the CPU time this process used so far: with an embedded
// store, the cost of a query however loaded the machine is.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
	if l.cpu > 0 {
		b.ReportMetric(float64(l.cpu.Milliseconds())/float64(len(l.d)), "cpu-ms/op")
	}
	slices.Sort(l.d)
	b.ReportMetric(float64(l.d[len(l.d)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(l.d[len(l.d)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// benchJob is the CreateJob input of a small spec named name: the cost
// measured is the store's, not that of encoding a large spec.
func benchJob(b *testing.B, name string, res domain.Resources) store.NewJob {
	b.Helper()
	spec := domain.Spec{Name: name, Project: "p", Pool: "standard", Entrypoint: []string{"python", "train.py"},
		Resources: res, Policy: domain.Policy{Priority: domain.PriorityNormal}}
	js, err := json.Marshal(spec)
	if err != nil {
		b.Fatalf("marshal spec: %v", err)
	}
	sum := sha256.Sum256(js)
	return store.NewJob{
		Spec: spec, SpecJSON: js, SpecHash: "sha256:" + hex.EncodeToString(sum[:]),
		Submitter: "alice", SubmittedAt: t0, Actor: "user:alice",
		OutputDir: func(id int64) string { return fmt.Sprintf("/artifacts/p/%s/%d", name, id) },
	}
}

// benchAudit is the audit record of the jobs and changes the benchmarks
// set up.
var benchAudit = domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}

// parallelism sets b's RunParallel to about clients goroutines in all (a
// multiple of GOMAXPROCS, at least clients).
func parallelism(b *testing.B, clients int) {
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((clients + procs - 1) / procs)
}

// benchCreateJobParallel measures CreateJob throughput and latency with
// clients concurrent callers, each submit carrying one audit record as the
// service attaches.
func benchCreateJobParallel(b *testing.B, s store.Store, clients int, batches func(store.Store) (int64, int64)) {
	specs := make([]store.NewJob, 16)
	for i := range specs {
		specs[i] = benchJob(b, fmt.Sprintf("bench-%d", i), domain.Resources{})
	}
	ctx := context.Background()
	submit := domain.AuditRecord{
		Actor: "user:alice", Action: "job.submit", Target: "job/" + store.AuditIDPlaceholder, Result: domain.AuditOK}
	parallelism(b, clients)
	var n atomic.Int64
	var lat latencies
	var batches0, batched0 int64
	if batches != nil {
		batches0, batched0 = batches(s)
	}
	cpu0 := cpuTime()
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
	// The process's CPU time per job: what a submit costs here (with
	// PostgreSQL, without the server's share), however loaded the machine.
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/job")
	if batches != nil {
		nb, nr := batches(s)
		if nb > batches0 {
			b.ReportMetric(float64(nr-batched0)/float64(nb-batches0), "reqs/batch")
		}
	}
	lat.report(b)
}

// benchCreateJobSerial measures CreateJob latency with one caller, which
// leaves a batching writer nothing to batch.
func benchCreateJobSerial(b *testing.B, s store.Store) {
	ctx := context.Background()
	p := benchJob(b, "bench", domain.Resources{})
	var lat latencies
	b.ResetTimer()
	for i := range b.N {
		p.SubmittedAt = t0.Add(time.Duration(i))
		start := time.Now()
		if _, _, err := s.CreateJob(ctx, p, benchAudit); err != nil {
			b.Fatal(err)
		}
		lat.add(time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	lat.report(b)
}

// benchApplyParallel measures guarded transitions (queued → held → queued)
// with 4 concurrent callers, each on its own 64 jobs, so the changes never
// conflict and what is measured is the write path.
func benchApplyParallel(b *testing.B, s store.Store) {
	ctx := context.Background()
	const callers, perCaller = 4, 64
	var ids []int64
	for i := range callers * perCaller {
		j, _, err := s.CreateJob(ctx, benchJob(b, fmt.Sprintf("apply-%d", i), domain.Resources{}), benchAudit)
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	parallelism(b, callers)
	var worker atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := int(worker.Add(1)-1) % callers
		mine := ids[w*perCaller : (w+1)*perCaller]
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

// seedJob is the i-th job of a seeded store: 20 projects and 50
// submitters in turn, one second apart.
func seedJob(i int, state domain.JobState) SeedJob {
	return SeedJob{
		Name: fmt.Sprintf("job-%d", i), Project: fmt.Sprintf("project-%d", i%20), Submitter: fmt.Sprintf("user-%d", i%50),
		OutputDir: fmt.Sprintf("/artifacts/%d", i), State: state, SubmittedAt: t0.Add(time.Duration(i) * time.Second),
	}
}

// historyMix is the state mix of Jobs100k, per thousand jobs: mostly
// finished, as in a store that has run for a while.
var historyMix = []struct {
	state domain.JobState
	per1k int
}{
	{domain.JobSucceeded, 700}, {domain.JobFailed, 100}, {domain.JobCanceled, 50},
	{domain.JobQueued, 100}, {domain.JobHeld, 20}, {domain.JobStarting, 5}, {domain.JobRunning, 25},
}

// historyJobs returns the 100,000 jobs of Jobs100k, the mix shuffled.
func historyJobs() []SeedJob {
	var cycle []domain.JobState
	for _, st := range historyMix {
		for range st.per1k {
			cycle = append(cycle, st.state)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(cycle), func(i, j int) { cycle[i], cycle[j] = cycle[j], cycle[i] })
	jobs := make([]SeedJob, 100_000)
	for i := range jobs {
		jobs[i] = seedJob(i, cycle[i%len(cycle)])
	}
	return jobs
}

// backlogLive and backlogFinished size Live100k.
const (
	backlogLive     = 100_000
	backlogFinished = 50_000
)

// backlogJobs returns the jobs of Live100k: every third one finished, the
// others live, mostly queued (one in ten starting or running).
func backlogJobs() []SeedJob {
	jobs := make([]SeedJob, backlogLive+backlogFinished)
	live := 0
	for i := range jobs {
		var state domain.JobState
		switch {
		case i%3 == 2 && i/3 < backlogFinished:
			state = domain.JobSucceeded
		case live%20 == 0:
			state, live = domain.JobRunning, live+1
		case live%20 == 1:
			state, live = domain.JobStarting, live+1
		default:
			state, live = domain.JobQueued, live+1
		}
		jobs[i] = seedJob(i, state)
	}
	return jobs
}

// seedStore opens a store, writes jobs into it (through seed when set)
// and returns it with the jobs' ids, in jobs' order. It checks the counts
// per state, so a Seed that writes other jobs than asked fails here, not
// as odd figures.
func seedStore(b *testing.B, open func(b *testing.B) store.Store, seed func(*testing.B, store.Store, store.NewJob, []SeedJob),
	jobs []SeedJob) (store.Store, []int64) {
	b.Helper()
	s := open(b)
	spec := benchJob(b, "seed", domain.Resources{GPUs: 1, CPUs: 4, Memory: 16 << 30, Nodes: 1})
	start := time.Now()
	var ids []int64
	if seed != nil {
		seed(b, s, spec, jobs)
		ids = make([]int64, len(jobs))
		for i := range ids {
			ids[i] = int64(i + 1)
		}
	} else {
		ids = seedThroughAPI(b, s, spec, jobs)
	}
	ctx := context.Background()
	want := map[domain.JobState]int{}
	for _, j := range jobs {
		want[j.State]++
	}
	got, err := s.CountJobs(ctx)
	if err != nil {
		b.Fatalf("CountJobs after seeding: %v", err)
	}
	maps.DeleteFunc(got, func(_ domain.JobState, n int) bool { return n == 0 })
	if !maps.Equal(got, want) {
		b.Fatalf("seeded store counts %v, want %v", got, want)
	}
	if newest, err := s.ListJobs(ctx, store.JobFilter{Limit: 1}); err != nil || len(newest) != 1 || newest[0].ID != slices.Max(ids) {
		b.Fatalf("newest seeded job: %v, %v; want id %d", newest, err, slices.Max(ids))
	}
	b.Logf("seeded %d jobs in %v", len(jobs), time.Since(start).Round(time.Millisecond))
	return s, ids
}

// seedThroughAPI writes jobs with CreateJob from many callers, so that a
// batching backend commits many per transaction, then moves them to their
// states with Apply, a thousand changes a call.
func seedThroughAPI(b *testing.B, s store.Store, spec store.NewJob, jobs []SeedJob) []int64 {
	b.Helper()
	ctx := context.Background()
	ids := make([]int64, len(jobs))
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range 64 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(jobs) {
					return
				}
				sj, p := jobs[i], spec
				p.Spec.Name, p.Spec.Project, p.Submitter, p.SubmittedAt = sj.Name, sj.Project, sj.Submitter, sj.SubmittedAt
				p.OutputDir = func(int64) string { return sj.OutputDir }
				j, _, err := s.CreateJob(ctx, p, benchAudit)
				if err != nil {
					mu.Lock()
					first = cmp.Or(first, fmt.Errorf("CreateJob(%s): %w", sj.Name, err))
					mu.Unlock()
					return
				}
				ids[i] = j.ID
			}
		})
	}
	wg.Wait()
	if first != nil {
		b.Fatalf("seed: %v", first)
	}
	paths := map[domain.JobState][]domain.Move{
		domain.JobHeld:      {domain.MoveHold()},
		domain.JobStarting:  {domain.MoveStart()},
		domain.JobRunning:   {domain.MoveStart(), domain.MoveRun()},
		domain.JobSucceeded: {domain.MoveStart(), domain.MoveSucceed()},
		domain.JobFailed:    {domain.MoveStart(), domain.MoveFail()},
		domain.JobCanceled:  {domain.MoveCancel()},
	}
	for step := 0; ; step++ {
		var changes []store.Change
		for i, sj := range jobs {
			if path := paths[sj.State]; step < len(path) {
				changes = append(changes, store.Change{JobID: ids[i], Move: path[step], At: sj.SubmittedAt})
			}
		}
		if len(changes) == 0 {
			return ids
		}
		for chunk := range slices.Chunk(changes, 1000) {
			errs, err := s.Apply(ctx, chunk)
			if err == nil {
				err = errors.Join(errs...)
			}
			if err != nil {
				b.Fatalf("seed: Apply: %v", err)
			}
		}
	}
}

func benchGetJob(b *testing.B, s store.Store, ids []int64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	var lat latencies
	for range b.N {
		id := ids[rng.Int64N(int64(len(ids)))]
		start := time.Now()
		if _, err := s.GetJob(ctx, id); err != nil {
			b.Fatalf("GetJob(%d): %v", id, err)
		}
		lat.add(time.Since(start))
	}
	lat.report(b)
}

// listFilters names ListJobs cases; each builds its filter from a random
// source, so paged cases start at a different cursor every call.
type listFilters map[string]func(rng *rand.Rand) store.JobFilter

// historyFilters are the ListJobs cases of Jobs100k: a page of each shape
// the API and UI read, from the newest job and from a cursor inside the
// store, and the unpaged read of every active job.
func historyFilters(ids []int64) listFilters {
	// A cursor with at least 999 jobs older than it, so a page is full.
	cursor := func(rng *rand.Rand) int64 { return ids[999+rng.Int64N(int64(len(ids)-1000))] }
	queued := []domain.JobState{domain.JobQueued}
	placed := []domain.JobState{domain.JobStarting, domain.JobRunning}
	return listFilters{
		"all":          func(*rand.Rand) store.JobFilter { return store.JobFilter{Limit: 50} },
		"all-cursor":   func(rng *rand.Rand) store.JobFilter { return store.JobFilter{Limit: 50, BeforeID: cursor(rng)} },
		"state=queued": func(*rand.Rand) store.JobFilter { return store.JobFilter{Limit: 50, States: queued} },
		"state=queued-cursor": func(rng *rand.Rand) store.JobFilter {
			return store.JobFilter{Limit: 50, States: queued, BeforeID: cursor(rng)}
		},
		"states=starting,running": func(*rand.Rand) store.JobFilter {
			return store.JobFilter{Limit: 50, States: placed}
		},
		"states=starting,running-cursor": func(rng *rand.Rand) store.JobFilter {
			return store.JobFilter{Limit: 50, States: placed, BeforeID: cursor(rng)}
		},
		"project": func(*rand.Rand) store.JobFilter { return store.JobFilter{Limit: 50, Project: "project-7"} },
		// Every active job (13,000 of the 100,000), in submit order.
		"active-unpaged": func(*rand.Rand) store.JobFilter {
			return store.JobFilter{States: []domain.JobState{domain.JobQueued, domain.JobStarting, domain.JobRunning}, Ascending: true}
		},
		"project+state": func(*rand.Rand) store.JobFilter {
			return store.JobFilter{Limit: 50, Project: "project-7", States: queued}
		},
	}
}

// backlogFilters are the ListJobs cases of Live100k: first pages, where
// most jobs are queued rather than finished.
func backlogFilters() listFilters {
	fixed := func(f store.JobFilter) func(*rand.Rand) store.JobFilter {
		return func(*rand.Rand) store.JobFilter { return f }
	}
	return listFilters{
		"all":                     fixed(store.JobFilter{Limit: 50}),
		"state=queued":            fixed(store.JobFilter{Limit: 50, States: []domain.JobState{domain.JobQueued}}),
		"states=starting,running": fixed(store.JobFilter{Limit: 50, States: []domain.JobState{domain.JobStarting, domain.JobRunning}}),
		"project+state":           fixed(store.JobFilter{Limit: 50, Project: "project-7", States: []domain.JobState{domain.JobQueued}}),
	}
}

func benchListJobs(b *testing.B, s store.Store, filters listFilters) {
	ctx := context.Background()
	for _, name := range slices.Sorted(maps.Keys(filters)) {
		filter := filters[name]
		b.Run(name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(5, 6))
			var lat latencies
			for range b.N {
				f := filter(rng)
				start := time.Now()
				jobs, err := s.ListJobs(ctx, f)
				if err != nil {
					b.Fatalf("ListJobs(%+v): %v", f, err)
				}
				lat.add(time.Since(start))
				if len(jobs) == 0 {
					b.Fatalf("ListJobs(%+v) returned nothing", f)
				}
			}
			lat.report(b)
		})
	}
}

func benchCountJobs(b *testing.B, s store.Store) {
	ctx := context.Background()
	for range b.N {
		if _, err := s.CountJobs(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// benchSnapshotLoad measures LiveJobs, what the control loop reads when it
// starts (and when it loses track of changes): every live job, in one
// snapshot.
func benchSnapshotLoad(b *testing.B, s store.Store, live int, inProcess bool) {
	ctx := context.Background()
	var lat latencies
	for range b.N {
		start, cpu := time.Now(), cpuTime()
		jobs, _, err := s.LiveJobs(ctx)
		if err != nil {
			b.Fatalf("LiveJobs: %v", err)
		}
		lat.add(time.Since(start))
		if inProcess {
			lat.cpu += cpuTime() - cpu
		}
		if len(jobs) != live {
			b.Fatalf("LiveJobs returned %d jobs, want %d", len(jobs), live)
		}
	}
	lat.report(b)
}

// benchLiveJobRevs measures LiveJobRevs, what the control loop reads
// every resync: every live job's id and revision, in one snapshot.
func benchLiveJobRevs(b *testing.B, s store.Store, live int, inProcess bool) {
	ctx := context.Background()
	var lat latencies
	for range b.N {
		start, cpu := time.Now(), cpuTime()
		revs, _, err := s.LiveJobRevs(ctx)
		if err != nil {
			b.Fatalf("LiveJobRevs: %v", err)
		}
		lat.add(time.Since(start))
		if inProcess {
			lat.cpu += cpuTime() - cpu
		}
		if len(revs) != live {
			b.Fatalf("LiveJobRevs returned %d jobs, want %d", len(revs), live)
		}
	}
	lat.report(b)
}

// spendAttempts and spendNow size Attempts1M.
const spendAttempts = 1_000_000

var spendNow = t0.Add(60 * 24 * time.Hour)

// benchReportTotals sums the last 30 days of Attempts1M by by, as a
// review report does, and checks the sums hold every attempt that
// started in the window and its spend sums every attempt SpendTotals
// does: the whole of a report's reads of the history.
func benchReportTotals(b *testing.B, s store.Store, by string, inProcess bool) {
	ctx := context.Background()
	q := store.ReportQuery{SpendQuery: store.SpendQuery{Since: spendNow.Add(-30 * 24 * time.Hour), Until: spendNow, By: by, AllProjects: true},
		Under: 0.25, Near: 0.9, Limit: 20, MinRun: time.Minute, MinCPUs: 2}
	var lat latencies
	for b.Loop() {
		start, cpu := time.Now(), cpuTime()
		rep, err := s.ReportTotals(ctx, q)
		lat.add(time.Since(start))
		if inProcess {
			lat.cpu += cpuTime() - cpu
		}
		if err != nil {
			b.Fatal(err)
		}
		n, spent := 0, 0
		for _, r := range rep.Rows {
			n += r.Started
		}
		for _, r := range rep.Spend {
			spent += r.Attempts
		}
		// As benchSpendTotals, from the start of the hour the window
		// starts in: those that started in the 50 minutes before it ran
		// into it.
		step := 40 * 24 * time.Hour / spendAttempts
		first := store.ReportSince(q.Since).Sub(spendNow.Add(-40 * 24 * time.Hour))
		lo := spendAttempts - int((first+step-1)/step)
		hi := lo + int(50*time.Minute/step) + 1
		if n < lo-1 || n > lo+1 || spent < lo || spent > hi {
			b.Fatalf("the sums hold %d started attempts and %d that held resources, want %d and %d to %d", n, spent, lo, lo, hi)
		}
	}
	lat.report(b)
}

// benchSpendTotals sums the last 30 days of Attempts1M by by, as a spend
// report does, split at splits evenly spaced rate changes, and checks the
// sums hold every attempt in the window.
func benchSpendTotals(b *testing.B, s store.Store, by string, splits int, inProcess bool) {
	ctx := context.Background()
	q := store.SpendQuery{Since: spendNow.Add(-30 * 24 * time.Hour), Until: spendNow, By: by, AllProjects: true}
	for i := range splits {
		q.Splits = append(q.Splits, q.Since.Add(time.Duration(i+1)*30*24*time.Hour/time.Duration(splits+1)))
	}
	var lat latencies
	for b.Loop() {
		start, cpu := time.Now(), cpuTime()
		rows, err := s.SpendTotals(ctx, q)
		lat.add(time.Since(start))
		if inProcess {
			lat.cpu += cpuTime() - cpu
		}
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for _, r := range rows {
			n += r.Attempts
		}
		// Three quarters of the attempts started in the window; those
		// that started in the 50 minutes before it ran into it.
		lo := spendAttempts * 3 / 4
		hi := lo + int(50*time.Minute/(40*24*time.Hour/spendAttempts)) + 1
		if n < lo || n > hi {
			b.Fatalf("the sums hold %d attempts, want %d to %d", n, lo, hi)
		}
	}
	lat.report(b)
}
