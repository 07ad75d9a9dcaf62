package service_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"trainyard/internal/artifacts"
	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/executor/local"
	"trainyard/internal/service"
	"trainyard/internal/store/sqlite/sqlitetest"
)

// A job that made its checkpoint's marker a symbolic link to a file
// elsewhere cannot get the server to truncate (or create) that file when
// the checkpoint is marked complete.
func TestCompleteCheckpointLeavesAPlantedMarkerLinkAlone(t *testing.T) {
	e := newLogEnv(t)
	ctx := context.Background()
	id := e.job(t, "ck", false)
	job, err := e.st.GetJob(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(job.OutputDir, "checkpoints", "x")
	if err := os.MkdirAll(ck, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(ck, ".complete")); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.Artifacts.CompleteCheckpoint(ctx, admin, id, 1, "x")
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Fatalf("the file the marker links to now holds %q (err %v)", b, err)
	}
	if err == nil {
		t.Fatal("a checkpoint whose marker is a link was marked complete")
	}
}

// gc removes a report the job replaced by a link (or a link to a
// directory elsewhere standing for a checkpoint) as a link: what it points
// to stays; and a report whose directory the job replaced by a link
// elsewhere is out of its reach.
func TestGCRemovesLinksNotTheirTargets(t *testing.T) {
	dir := t.TempDir()
	st := sqlitetest.Open(t, dir)
	clk := clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	day := domain.Duration(24 * time.Hour)
	svc := service.New(service.Config{Store: st, Clock: clk, ArtifactsRoot: filepath.Join(dir, "artifacts"),
		Files: local.NewReader(filepath.Join(dir, "runs")), Retention: []artifacts.Policy{{Checkpoints: day, Reports: day}}})
	ctx := context.Background()
	pool := domain.Pool{Name: "default", Nodes: []domain.Node{{Name: "n1", CPUs: 8, Memory: 32 << 30}}}
	if _, _, err := svc.Pools.PutPool(ctx, admin, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Pools.SetQuota(ctx, admin, domain.Quota{Project: "default", Pool: "default", Guaranteed: pool.Capacity(), MaxPriority: domain.PriorityUrgent}); err != nil {
		t.Fatal(err)
	}
	job, _, err := svc.Jobs.Submit(ctx, admin, service.SubmitInput{Doc: []byte("name: old\nentrypoint: [true]\n")})
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	for _, p := range []string{filepath.Join(elsewhere, "r.txt"), filepath.Join(elsewhere, "ck", "state"), filepath.Join(elsewhere, "reports", "r.txt")} {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := job.OutputDir
	os.MkdirAll(filepath.Join(out, "eval"), 0o755)
	os.MkdirAll(filepath.Join(out, "checkpoints"), 0o755)
	for link, target := range map[string]string{filepath.Join(out, "eval", "r.txt"): filepath.Join(elsewhere, "r.txt"),
		filepath.Join(out, "checkpoints", "ck"): filepath.Join(elsewhere, "ck"), filepath.Join(out, "reports"): filepath.Join(elsewhere, "reports")} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.RecordManifest(ctx, domain.Manifest{JobID: job.ID, Attempt: 1, At: clk.Now(), Files: []domain.ArtifactFile{{Path: "eval/r.txt", Size: 4}, {Path: "reports/r.txt", Size: 4}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RecordCheckpoint(ctx, domain.CheckpointRecord{JobID: job.ID, Attempt: 1, Name: "ck", Path: filepath.Join(out, "checkpoints", "ck"), At: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Jobs.Cancel(ctx, admin, job.ID, ""); err != nil {
		t.Fatal(err)
	}
	clk.Advance(48 * time.Hour)
	rep, err := svc.Artifacts.GC(ctx, admin, false)
	if err != nil || len(rep.Deletions) != 2 || len(rep.Failed) != 0 {
		t.Fatalf("gc = %+v, %v; want the report and the checkpoint removed", rep, err)
	}
	for _, p := range []string{filepath.Join(out, "eval", "r.txt"), filepath.Join(out, "checkpoints", "ck")} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still there: %v", p, err)
		}
	}
	for _, p := range []string{filepath.Join(elsewhere, "r.txt"), filepath.Join(elsewhere, "ck", "state"), filepath.Join(elsewhere, "reports", "r.txt")} {
		if b, err := os.ReadFile(p); string(b) != "keep" {
			t.Errorf("%s, a link's target, is gone or changed: %q %v", p, b, err)
		}
	}
}
