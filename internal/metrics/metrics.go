// Package metrics exposes Trainyard's Prometheus series: the queue, running
// work and pool allocation as the control loop last saw them, queue waits,
// attempt outcomes, scheduler pass durations, API request latencies, submits,
// job counts by state, and the resources each running attempt uses (through
// package sample).
//
// Everything lives in one dedicated registry (no global state), together with
// the Go runtime and process collectors. Metrics implements the control
// loop's Observer and the API's request hooks without importing either, so
// both stay free of the Prometheus client. docs/observability.md lists every
// series.
package metrics

import (
	"context"
	"iter"
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"trainyard/internal/cost"
	"trainyard/internal/domain"
	"trainyard/internal/metrics/sample"
)

// Config wires Metrics. Every field is optional.
type Config struct {
	// CountJobs counts jobs per state at scrape time (the store's
	// CountJobs). nil: no trainyard_jobs series.
	CountJobs func(ctx context.Context) (map[domain.JobState]int, error)
	// AttemptDir returns a running attempt's directory (where its
	// supervisor writes child.pid). nil: no per-attempt resource series.
	AttemptDir func(jobID int64, attempt int) string
	// GPU reads GPU statistics for attempts that hold GPUs; nil: no GPU
	// series (sample.FindNvidiaSMI finds nvidia-smi).
	GPU sample.GPUReader
	// SampleInterval is how often running attempts are sampled (default
	// sample.DefaultInterval, 15s).
	SampleInterval time.Duration
	// Budgets reports each project's budget in force with its spend in
	// the current period, asked at most every BudgetRefresh at scrape
	// time. nil: no budget series.
	Budgets func(ctx context.Context) ([]Budget, error)
	// ProcRoot and CgroupRoot override /proc and /sys/fs/cgroup (tests).
	ProcRoot, CgroupRoot string
	Logger               *slog.Logger
}

// Metrics holds the registry and every Trainyard series. Its methods are safe
// for concurrent use.
type Metrics struct {
	cfg     Config
	reg     *prometheus.Registry
	handler http.Handler
	sampler *sample.Sampler

	queueWait   *prometheus.HistogramVec
	outcomes    *prometheus.CounterVec
	passSeconds prometheus.Histogram
	lastPass    prometheus.Gauge
	requests    *prometheus.HistogramVec
	submits     *prometheus.CounterVec

	mu    sync.Mutex
	state passState // the control loop's last view, emitted by stateCollector
}

// Series names, for tests and the deploy/ rules.
const (
	QueueDepth           = "trainyard_queue_depth"
	QueueWait            = "trainyard_queue_wait_seconds"
	RunningJobs          = "trainyard_running_jobs"
	PoolCapacityGPUs     = "trainyard_pool_capacity_gpus"
	PoolAllocatedGPUs    = "trainyard_pool_allocated_gpus"
	PoolCapacityCPUs     = "trainyard_pool_capacity_cpus"
	PoolAllocatedCPUs    = "trainyard_pool_allocated_cpus"
	PoolCapacityMemory   = "trainyard_pool_capacity_memory_bytes"
	PoolAllocatedMemory  = "trainyard_pool_allocated_memory_bytes"
	AttemptOutcomes      = "trainyard_attempt_outcomes_total"
	SchedulerPass        = "trainyard_scheduler_pass_duration_seconds"
	SchedulerLastPass    = "trainyard_scheduler_last_pass_timestamp_seconds"
	APIRequests          = "trainyard_api_request_duration_seconds"
	JobsSubmitted        = "trainyard_jobs_submitted_total"
	Jobs                 = "trainyard_jobs"
	AttemptCPU           = "trainyard_attempt_cpu_seconds_total"
	AttemptRSS           = "trainyard_attempt_memory_rss_bytes"
	AttemptMemoryLimit   = "trainyard_attempt_memory_limit_bytes"
	AttemptProcesses     = "trainyard_attempt_processes"
	AttemptGPUUtil       = "trainyard_attempt_gpu_utilization_ratio"
	AttemptGPUMemoryUsed = "trainyard_attempt_gpu_memory_used_bytes"
	AttemptGPUMemory     = "trainyard_attempt_gpu_memory_total_bytes"
	AttemptGPUTemp       = "trainyard_attempt_gpu_temperature_celsius"
	SpendRate            = "trainyard_spend_rate_per_hour"
	BudgetAmount         = "trainyard_budget_amount"
	BudgetSpent          = "trainyard_budget_spent"
	BudgetCommitted      = "trainyard_budget_committed"
	BudgetUsed           = "trainyard_budget_used_ratio"
)

// New builds the registry. Call RunSampler to sample running attempts.
func New(cfg Config) *Metrics {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &Metrics{cfg: cfg, reg: prometheus.NewRegistry()}
	pp := []string{"pool", "project"}
	m.queueWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: QueueWait,
		Help:    "Time a job waited in the queue before the scheduler placed it (from submission, or from re-queueing for a retry or after preemption).",
		Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400}}, pp)
	m.outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: AttemptOutcomes,
		Help: "Attempts that ended, by final attempt state and reason."}, []string{"pool", "project", "state", "reason"})
	m.passSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: SchedulerPass,
		Help:    "Time one scheduler pass took (the plan, without store writes or launches).",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}})
	m.lastPass = prometheus.NewGauge(prometheus.GaugeOpts{Name: SchedulerLastPass,
		Help: "Unix time of the last scheduler pass."})
	m.requests = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: APIRequests,
		Help:    "API request latency by route pattern and HTTP status code.",
		Buckets: prometheus.DefBuckets}, []string{"route", "code"})
	m.submits = prometheus.NewCounterVec(prometheus.CounterOpts{Name: JobsSubmitted,
		Help: "Jobs created by submit requests (idempotent repeats not counted)."}, pp)
	m.reg.MustRegister(m.queueWait, m.outcomes, m.passSeconds, m.lastPass, m.requests, m.submits,
		stateCollector{m},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if cfg.CountJobs != nil {
		m.reg.MustRegister(jobsCollector{m})
	}
	if cfg.Budgets != nil {
		m.reg.MustRegister(&budgetCollector{m: m})
	}
	if cfg.AttemptDir != nil {
		m.sampler = sample.New(sample.Config{Interval: cfg.SampleInterval, Targets: m.targets, GPU: cfg.GPU,
			ProcRoot: cfg.ProcRoot, CgroupRoot: cfg.CgroupRoot, Logger: cfg.Logger})
		m.reg.MustRegister(sampleCollector{m.sampler})
	}
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, ErrorLog: slogAdapter{cfg.Logger}})
	return m
}

