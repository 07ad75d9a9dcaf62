package control_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"trainyard/internal/alerting"
	"trainyard/internal/clock"
	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/logs"
	"trainyard/internal/metrics"
	"trainyard/internal/observe"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
)

// readCounter counts the reads of one job, of one environment version
// and of one attempt's health that a store serves.
type readCounter struct {
	store.Store
	jobs, envs, health atomic.Int64
}

func (s *readCounter) GetJob(ctx context.Context, id int64) (domain.Job, error) {
	s.jobs.Add(1)
	return s.Store.GetJob(ctx, id)
}

func (s *readCounter) GetEnv(ctx context.Context, name string, version int) (domain.Environment, error) {
	s.envs.Add(1)
	return s.Store.GetEnv(ctx, name, version)
}

func (s *readCounter) AttemptHealth(ctx context.Context, jobID int64, attempt int) (store.AttemptHealth, error) {
	s.health.Add(1)
	return s.Store.AttemptHealth(ctx, jobID, attempt)
}

// BenchmarkJobLifecycle measures what the control loop spends per job
// from its submit to its success: batches of 200 one-CPU jobs (pinned to
// host@1, as a submit pins them) in a pool of one 16-CPU node, whose
// attempts start and succeed at once, on the embedded store, with the Prometheus series and the alerter
// wired as the server wires them. It reports this process's CPU per job
// (the store writes of the submits included) and the reads of a whole
// job, of an environment version and of an attempt's health per job.
func BenchmarkJobLifecycle(b *testing.B) {
	const batch = 200
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := b.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "db.sqlite"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	audit := domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}
	// The server's inventory in the HTTP end-to-end run: one node of 16 CPUs.
	pool := domain.Pool{Name: "small", Executor: "local", Nodes: []domain.Node{{Name: "n", CPUs: 16, Memory: 256 << 30}}}
	if _, err := st.PutPool(ctx, pool, audit); err != nil {
		b.Fatal(err)
	}
	if err := st.PutQuota(ctx, domain.Quota{Project: "proj-001", Pool: "small", Guaranteed: pool.Capacity(), MaxPriority: domain.PriorityUrgent}, audit); err != nil {
		b.Fatal(err)
	}
	if err := st.PutEnv(ctx, domain.HostEnvironment(time.Now()), audit); err != nil {
		b.Fatal(err)
	}
	rc := &readCounter{Store: st}
	m := metrics.New(metrics.Config{})
	al, err := alerting.New(alerting.Config{Store: st})
	if err != nil {
		b.Fatal(err)
	}
	ctl := control.New(control.Config{Store: rc, Executor: &executortest.Fake{}, Clock: clock.Real{}, Observer: observe.Observers{M: m, A: al},
		Logs: logs.Layout{Root: filepath.Join(dir, "runs")}, Logger: discard()})
	done := make(chan struct{}, 2)
	go func() { ctl.Run(ctx); done <- struct{}{} }()
	go func() { al.Run(ctx); done <- struct{}{} }()
	defer func() { cancel(); <-done; <-done }()

	spec := domain.Spec{Name: "t", Project: "proj-001", Pool: "small", Entrypoint: []string{"true"}, Env: "host@1",
		Resources: domain.Resources{CPUs: 1, Memory: 16 << 20, Nodes: 1}}
	raw, err := json.Marshal(spec)
	if err != nil {
		b.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	in := store.NewJob{Spec: spec, SpecJSON: raw, SpecHash: "sha256:" + hex.EncodeToString(sum[:]), Submitter: "bench", Actor: "user:bench"}
	var cpu time.Duration
	var jobs, jobReads, envReads, healthReads int64
	for b.Loop() {
		j0, e0, h0 := rc.jobs.Load(), rc.envs.Load(), rc.health.Load()
		before := cpuTime(b)
		for range batch {
			in.SubmittedAt = time.Now()
			in.OutputDir = func(id int64) string { return filepath.Join(dir, "out", fmt.Sprint(id)) }
			if _, _, err := st.CreateJob(ctx, in, audit); err != nil {
				b.Fatal(err)
			}
		}
		ctl.Wake()
		deadline := time.Now().Add(5 * time.Minute)
		for {
			n, err := st.CountJobs(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if n[domain.JobSucceeded] == int(jobs)+batch {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("jobs not done in 5 minutes: %v", n)
			}
			time.Sleep(5 * time.Millisecond) // polling the store
		}
		cpu += cpuTime(b) - before
		jobs += batch
		jobReads += rc.jobs.Load() - j0
		envReads += rc.envs.Load() - e0
		healthReads += rc.health.Load() - h0
	}
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(jobs), "cpu-ms/job")
	b.ReportMetric(float64(jobReads)/float64(jobs), "job-reads/job")
	b.ReportMetric(float64(envReads)/float64(jobs), "env-reads/job")
	b.ReportMetric(float64(healthReads)/float64(jobs), "health-reads/job")
}
