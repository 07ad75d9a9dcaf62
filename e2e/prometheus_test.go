package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrapeMetrics GETs /metrics with the bearer token (none when empty) and
// returns the status and, on 200, the parsed families.
func (s *server) scrapeMetrics(token string) (int, map[string]*dto.MetricFamily) {
	s.t.Helper()
	req, _ := http.NewRequest("GET", s.url+"/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		s.t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		s.t.Fatalf("the exposition does not parse: %v", err)
	}
	return resp.StatusCode, fams
}

// sampleWith returns the family's sample whose labels include want, or nil.
func sampleWith(f *dto.MetricFamily, want map[string]string) *dto.Metric {
	if f == nil {
		return nil
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
	return nil
}

// Jobs run through a real server show up in every series /metrics promises,
// GPU statistics included (from a scripted nvidia-smi on the server's PATH).
func TestPrometheusMetrics(t *testing.T) {
	bin := t.TempDir()
	smi := "#!/bin/sh\nprintf '0, 35, 1000, 16000, 45\\n1, 0, 0, 16000, 30\\n'\n"
	if err := os.WriteFile(filepath.Join(bin, "nvidia-smi"), []byte(smi), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	const metricsToken = "scrape-secret"
	s := startServer(t, serverOpts{gpus: 2, extra: "sample_interval: 100ms\nmetrics_token: " + metricsToken + "\n"})

	// A token is required, even on this machine: the metrics token or an
	// admin's; health stays open.
	if code, _ := s.scrapeMetrics(""); code != http.StatusUnauthorized {
		t.Fatalf("GET /metrics without the token: status %d, want 401", code)
	}
	if code, _ := s.scrapeMetrics("not-the-token"); code != http.StatusUnauthorized {
		t.Fatalf("GET /metrics with a wrong token: status %d, want 401", code)
	}
	if code, _ := s.scrapeMetrics(s.token); code != http.StatusOK {
		t.Fatalf("GET /metrics with the admin's API token: status %d, want 200", code)
	}

	ok := s.submit("name: ok\nresources: {cpus: 0.25, memory: 16MiB}\nentrypoint: [\"true\"]\n")
	bad := s.submit("name: bad\nresources: {cpus: 0.25, memory: 16MiB}\nentrypoint: [\"false\"]\n")
	s.waitState(ok.ID, time.Minute, "succeeded")
	s.waitState(bad.ID, time.Minute, "failed")
	gpu := s.submit("name: gpu\nproject: default\nresources: {cpus: 1.5, memory: 64MiB, gpus: 1}\nentrypoint: [sleep, \"120\"]\n")
	s.waitState(gpu.ID, time.Minute, "running")
	waiting := s.submit("name: waiting\nresources: {cpus: 1, memory: 16MiB}\nentrypoint: [\"true\"]\n")
	t.Cleanup(func() {
		for _, id := range []int64{gpu.ID, waiting.ID} {
			s.api("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", id), nil, nil)
		}
	})

	job := fmt.Sprint(gpu.ID)
	want := map[string]map[string]string{
		"trainyard_queue_depth":                           {"pool": "default", "project": "default"},
		"trainyard_queue_wait_seconds":                    {"pool": "default", "project": "default"},
		"trainyard_running_jobs":                          {"pool": "default", "project": "default"},
		"trainyard_pool_capacity_gpus":                    {"pool": "default"},
		"trainyard_pool_allocated_gpus":                   {"pool": "default"},
		"trainyard_pool_capacity_cpus":                    {"pool": "default"},
		"trainyard_pool_allocated_cpus":                   {"pool": "default"},
		"trainyard_pool_capacity_memory_bytes":            {"pool": "default"},
		"trainyard_pool_allocated_memory_bytes":           {"pool": "default"},
		"trainyard_attempt_outcomes_total":                {"state": "failed", "reason": "ExitCode"},
		"trainyard_api_request_duration_seconds":          {"route": "POST /api/v1/jobs", "code": "201"},
		"trainyard_scheduler_pass_duration_seconds":       nil,
		"trainyard_scheduler_last_pass_timestamp_seconds": nil,
		"trainyard_jobs_submitted_total":                  {"pool": "default", "project": "default"},
		"trainyard_jobs":                                  {"state": "succeeded"},
		"trainyard_attempt_cpu_seconds_total":             {"job": job, "attempt": "1"},
		"trainyard_attempt_memory_rss_bytes":              {"job": job, "attempt": "1", "project": "default", "pool": "default"},
		"trainyard_attempt_memory_limit_bytes":            {"job": job},
		"trainyard_attempt_processes":                     {"job": job},
		"trainyard_attempt_gpu_utilization_ratio":         {"job": job},
		"trainyard_attempt_gpu_memory_used_bytes":         {"job": job},
		"trainyard_attempt_gpu_memory_total_bytes":        {"job": job},
		"trainyard_attempt_gpu_temperature_celsius":       {"job": job},
		"go_goroutines":                                   nil,
		"process_cpu_seconds_total":                       nil,
	}
	var fams map[string]*dto.MetricFamily
	var missing []string
	waitFor(t, 30*time.Second, "every series in /metrics", func() bool {
		_, fams = s.scrapeMetrics(metricsToken)
		missing = missing[:0]
		for name, labels := range want {
			if sampleWith(fams[name], labels) == nil {
				missing = append(missing, fmt.Sprintf("%s%v", name, labels))
			}
		}
		return len(missing) == 0
	})
	if len(missing) > 0 {
		t.Fatalf("missing from /metrics: %s", strings.Join(missing, ", "))
	}

	values := map[string]struct {
		labels map[string]string
		want   float64
	}{
		"trainyard_pool_capacity_gpus":     {map[string]string{"pool": "default"}, 2},
		"trainyard_pool_allocated_gpus":    {map[string]string{"pool": "default"}, 1},
		"trainyard_queue_depth":            {map[string]string{"pool": "default", "project": "default"}, 1},
		"trainyard_jobs_submitted_total":   {map[string]string{"pool": "default", "project": "default"}, 4},
		"trainyard_attempt_outcomes_total": {map[string]string{"state": "succeeded"}, 1},
		// GPU 0 went to the job: nvidia-smi's first line.
		"trainyard_attempt_gpu_utilization_ratio":   {map[string]string{"job": job, "gpu": "0"}, 0.35},
		"trainyard_attempt_gpu_temperature_celsius": {map[string]string{"job": job, "gpu": "0"}, 45},
		"trainyard_attempt_memory_limit_bytes":      {map[string]string{"job": job}, 64 << 20},
	}
	for name, c := range values {
		m := sampleWith(fams[name], c.labels)
		if m == nil {
			t.Errorf("%s%v missing", name, c.labels)
			continue
		}
		got := m.GetGauge().GetValue() + m.GetCounter().GetValue()
		if got != c.want {
			t.Errorf("%s%v = %v, want %v", name, c.labels, got, c.want)
		}
	}
	if rss := sampleWith(fams["trainyard_attempt_memory_rss_bytes"], map[string]string{"job": job}); rss.GetGauge().GetValue() <= 0 {
		t.Errorf("running job's RSS = %v, want > 0", rss.GetGauge().GetValue())
	}
	if h := sampleWith(fams["trainyard_queue_wait_seconds"], map[string]string{"pool": "default"}).GetHistogram(); h.GetSampleCount() < 3 {
		t.Errorf("queue wait observed %d placements, want at least 3", h.GetSampleCount())
	}
	resp, err := s.http.Get(s.url + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/healthz must stay open: %v %v", resp, err)
	}
	resp.Body.Close()
}
