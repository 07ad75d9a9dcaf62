package control_test

import (
	"context"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
)

// The points of Progress events reach the store before the attempt's end
// does, and points reported again (after a reattach) are stored once.
func TestProgressPointsStored(t *testing.T) {
	t0 := time.Date(2026, 5, 6, 7, 8, 9, 123456789, time.UTC)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	ex := &executortest.Fake{Script: func(l executor.Launch) []executor.Event {
		pt := func(step int64, key string, v float64, i int) domain.MetricPoint {
			return domain.MetricPoint{JobID: l.JobID, Attempt: l.Attempt, Step: step, Key: key, Value: v, At: at(i)}
		}
		first := []domain.MetricPoint{pt(1, "loss", 0.9, 1), pt(1, "acc", 0.5, 1), pt(2, "loss", 0.8, 2)}
		again := append(first, pt(3, "loss", 0.7, 3)) // a reattached executor reports from the start
		code := 0
		return []executor.Event{{Kind: executor.Started, PID: 1},
			{Kind: executor.Progress, Step: 2, At: at(2), Points: first},
			{Kind: executor.Progress, Step: 3, At: at(3), Points: again},
			{Kind: executor.Exited, At: time.Now().UTC(), State: domain.AttemptSucceeded, Reason: domain.ReasonCompleted, ExitCode: &code}}
	}}
	r := newRig(t, ex)
	j := r.submit("name: metrics\nentrypoint: [train]\n")
	r.wait(j.ID, domain.JobSucceeded)
	series, err := r.st.QueryMetrics(context.Background(), j.ID, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]float64{"loss": {0.9, 0.8, 0.7}, "acc": {0.5}}
	if len(series) != len(want) {
		t.Fatalf("series %v, want keys loss and acc", series)
	}
	for k, vs := range want {
		got := series[k]
		if len(got) != len(vs) {
			t.Fatalf("%s: %d points %+v, want %v", k, len(got), got, vs)
		}
		for i, v := range vs {
			if got[i].Value != v || got[i].Attempt != 1 {
				t.Errorf("%s[%d] = %+v, want %v of attempt 1", k, i, got[i], v)
			}
		}
	}
}
