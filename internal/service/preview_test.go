package service_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store/sqlite/sqlitetest"
)

// A preview places the job in its pool's queue as the scheduler last
// ordered it: jobs at its priority or above wait ahead of it.
func TestPreviewCountsTheJobsAhead(t *testing.T) {
	dir := t.TempDir()
	st := sqlitetest.Open(t, dir)
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	queue := []domain.QueueEntry{
		{JobID: 1, Pool: "default", Priority: domain.PriorityHigh, EstimatedStart: now.Add(time.Hour)},
		{JobID: 2, Pool: "default", Priority: domain.PriorityNormal, EstimatedStart: now.Add(3 * time.Hour)},
		{JobID: 3, Pool: "default", Priority: domain.PriorityNormal},
		{JobID: 4, Pool: "default", Priority: domain.PriorityLow, EstimatedStart: now.Add(9 * time.Hour)},
	}
	var asked string
	svc := service.New(service.Config{Store: st, Clock: clock.NewFake(now), ArtifactsRoot: filepath.Join(dir, "artifacts"),
		Queue: func(_ context.Context, pool string) ([]service.QueueEntry, error) { asked = pool; return queue, nil }})
	pool := domain.Pool{Name: "default", Nodes: []domain.Node{{Name: "n1", CPUs: 8, Memory: 32 << 30}}}
	if _, _, err := svc.Pools.PutPool(context.Background(), admin, pool); err != nil {
		t.Fatal(err)
	}
	pv, err := svc.Jobs.Preview(context.Background(), admin, service.SubmitInput{Doc: []byte("name: probe\nentrypoint: [true]\n")})
	if err != nil {
		t.Fatal(err)
	}
	if asked != "default" || !pv.QueueKnown || pv.Waiting != 4 || pv.Ahead != 3 || !pv.AheadStart.Equal(now.Add(3*time.Hour)) {
		t.Fatalf("preview queue: asked %q, known %v, waiting %d, ahead %d, last start %v; want default, true, 4, 3, %v",
			asked, pv.QueueKnown, pv.Waiting, pv.Ahead, pv.AheadStart, now.Add(3*time.Hour))
	}
	if pv.Pool.Name != "default" || pv.Spec.Name != "probe" || pv.SpecHash == "" {
		t.Fatalf("preview = %+v", pv)
	}
	if n, _ := st.CountJobs(context.Background()); n[domain.JobQueued] != 0 {
		t.Fatalf("a preview stored a job: %v", n)
	}
}
