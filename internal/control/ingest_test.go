package control_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/logs"
)

// The metric log's records reach the store with the values printed: the
// current records (reports stored as printed) and those of an earlier
// supervisor (parsed records) alike; other lines and an incomplete last
// line are skipped.
func TestIngestMetricLog(t *testing.T) {
	t0 := time.Date(2026, 5, 6, 7, 8, 9, 123456789, time.UTC)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	ex := &executortest.Fake{Script: func(l executor.Launch) []executor.Event {
		var b []byte
		b = append(b, `{"t":`+strconv.FormatInt(at(1).UnixNano(), 10)+`,"step":1,"m":{"loss":0.9,"acc":0.5}}`+"\n"...)
		b = logs.AppendMetricRecords(b, at(2), [][]byte{[]byte(`{"step": 2, "loss": 0.8, "acc": 0.6, "phase": "train"}`)})
		b = append(b, "not a record\n"...)
		b = logs.AppendMetricRecords(b, at(3), [][]byte{[]byte(`{"step":3,"loss":0.75,"loss":7e-1}`)})
		b = append(b, `{"t":1,"p":{"step": 4, "loss": 0.1`...) // still being written
		if err := os.MkdirAll(l.Dir, 0o755); err != nil {
			t.Error(err)
		}
		if err := os.WriteFile(filepath.Join(l.Dir, "metrics.jsonl"), b, 0o644); err != nil {
			t.Error(err)
		}
		code := 0
		return []executor.Event{{Kind: executor.Started, PID: 1}, {Kind: executor.Progress, Step: 3, At: at(3)},
			{Kind: executor.Exited, At: time.Now().UTC(), State: domain.AttemptSucceeded, Reason: domain.ReasonCompleted, ExitCode: &code}}
	}}
	r := newRig(t, ex)
	j := r.submit("name: metrics\nentrypoint: [train]\n")
	r.wait(j.ID, domain.JobSucceeded)
	series, err := r.st.QueryMetrics(context.Background(), j.ID, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	type point struct {
		step int64
		v    float64
		at   time.Time
	}
	want := map[string][]point{
		"loss": {{1, 0.9, at(1)}, {2, 0.8, at(2)}, {3, 0.7, at(3)}},
		"acc":  {{1, 0.5, at(1)}, {2, 0.6, at(2)}},
	}
	if len(series) != len(want) {
		t.Fatalf("series %v, want keys loss and acc", series)
	}
	for k, ps := range want {
		got := series[k]
		if len(got) != len(ps) {
			t.Fatalf("%s: %d points %+v, want %+v", k, len(got), got, ps)
		}
		for i, p := range ps {
			if g := got[i]; g.Step != p.step || g.Value != p.v || !g.At.Equal(p.at) || g.Attempt != 1 {
				t.Errorf("%s[%d] = step %d %v at %v (attempt %d), want step %d %v at %v", k, i, g.Step, g.Value, g.At, g.Attempt, p.step, p.v, p.at)
			}
		}
	}
}

// Reports of several ranks printed together (same step, same time) each
// keep their values: rank N > 0 files under "<key>/rankN".
func TestIngestPerRankMetrics(t *testing.T) {
	at := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	ex := &executortest.Fake{Script: func(l executor.Launch) []executor.Event {
		b := logs.AppendMetricRecords(nil, at, [][]byte{
			[]byte(`{"step": 10, "loss": 0.5, "rank": 0}`),
			[]byte(`{"step": 10, "loss": 0.6, "rank": 1}`),
			[]byte(`{"step": 10, "loss": 0.7, "rank": 2}`),
		})
		if err := os.MkdirAll(l.Dir, 0o755); err != nil {
			t.Error(err)
		}
		if err := os.WriteFile(filepath.Join(l.Dir, "metrics.jsonl"), b, 0o644); err != nil {
			t.Error(err)
		}
		code := 0
		return []executor.Event{{Kind: executor.Started, PID: 1}, {Kind: executor.Progress, Step: 10, At: at},
			{Kind: executor.Exited, At: time.Now().UTC(), State: domain.AttemptSucceeded, Reason: domain.ReasonCompleted, ExitCode: &code}}
	}}
	r := newRig(t, ex)
	j := r.submit("name: ranks\nentrypoint: [train]\n")
	r.wait(j.ID, domain.JobSucceeded)
	series, err := r.st.QueryMetrics(context.Background(), j.ID, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"loss": 0.5, "loss/rank1": 0.6, "loss/rank2": 0.7}
	if len(series) != len(want) {
		t.Fatalf("series %v, want keys %v", series, want)
	}
	for k, v := range want {
		if got := series[k]; len(got) != 1 || got[0].Value != v || got[0].Step != 10 {
			t.Errorf("%s = %+v, want one point of %v at step 10", k, got, v)
		}
	}
}
