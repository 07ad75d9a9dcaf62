package metrics

import (
	"context"
	"errors"
	"iter"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"trainyard/internal/domain"
	"trainyard/internal/metrics/sample"
)

type fakeGPU struct{}

func (fakeGPU) ReadGPUs(context.Context) ([]sample.GPUStat, error) {
	return []sample.GPUStat{{Index: 0, Utilization: 50, MemoryUsed: 1 << 30, MemoryTotal: 80 << 30, Temperature: 60},
		{Index: 1, Utilization: 100, MemoryUsed: 2 << 30, MemoryTotal: 80 << 30, Temperature: 70}}, nil
}

// populated returns Metrics that have seen one pass, a placement, an attempt
// end, requests, a submit and a sample of a real running process on GPU 1.
func populated(t *testing.T) *Metrics {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "child.pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	m := New(Config{
		CountJobs: func(context.Context) (map[domain.JobState]int, error) {
			return map[domain.JobState]int{domain.JobQueued: 2, domain.JobRunning: 1, domain.JobSucceeded: 7}, nil
		},
		AttemptDir: func(int64, int) string { return dir },
		GPU:        fakeGPU{},
		Budgets: func(context.Context) ([]Budget, error) {
			return []Budget{{Project: "vision", Period: "2026-12", Amount: 1000 * domain.MoneyUnit, Spent: 250 * domain.MoneyUnit, Committed: 400 * domain.MoneyUnit}}, nil
		},
	})
	// 1 GPU at 2.50 an hour and 4 CPUs at 0.25: 3.50 an hour.
	pools := []domain.Pool{{Name: "a100", Nodes: []domain.Node{{Name: "n1", CPUs: 32, Memory: 256 << 30, GPUs: []int{0, 1}}},
		Rates: domain.Rates{GPUHour: 2_500_000, CPUHour: 250_000}}}
	running := domain.Job{ID: 1, Project: "vision", Pool: "a100", State: domain.JobRunning, Attempts: 1, Resources: domain.Resources{GPUs: 1, CPUs: 4, Memory: 16 << 30}}
	m.Pass(3 * time.Millisecond)
	m.View(pools, map[PoolProject]int{{"a100", "vision"}: 1, {"a100", "nlp"}: 1}, active(running, domain.Attempt{JobID: 1, Number: 1, GPUs: []int{1}}))
	m.Placed("vision", "a100", 1, 42*time.Second)
	m.AttemptEnded("vision", "a100", domain.AttemptFailed, domain.ReasonOOMKilled)
	m.ObserveRequest("GET /api/v1/jobs", 200, 5*time.Millisecond)
	m.ObserveRequest("", 404, time.Millisecond)
	m.JobSubmitted("vision", "a100")
	m.Sampler().SampleOnce(context.Background())
	return m
}

// scrape GETs /metrics and parses it with the Prometheus text parser.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parse exposition: %v", err)
	}
	return fams
}

// find returns the value of the family's sample whose labels include want.
func find(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("series %s missing from the exposition", name)
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m
	}
	t.Fatalf("%s has no sample with labels %v", name, want)
	return nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return -1
}

