package diagnose

import (
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
)

func TestRunningFlags(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	base := Running{JobID: 42, Attempt: 2, Now: t0.Add(time.Hour), StartedAt: t0, LastProgressAt: t0.Add(59 * time.Minute), GPUs: 2}
	cases := []struct {
		name  string
		edit  func(r *Running)
		kinds []string
		text  string
	}{
		{"healthy", func(r *Running) {}, nil, ""},
		{"not started", func(r *Running) { r.StartedAt = time.Time{}; r.LastProgressAt = time.Time{} }, nil, ""},
		{"no first progress", func(r *Running) { r.LastProgressAt = time.Time{}; r.FirstProgress = time.Hour }, []string{"no-first-progress"}, "health.first_progress"},
		{"no progress, no check", func(r *Running) { r.LastProgressAt = time.Time{} }, nil, ""},
		{"stale without stall check", func(r *Running) { r.LastProgressAt = t0.Add(45 * time.Minute) }, []string{"stalled"}, "15m"},
		{"stale under half the stall check", func(r *Running) { r.Stall = 2 * time.Hour; r.LastProgressAt = t0.Add(45 * time.Minute) }, nil, ""},
		{"idle GPU", func(r *Running) {
			r.Sample = &domain.ResourceSample{At: t0.Add(59 * time.Minute), GPUUtil: map[int]float64{0: 0.93, 3: 0.01}}
		}, []string{"idle-gpu"}, "GPU 3 at 1%"},
		{"memory near limit", func(r *Running) {
			r.Sample = &domain.ResourceSample{At: t0, RSSBytes: 950 << 20, MemoryLimit: 1000 << 20}
		}, []string{"memory-near-limit"}, "95%"},
		{"slow", func(r *Running) { r.Rate, r.EarlierRate = 2, 10 }, []string{"slow"}, "20% of the 10.0 steps/s"},
		{"a little slower", func(r *Running) { r.Rate, r.EarlierRate = 6, 10 }, nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := base
			c.edit(&r)
			flags := RunningFlags(r)
			var kinds []string
			var texts []string
			for _, f := range flags {
				kinds = append(kinds, f.Kind)
				texts = append(texts, f.Text)
			}
			if strings.Join(kinds, ",") != strings.Join(c.kinds, ",") {
				t.Fatalf("flags %v (%q), want %v", kinds, texts, c.kinds)
			}
			if c.text != "" && !strings.Contains(strings.Join(texts, "\n"), c.text) {
				t.Errorf("texts %q lack %q", texts, c.text)
			}
		})
	}
}

func TestStepRate(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var pts []domain.MetricPoint
	for i := range 30 {
		step := int64(i * 10)
		if i >= 20 {
			step = 200 + int64(i-20) // slower for the last ten minutes
		}
		pts = append(pts, domain.MetricPoint{Step: step, At: t0.Add(time.Duration(i) * time.Minute)})
	}
	if got := StepRate(pts, 0); got != 209.0/1740 {
		t.Errorf("overall rate %v, want 209/1740", got)
	}
	if got := StepRate(pts, 9*time.Minute); got != 1.0/60 {
		t.Errorf("recent rate %v, want 1/60", got)
	}
	if StepRate(pts[:1], 0) != 0 {
		t.Error("one point has no rate")
	}
}
