package service_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"trainyard/internal/artifacts"
	blobfs "trainyard/internal/blob/fs"
	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/executor/local"
	"trainyard/internal/logs"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
)

// tierEnv is a service over SQLite, a fake clock, jobs' outputs on disk
// (read as the local executor reads them) and an object store on disk.
type tierEnv struct {
	svc *service.Service
	st  store.Store
	clk *clock.Fake
}

func newTierEnv(t *testing.T, lifecycle ...artifacts.LifecyclePolicy) tierEnv {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	bs, err := blobfs.New(filepath.Join(dir, "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.Close() })
	clk := clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	layout := logs.Layout{Root: filepath.Join(dir, "runs")}
	svc := service.New(service.Config{Store: st, Clock: clk, ArtifactsRoot: filepath.Join(dir, "artifacts"), Logs: layout,
		Files: local.NewReader(layout.Root), Blobs: bs, Lifecycle: lifecycle})
	pool := domain.Pool{Name: "default", Nodes: []domain.Node{{Name: "n1", CPUs: 8, Memory: 32 << 30}},
		Rates: domain.Rates{LocalGiBMonth: 3 * domain.MoneyUnit, ObjectGiBMonth: 600_000}} // 3.00 and 0.60 per GiB-month
	if _, _, err := svc.Pools.PutPool(context.Background(), admin, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Pools.SetQuota(context.Background(), admin, domain.Quota{Project: "default", Pool: "default",
		Guaranteed: pool.Capacity(), MaxPriority: domain.PriorityUrgent}); err != nil {
		t.Fatal(err)
	}
	return tierEnv{svc: svc, st: st, clk: clk}
}

func (e tierEnv) submit(t *testing.T) domain.Job {
	t.Helper()
	job, _, err := e.svc.Jobs.Submit(context.Background(), admin, service.SubmitInput{Doc: []byte("name: tiers\nentrypoint: [true]\n")})
	if err != nil {
		t.Fatal(err)
	}
	return job
}

// checkpoint writes a directory checkpoint of size bytes into the job's
// tree and registers it at the fake clock's time.
func (e tierEnv) checkpoint(t *testing.T, job domain.Job, name string, size int) domain.CheckpointRecord {
	t.Helper()
	dir := filepath.Join(job.OutputDir, "checkpoints", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "weights"), make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	rec, err := e.svc.Artifacts.CompleteCheckpoint(context.Background(), admin, job.ID, 1, name)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func (e tierEnv) tiers(t *testing.T, job domain.Job) map[string]string {
	t.Helper()
	cs, err := e.st.ListCheckpoints(context.Background(), job.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, c := range cs {
		out[c.Name] = c.Tier()
	}
	return out
}

// The periodic pass moves what a new checkpoint pushed beyond keep_local
// and deletes what came of age since the pass before, from the
// checkpoints registered or due since (not a full pass: within a day of
// the first); it audits each step.
func TestLifecyclePassMovesAndDeletes(t *testing.T) {
	e := newTierEnv(t, artifacts.LifecyclePolicy{KeepLocal: ptr(1), DeleteAfter: domain.Duration(2 * time.Hour)})
	ctx := context.Background()
	job := e.submit(t)
	e.checkpoint(t, job, "step-1", 100)
	if rep, err := e.svc.Artifacts.LifecyclePass(ctx); err != nil || len(rep.Deletions) != 0 {
		t.Fatalf("first pass with one checkpoint: %+v, %v; want nothing to do", rep, err)
	}
	e.clk.Advance(time.Hour)
	e.checkpoint(t, job, "step-2", 100)
	rep, err := e.svc.Artifacts.LifecyclePass(ctx)
	if err != nil || len(rep.Deletions) != 1 || rep.Deletions[0].Kind != "move" || rep.Deletions[0].Path != "step-1" || len(rep.Failed) != 0 {
		t.Fatalf("pass after step-2: %+v, %v; want step-1 moved", rep, err)
	}
	if got := e.tiers(t, job); got["step-1"] != "object" || got["step-2"] != "local" {
		t.Fatalf("tiers = %v", got)
	}
	if _, err := os.Stat(filepath.Join(job.OutputDir, "checkpoints", "step-1")); !os.IsNotExist(err) {
		t.Fatalf("the moved checkpoint's local copy is left: %v", err)
	}
	e.clk.Advance(90 * time.Minute) // step-1 is 2h30m old, step-2 1h30m
	rep, err = e.svc.Artifacts.LifecyclePass(ctx)
	if err != nil || len(rep.Deletions) != 1 || rep.Deletions[0].Kind != "checkpoint" || rep.Deletions[0].Path != "step-1" {
		t.Fatalf("pass at 2h30m: %+v, %v; want step-1 deleted", rep, err)
	}
	if got := e.tiers(t, job); !slices.Equal([]string{got["step-1"], got["step-2"]}, []string{"", "local"}) {
		t.Fatalf("tiers = %v", got)
	}
	audit, err := e.st.ListAudit(ctx, store.AuditFilter{Action: "artifact.gc"})
	if err != nil || len(audit) != 2 || audit[0].Actor != "system:lifecycle" {
		t.Fatalf("audit = %+v, %v; want the move and the deletion by system:lifecycle", audit, err)
	}
}

func ptr[T any](v T) *T { return &v }
