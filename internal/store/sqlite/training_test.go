package sqlite

import (
	"context"
	"errors"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

func TestMetricPointsAndHealth(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	job, _, err := s.CreateJob(ctx, store.NewJob{Spec: domain.Spec{Name: "m", Project: "default", Pool: "default"},
		SpecJSON: []byte("{}"), SpecHash: "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a", Submitter: "u", SubmittedAt: time.Now(),
		OutputDir: func(id int64) string { return "/out/" + string(rune('a'+id)) }}, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(1000, 0).UTC()
	errs, err := s.Apply(ctx, []store.Change{{JobID: job.ID, Move: domain.MoveStart(), At: start,
		Attempt: &store.AttemptChange{Create: true, Number: 1, To: domain.AttemptRunning}},
		{JobID: job.ID, Move: domain.MoveRun(), At: start}})
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatal(err, errs)
	}
	var pts []domain.MetricPoint
	for i := range 1000 {
		v := float64(1000 - i)
		if i == 500 {
			v = -5 // a spike the downsampling must keep
		}
		pts = append(pts, domain.MetricPoint{JobID: job.ID, Attempt: 1, Step: int64(i), Key: "loss", Value: v, At: start.Add(time.Duration(i) * time.Millisecond)})
	}
	if err := s.AppendPoints(ctx, pts); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendPoints(ctx, pts[:10]); err != nil { // read again after a restart: no duplicates
		t.Fatal(err)
	}
	all, err := s.QueryMetrics(ctx, job.ID, "loss", 0)
	if err != nil || len(all["loss"]) != 1000 {
		t.Fatalf("all points: %d %v", len(all["loss"]), err)
	}
	down, err := s.QueryMetrics(ctx, job.ID, "", 90)
	if err != nil {
		t.Fatal(err)
	}
	got := down["loss"]
	if len(got) > 90 || len(got) < 30 {
		t.Fatalf("downsampled to %d points, want 30..90", len(got))
	}
	minV, last := got[0].Value, got[len(got)-1]
	for i, p := range got {
		minV = min(minV, p.Value)
		if i > 0 && p.Step < got[i-1].Step {
			t.Fatalf("points out of step order at %d", i)
		}
	}
	if minV != -5 || last.Step != 999 || got[0].Step != 0 {
		t.Errorf("downsampling lost the spike or the ends: min %v, first step %d, last step %d", minV, got[0].Step, last.Step)
	}

	h, err := s.AttemptHealth(ctx, job.ID, 1)
	if err != nil || !h.LastProgressAt.Equal(pts[999].At) || !h.StartedAt.Equal(start) {
		t.Fatalf("health after points: %+v %v", h, err)
	}
	if err := s.RecordProgress(ctx, job.ID, 1, start); err != nil { // older: ignored
		t.Fatal(err)
	}
	if err := s.MarkHealthFailed(ctx, job.ID, 1, domain.ReasonStalled, "no progress"); err != nil {
		t.Fatal(err)
	}
	act, err := s.ActiveHealth(ctx)
	if err != nil || len(act) != 1 || act[0].HealthFailed != domain.ReasonStalled || !act[0].LastProgressAt.Equal(pts[999].At) {
		t.Fatalf("active health: %+v %v", act, err)
	}
	if err := s.RecordProgress(ctx, job.ID, 7, start); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("progress of a missing attempt: %v, want ErrNotFound", err)
	}
	if err := s.MarkHealthFailed(ctx, job.ID, 7, domain.ReasonStalled, ""); !errors.Is(err, store.ErrConflict) {
		t.Errorf("marking a missing attempt: %v, want ErrConflict", err)
	}
}