func TestExpositionHasEverySeries(t *testing.T) {
	fams := scrape(t, populated(t))
	checks := map[string]struct {
		labels map[string]string
		want   float64 // -1: any positive value
	}{
		QueueDepth:           {map[string]string{"pool": "a100", "project": "nlp"}, 1},
		SpendRate:            {map[string]string{"pool": "a100", "project": "vision"}, 3.5},
		BudgetAmount:         {map[string]string{"project": "vision", "period": "2026-12"}, 1000},
		BudgetSpent:          {map[string]string{"project": "vision"}, 250},
		BudgetCommitted:      {map[string]string{"project": "vision"}, 400},
		BudgetUsed:           {map[string]string{"project": "vision"}, 0.25},
		RunningJobs:          {map[string]string{"pool": "a100", "project": "vision"}, 1},
		PoolCapacityGPUs:     {map[string]string{"pool": "a100"}, 2},
		PoolAllocatedGPUs:    {map[string]string{"pool": "a100"}, 1},
		PoolCapacityCPUs:     {map[string]string{"pool": "a100"}, 32},
		PoolAllocatedCPUs:    {map[string]string{"pool": "a100"}, 4},
		PoolCapacityMemory:   {map[string]string{"pool": "a100"}, 256 << 30},
		PoolAllocatedMemory:  {map[string]string{"pool": "a100"}, 16 << 30},
		AttemptOutcomes:      {map[string]string{"pool": "a100", "project": "vision", "state": "failed", "reason": "OOMKilled"}, 1},
		JobsSubmitted:        {map[string]string{"pool": "a100", "project": "vision"}, 1},
		Jobs:                 {map[string]string{"state": "succeeded"}, 7},
		SchedulerLastPass:    {nil, -1},
		AttemptRSS:           {map[string]string{"job": "1", "attempt": "1", "project": "vision", "pool": "a100"}, -1},
		AttemptMemoryLimit:   {map[string]string{"job": "1"}, 16 << 30},
		AttemptProcesses:     {map[string]string{"job": "1"}, 1},
		AttemptGPUUtil:       {map[string]string{"job": "1", "gpu": "1"}, 1},
		AttemptGPUMemoryUsed: {map[string]string{"job": "1", "gpu": "1"}, 2 << 30},
		AttemptGPUMemory:     {map[string]string{"job": "1", "gpu": "1"}, 80 << 30},
		AttemptGPUTemp:       {map[string]string{"job": "1", "gpu": "1"}, 70},
	}
	for name, c := range checks {
		m := find(t, fams, name, c.labels)
		if v := value(m); (c.want < 0 && v <= 0) || (c.want >= 0 && v != c.want) {
			t.Errorf("%s%v = %v, want %v", name, c.labels, v, c.want)
		}
	}
	if _, ok := fams[AttemptCPU]; !ok {
		t.Errorf("%s missing", AttemptCPU)
	}
	// GPU 0 is not the attempt's: no series for it.
	for _, m := range fams[AttemptGPUUtil].Metric {
		for _, l := range m.Label {
			if l.GetName() == "gpu" && l.GetValue() == "0" {
				t.Errorf("GPU 0 is not assigned to any attempt but has a series")
			}
		}
	}
	hist := map[string]map[string]string{
		QueueWait:     {"pool": "a100", "project": "vision"},
		SchedulerPass: nil,
		APIRequests:   {"route": "GET /api/v1/jobs", "code": "200"},
	}
	for name, labels := range hist {
		if h := find(t, fams, name, labels).Histogram; h == nil || h.GetSampleCount() != 1 {
			t.Errorf("%s%v: want a histogram with one observation, got %v", name, labels, h)
		}
	}
	find(t, fams, APIRequests, map[string]string{"route": "unmatched", "code": "404"})
	for _, std := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if fams[std] == nil {
			t.Errorf("standard series %s missing", std)
		}
	}
}

// active is the attempts with their jobs, as View takes them.
func active(pairs ...any) iter.Seq2[domain.Job, domain.Attempt] {
	return func(yield func(domain.Job, domain.Attempt) bool) {
		for i := 0; i+1 < len(pairs); i += 2 {
			if !yield(pairs[i].(domain.Job), pairs[i+1].(domain.Attempt)) {
				return
			}
		}
	}
}

// A later view replaces the last: series of work that is gone disappear.
func TestViewReplacesTheLast(t *testing.T) {
	m := New(Config{})
	m.View(nil, map[PoolProject]int{{"p", "x"}: 1}, active())
	if fams := scrape(t, m); fams[QueueDepth] == nil {
		t.Fatal("queue depth missing after a view with a queued job")
	}
	m.View(nil, map[PoolProject]int{}, active())
	if fams := scrape(t, m); fams[QueueDepth] != nil {
		t.Fatalf("queue depth still reported after the queue emptied: %v", fams[QueueDepth])
	}
}

// A store error drops trainyard_jobs from the scrape but not the rest.
func TestCountJobsErrorKeepsTheScrape(t *testing.T) {
	m := New(Config{CountJobs: func(context.Context) (map[domain.JobState]int, error) { return nil, errors.New("database is locked") }})
	m.JobSubmitted("x", "p")
	fams := scrape(t, m)
	if fams[Jobs] != nil || fams[JobsSubmitted] == nil {
		t.Fatalf("want trainyard_jobs absent and the rest present, got jobs=%v submitted=%v", fams[Jobs], fams[JobsSubmitted])
	}
}