// Registry is the registry every series is in.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// ServeHTTP serves the exposition (text format, or what the scraper
// negotiates).
func (m *Metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) { m.handler.ServeHTTP(w, r) }

// RunSampler samples running attempts every SampleInterval until ctx ends.
// Without Config.AttemptDir it returns at once.
func (m *Metrics) RunSampler(ctx context.Context) error {
	if m.sampler == nil {
		return nil
	}
	return m.sampler.Run(ctx)
}

// Sampler is the attempt sampler, nil without Config.AttemptDir.
func (m *Metrics) Sampler() *sample.Sampler { return m.sampler }

// ObserveRequest records one API request: its route pattern (e.g. "GET
// /api/v1/jobs/{id}"; "unmatched" for none), status code and duration.
func (m *Metrics) ObserveRequest(route string, code int, took time.Duration) {
	if route == "" {
		route = "unmatched"
	}
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Observe(took.Seconds())
}

// JobSubmitted counts a job created by a submit request.
func (m *Metrics) JobSubmitted(project, pool string) {
	m.submits.WithLabelValues(pool, project).Inc()
}

// Placed records how long a job waited before the scheduler placed it
// (control.Observer).
func (m *Metrics) Placed(project, pool string, attempt int, waited time.Duration) {
	m.queueWait.WithLabelValues(pool, project).Observe(max(waited, 0).Seconds())
}

// AttemptEnded counts an attempt's end (control.Observer).
func (m *Metrics) AttemptEnded(project, pool string, state domain.AttemptState, reason domain.Reason) {
	m.outcomes.WithLabelValues(pool, project, string(state), string(reason)).Inc()
}

// Pass records a scheduler pass and how long it took (control.Observer).
func (m *Metrics) Pass(took time.Duration) {
	m.passSeconds.Observe(took.Seconds())
	m.lastPass.SetToCurrentTime()
}

// PoolProject names one project's jobs in one pool.
type PoolProject struct{ Pool, Project string }

// View records the live work as the control loop sees it after a change:
// the pools, the queued jobs counted by pool and project, and the active
// attempts with their jobs, which it samples (control.Observer). Its cost
// follows the pools and the active attempts, not the queue.
func (m *Metrics) View(pools []domain.Pool, queued map[PoolProject]int, active iter.Seq2[domain.Job, domain.Attempt]) {
	st := passState{queued: maps.Clone(queued), running: map[poolProject]int{}, pools: make(map[string]*poolUse, len(pools)),
		spendRate: poolProjectSpend{}}
	if st.queued == nil {
		st.queued = map[PoolProject]int{}
	}
	rates := make(map[string]domain.Rates, len(pools))
	for _, p := range pools {
		c := p.Capacity()
		st.pools[p.Name] = &poolUse{capacity: c}
		rates[p.Name] = p.Rates
	}
	for j, a := range active {
		st.running[poolProject{j.Pool, j.Project}]++
		if r := rates[j.Pool]; r != (domain.Rates{}) {
			st.spendRate[poolProject{j.Pool, j.Project}] += cost.Of(j.Resources, r, time.Hour)
		}
		pu := st.pools[j.Pool]
		if pu == nil {
			pu = &poolUse{}
			st.pools[j.Pool] = pu
		}
		pu.allocated.GPUs += j.Resources.GPUs
		pu.allocated.CPUs += j.Resources.CPUs
		pu.allocated.Memory += j.Resources.Memory
		st.targets = append(st.targets, sample.Target{JobID: a.JobID, Attempt: a.Number, Project: j.Project,
			Pool: j.Pool, GPUs: a.GPUs, MemoryLimit: int64(j.Resources.Memory)})
	}
	m.mu.Lock()
	m.state = st
	m.mu.Unlock()
}

// targets are the active attempts the control loop last saw, with their
// directories.
func (m *Metrics) targets(context.Context) []sample.Target {
	m.mu.Lock()
	ts := make([]sample.Target, len(m.state.targets))
	copy(ts, m.state.targets)
	m.mu.Unlock()
	for i := range ts {
		ts[i].Dir = m.cfg.AttemptDir(ts[i].JobID, ts[i].Attempt)
	}
	return ts
}

type poolProject struct{ pool, project string }

type poolUse struct{ capacity, allocated domain.Limits }

// poolProjectSpend is what a project's running attempts in a pool cost
// per hour.
type poolProjectSpend map[poolProject]domain.Money

// passState is what the control loop last saw.
type passState struct {
	queued    map[PoolProject]int
	running   map[poolProject]int
	pools     map[string]*poolUse
	spendRate poolProjectSpend
	targets   []sample.Target
}

// slogAdapter lets promhttp log encoding errors through slog.
type slogAdapter struct{ log *slog.Logger }

func (a slogAdapter) Println(v ...any) { a.log.Error("serve metrics", "err", v) }
