package service_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"trainyard/internal/artifacts"
	"trainyard/internal/blob"
	blobfs "trainyard/internal/blob/fs"
	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/executor/local"
	"trainyard/internal/logs"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite/sqlitetest"
	"trainyard/internal/tier"
)

// tierEnv is a service over SQLite, a fake clock, jobs' outputs on disk
// (read as the local executor reads them) and an object store on disk.
type tierEnv struct {
	svc *service.Service
	st  store.Store
	clk *clock.Fake
	bs  blob.Store
}

func newTierEnv(t testing.TB, lifecycle ...artifacts.LifecyclePolicy) tierEnv {
	return newTierEnvRetention(t, nil, lifecycle...)
}

func newTierEnvRetention(t testing.TB, retention []artifacts.Policy, lifecycle ...artifacts.LifecyclePolicy) tierEnv {
	t.Helper()
	dir := t.TempDir()
	st := sqlitetest.Open(t, dir)
	bs, err := blobfs.New(filepath.Join(dir, "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.Close() })
	clk := clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	layout := logs.Layout{Root: filepath.Join(dir, "runs")}
	svc := service.New(service.Config{Store: st, Clock: clk, ArtifactsRoot: filepath.Join(dir, "artifacts"), Logs: layout,
		Files: local.NewReader(layout.Root), Blobs: bs, Lifecycle: lifecycle, Retention: retention})
	pool := domain.Pool{Name: "default", Nodes: []domain.Node{{Name: "n1", CPUs: 8, Memory: 32 << 30}},
		Rates: domain.Rates{LocalGiBMonth: 3 * domain.MoneyUnit, ObjectGiBMonth: 600_000}} // 3.00 and 0.60 per GiB-month
	if _, _, err := svc.Pools.PutPool(context.Background(), admin, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Pools.SetQuota(context.Background(), admin, domain.Quota{Project: "default", Pool: "default",
		Guaranteed: pool.Capacity(), MaxPriority: domain.PriorityUrgent}); err != nil {
		t.Fatal(err)
	}
	return tierEnv{svc: svc, st: st, clk: clk, bs: bs}
}

func (e tierEnv) submit(t testing.TB) domain.Job {
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

// Storage cost follows a checkpoint between tiers: the days it was on
// local disk are priced at the pool's local rate, the days only the object
// store held it at the object rate, to the cent; accruing again (another
// server over the same store) counts nothing twice.
func TestStorageCostFollowsACheckpointBetweenTiers(t *testing.T) {
	e := newTierEnv(t, artifacts.LifecyclePolicy{KeepLocal: ptr(0)})
	ctx := context.Background()
	// 3072.00 per GiB-month locally is 0.10 a day for 1 MiB; 614.40 in
	// the object store is 0.02.
	pool, err := e.st.GetPool(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	pool.Rates = domain.Rates{LocalGiBMonth: 3072 * domain.MoneyUnit, ObjectGiBMonth: 614_400_000}
	if _, _, err := e.svc.Pools.PutPool(ctx, admin, pool); err != nil {
		t.Fatal(err)
	}
	job := e.submit(t)
	e.checkpoint(t, job, "step-1", 1<<20) // on local disk from 2026-03-01 00:00
	e.clk.Advance(10 * 24 * time.Hour)
	if rep, err := e.svc.Artifacts.LifecyclePass(ctx); err != nil || len(rep.Deletions) != 1 {
		t.Fatalf("lifecycle pass: %+v, %v; want step-1 moved", rep, err)
	}
	e.clk.Advance(15 * 24 * time.Hour) // 2026-03-26 00:00
	if n, err := e.svc.Artifacts.AccrueStorage(ctx); err != nil || n != 25 {
		t.Fatalf("accrued %d days, %v; want 25 (March 1 to 25)", n, err)
	}
	check := func(svc *service.Service) {
		t.Helper()
		rep, err := svc.Cost.StorageReport(ctx, admin, service.CostQuery{Window: 30 * 24 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		l := rep.Total
		if l.LocalCost.Cents() != "1.00" || l.ObjectCost.Cents() != "0.30" || l.Cost.Cents() != "1.30" ||
			l.LocalGiBDays != 10.0/1024 || l.ObjectGiBDays != 15.0/1024 || len(rep.Lines) != 1 || rep.Lines[0].Group != "default" {
			t.Fatalf("storage report = %+v; want 10 local days (1.00) and 15 object days (0.30) for project default", rep)
		}
		byDay, err := svc.Cost.StorageReport(ctx, admin, service.CostQuery{Window: 30 * 24 * time.Hour, By: "day"})
		if err != nil || len(byDay.Lines) != 25 || byDay.Lines[9].Group != "2026-03-10" || byDay.Lines[9].LocalCost.Cents() != "0.10" ||
			byDay.Lines[10].ObjectCost.Cents() != "0.02" || byDay.Lines[10].LocalCost != 0 {
			t.Fatalf("by day = %+v, %v; want 0.10 local through March 10, then 0.02 object", byDay.Lines, err)
		}
	}
	check(e.svc)
	again := service.New(service.Config{Store: e.st, Clock: e.clk})
	if n, err := again.Artifacts.AccrueStorage(ctx); err != nil || n != 0 {
		t.Fatalf("a fresh server accrued %d days, %v; want none (all are written)", n, err)
	}
	check(again)
}

// A retention deletion removes the checkpoint's object copy too.
func TestRetentionDeletesTheObjectCopy(t *testing.T) {
	e := newTierEnvRetention(t, []artifacts.Policy{{Checkpoints: domain.Duration(time.Hour)}})
	ctx := context.Background()
	job := e.submit(t)
	rec := e.checkpoint(t, job, "step-1", 10)
	o, err := local.NewReader(t.TempDir()).Outputs(ctx, job.OutputDir)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if err := tier.Copy(ctx, e.bs, o, rec); err != nil { // as the control loop does when the attempt ends
		t.Fatal(err)
	}
	if err := e.st.MarkCheckpointCopied(ctx, job.ID, "step-1", rec.SHA256, e.clk.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Jobs.Cancel(ctx, admin, job.ID, ""); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(2 * time.Hour)
	rep, err := e.svc.Artifacts.GC(ctx, admin, false)
	if err != nil || len(rep.Deletions) != 1 || rep.Deletions[0].Path != "step-1" || len(rep.Failed) != 0 {
		t.Fatalf("gc = %+v, %v; want step-1 deleted", rep, err)
	}
	if _, _, err := tier.List(ctx, e.bs, rec); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("the object copy after gc: %v, want none", err)
	}
	if got := e.tiers(t, job); len(got) != 0 {
		t.Fatalf("kept checkpoints after gc: %v", got)
	}
}

// A step that fails is tried again by a full pass within the hour; a
// checkpoint whose local copy changed since it was registered is not
// moved (its copy would not be the checkpoint).
func TestLifecycleRetriesAFailedMove(t *testing.T) {
	e := newTierEnv(t, artifacts.LifecyclePolicy{KeepLocal: ptr(0)})
	ctx := context.Background()
	job := e.submit(t)
	e.checkpoint(t, job, "step-1", 10)
	weights := filepath.Join(job.OutputDir, "checkpoints", "step-1", "weights")
	if err := os.WriteFile(weights, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(2 * time.Hour)
	rep, err := e.svc.Artifacts.LifecyclePass(ctx)
	if err != nil || len(rep.Failed) != 1 || len(rep.Deletions) != 0 {
		t.Fatalf("pass over a changed checkpoint: %+v, %v; want the move refused", rep, err)
	}
	if err := os.WriteFile(weights, make([]byte, 10), 0o644); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(30 * time.Minute)
	if rep, err := e.svc.Artifacts.LifecyclePass(ctx); err != nil || len(rep.Deletions)+len(rep.Failed) != 0 {
		t.Fatalf("incremental pass: %+v, %v; want nothing (step-1 is older than its window)", rep, err)
	}
	e.clk.Advance(31 * time.Minute)
	if rep, err := e.svc.Artifacts.LifecyclePass(ctx); err != nil || len(rep.Deletions) != 1 || rep.Deletions[0].Kind != "move" {
		t.Fatalf("the full pass within the hour: %+v, %v; want step-1 moved", rep, err)
	}
	if got := e.tiers(t, job); got["step-1"] != "object" {
		t.Fatalf("tiers = %v", got)
	}
}
