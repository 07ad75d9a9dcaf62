package service_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"trainyard/internal/artifacts"
	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/service"
	"trainyard/internal/store/sqlite"
	"trainyard/internal/store/sqlite/sqlitetest"
)

// fileSum is the SHA-256 of data, hex.
func fileSum(data string) string {
	s := sha256.Sum256([]byte(data))
	return hex.EncodeToString(s[:])
}

// dirDigest is the digest executor.Outputs.Digest gives a directory
// checkpoint of files (path → content, the marker left out).
func dirDigest(files map[string]string) string {
	var paths []string
	for p := range files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var b strings.Builder
	for _, p := range paths {
		fmt.Fprintf(&b, "%s  %d  %s\n", fileSum(files[p]), len(files[p]), p)
	}
	return fileSum(b.String())
}

// fakeEnv is a service whose jobs' outputs are the in-memory Fake's: no
// output directory exists on this machine, as with a cluster executor
// serving them from object storage.
type fakeEnv struct {
	svc  *service.Service
	st   *sqlite.Store
	clk  *clock.Fake
	fake *executortest.Fake
}

func newFakeEnv(t *testing.T, retention ...artifacts.Policy) fakeEnv {
	t.Helper()
	dir := t.TempDir()
	st := sqlitetest.Open(t, dir)
	clk := clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	fake := &executortest.Fake{}
	svc := service.New(service.Config{Store: st, Clock: clk, ArtifactsRoot: filepath.Join(dir, "artifacts"), Files: fake, Retention: retention})
	ctx := context.Background()
	pool := domain.Pool{Name: "default", Nodes: []domain.Node{{Name: "n1", CPUs: 8, Memory: 32 << 30}}}
	if _, _, err := svc.Pools.PutPool(ctx, admin, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Pools.SetQuota(ctx, admin, domain.Quota{Project: "default", Pool: "default", Guaranteed: pool.Capacity(), MaxPriority: domain.PriorityUrgent}); err != nil {
		t.Fatal(err)
	}
	return fakeEnv{svc: svc, st: st, clk: clk, fake: fake}
}

// job submits a job and plays an attempt of it on the Fake that leaves
// steps' files in its outputs.
func (e fakeEnv) job(t *testing.T, steps ...executortest.Step) domain.Job {
	t.Helper()
	ctx := context.Background()
	job, _, err := e.svc.Jobs.Submit(ctx, admin, service.SubmitInput{Doc: []byte("name: remote\nentrypoint: [true]\n")})
	if err != nil {
		t.Fatal(err)
	}
	l := executor.Launch{Ref: executor.Ref{JobID: job.ID, Attempt: 1}, Argv: executortest.Program{Steps: steps}.Argv(),
		Env: []string{"TRAINYARD_OUTPUT_DIR=" + job.OutputDir, "TRAINYARD_CHECKPOINT_DIR=" + job.OutputDir + "/" + executor.CheckpointsDir}}
	if err := e.fake.Launch(ctx, l); err != nil {
		t.Fatal(err)
	}
	for len(e.fake.Events()) > 0 {
		<-e.fake.Events()
	}
	return job
}

// The service reaches a job's outputs through the executor alone: files,
// checkpoints and gc work on outputs that are nowhere on this machine.
func TestOutputsAreReadThroughTheExecutor(t *testing.T) {
	day := domain.Duration(24 * time.Hour)
	e := newFakeEnv(t, artifacts.Policy{Checkpoints: day, Reports: day})
	ctx := context.Background()
	job := e.job(t,
		executortest.Step{File: &executortest.FileStep{Path: "model.bin", Data: "weights"}},
		executortest.Step{File: &executortest.FileStep{Path: "eval/r.txt", Data: "report"}},
		executortest.Step{Checkpoint: &executortest.CheckpointStep{Name: "step-1", Files: map[string]string{"w": "one", "sub/o": "opt"}, Complete: true}},
		executortest.Step{Checkpoint: &executortest.CheckpointStep{Name: "step-2", Files: map[string]string{"w": "two"}}},
	)
	if _, err := os.Lstat(job.OutputDir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the job's output directory is on disk (%v): the test would not show the executor is used", err)
	}
	if err := e.st.RecordManifest(ctx, domain.Manifest{JobID: job.ID, Attempt: 1, At: e.clk.Now(), Files: []domain.ArtifactFile{
		{Path: "eval/r.txt", Size: 6, SHA256: fileSum("report")}, {Path: "gone.txt", Size: 1}, {Path: "model.bin", Size: 7, SHA256: fileSum("weights")}}}); err != nil {
		t.Fatal(err)
	}

	a, err := e.svc.Artifacts.OpenArtifact(ctx, admin, job.ID, "model.bin")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(a.File)
	a.File.Close()
	if string(b) != "weights" || a.File.Size != 7 || a.File.ModTime.IsZero() || a.SHA256 != fileSum("weights") {
		t.Errorf("model.bin: %q, size %d, mod time %v, sha256 %s", b, a.File.Size, a.File.ModTime, a.SHA256)
	}
	if _, err := e.svc.Artifacts.OpenArtifact(ctx, admin, job.ID, "gone.txt"); !errors.Is(err, domain.ErrNotFound) || !strings.Contains(err.Error(), "no longer on disk") {
		t.Errorf("a listed file the executor lacks: %v, want not found, no longer on disk", err)
	}

	if _, err := e.st.RecordCheckpoint(ctx, domain.CheckpointRecord{JobID: job.ID, Attempt: 1, Name: "step-1", Size: 6, Files: 2, At: e.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	c, err := e.svc.Artifacts.OpenCheckpoint(ctx, admin, job.ID, "step-1")
	if err != nil {
		t.Fatal(err)
	}
	var walked []string
	err = c.Walk(ctx, func(rel string, _ int64, _ time.Time, f io.Reader) error {
		b, err := io.ReadAll(f)
		walked = append(walked, rel+"="+string(b))
		return err
	})
	c.Close()
	if want := "[step-1/.complete= step-1/sub/o=opt step-1/w=one]"; err != nil || fmt.Sprint(walked) != want {
		t.Errorf("checkpoint step-1 walks %v, %v; want %s", walked, err, want)
	}

	// Marking a checkpoint complete writes its marker through the executor.
	rec, err := e.svc.Artifacts.CompleteCheckpoint(ctx, admin, job.ID, 1, "step-2")
	registered := err == nil
	o, oerr := e.fake.Outputs(ctx, job.OutputDir)
	if oerr != nil {
		t.Fatal(oerr)
	}
	if m, err := o.Open(ctx, "checkpoints/step-2/"+domain.CheckpointMarker); err != nil {
		t.Errorf("the marker of step-2 was not written: %v", err)
	} else {
		m.Close()
	}
	// Size and Files count the marker, as listings do; the digest leaves
	// it out.
	switch {
	case err != nil:
		t.Errorf("complete step-2: %v", err)
	case rec.Size != 3 || rec.Files != 2 || rec.SHA256 != dirDigest(map[string]string{"w": "two"}):
		t.Errorf("step-2 recorded as %+v; want 3 bytes, 2 files (its data and marker), its digest", rec)
	}

	// gc removes a report and a checkpoint through the executor.
	if _, err := e.svc.Jobs.Cancel(ctx, admin, job.ID, ""); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(48 * time.Hour)
	dry, err := e.svc.Artifacts.GC(ctx, admin, true)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := e.svc.Artifacts.GC(ctx, admin, false)
	if err != nil || len(rep.Failed) != 0 || fmt.Sprint(rep.Deletions) != fmt.Sprint(dry.Deletions) {
		t.Fatalf("gc = %+v, %v; dry run %+v", rep, err, dry)
	}
	var removed []string
	for _, d := range rep.Deletions {
		removed = append(removed, d.Kind+":"+d.Path)
	}
	want := "[checkpoint:step-1 output:eval/r.txt]"
	if registered {
		want = "[checkpoint:step-1 checkpoint:step-2 output:eval/r.txt]"
	}
	if fmt.Sprint(removed) != want {
		t.Errorf("gc removed %v, want %s (gone.txt is gone already)", removed, want)
	}
	for _, p := range []string{"eval/r.txt", "checkpoints/step-1/w"} {
		if f, err := o.Open(ctx, p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is still there after gc: %v", p, err)
			if err == nil {
				f.Close()
			}
		}
	}
	if f, err := o.Open(ctx, "model.bin"); err != nil {
		t.Errorf("model.bin, no report, is gone: %v", err)
	} else {
		f.Close()
	}
	if again, err := e.svc.Artifacts.GC(ctx, admin, true); err != nil || len(again.Deletions) != 0 {
		t.Errorf("gc after gc plans %+v, %v; want nothing", again.Deletions, err)
	}
}

// CompleteCheckpoint on the local executor: a directory gets its marker
// inside, a single file its NAME.complete beside it, and both are
// registered with their digests; what is no checkpoint is refused as
// before.
func TestCompleteCheckpoint(t *testing.T) {
	e := newLogEnv(t)
	ctx := context.Background()
	id := e.job(t, "ck", false)
	job, err := e.st.GetJob(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	ckpts := filepath.Join(job.OutputDir, "checkpoints")
	write := func(rel, data string) {
		t.Helper()
		p := filepath.Join(ckpts, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("step-1/model", "weights")
	write("step-1/opt/state", "adam")
	write("last.pt", "whole")

	t.Run("directory", func(t *testing.T) {
		rec, err := e.svc.Artifacts.CompleteCheckpoint(ctx, admin, id, 1, "step-1")
		if fi, err := os.Lstat(filepath.Join(ckpts, "step-1", domain.CheckpointMarker)); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("no marker in step-1: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		want := domain.CheckpointRecord{JobID: id, Attempt: 1, Name: "step-1", Path: filepath.Join(ckpts, "step-1"), Size: 11, Files: 3,
			SHA256: dirDigest(map[string]string{"model": "weights", "opt/state": "adam"}), At: rec.At}
		if rec != want {
			t.Errorf("recorded %+v, want %+v", rec, want)
		}
		cs, err := e.svc.Artifacts.Checkpoints(ctx, admin, id)
		if err != nil || len(cs) != 1 || cs[0].Name != "step-1" || cs[0].Size != 11 || cs[0].Files != 3 {
			t.Errorf("checkpoints = %+v, %v", cs, err)
		}
	})
	t.Run("file", func(t *testing.T) {
		rec, err := e.svc.Artifacts.CompleteCheckpoint(ctx, admin, id, 1, "last.pt")
		if fi, err := os.Lstat(filepath.Join(ckpts, "last.pt"+domain.CheckpointMarker)); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("no marker beside last.pt: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		if rec.Size != 5 || rec.Files != 1 || rec.SHA256 != fileSum("whole") || rec.Path != filepath.Join(ckpts, "last.pt") {
			t.Errorf("recorded %+v; want 5 bytes, 1 file, the file's sha256", rec)
		}
	})
	t.Run("refused", func(t *testing.T) {
		if err := os.Symlink(filepath.Join(ckpts, "step-1"), filepath.Join(ckpts, "link")); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(filepath.Join(ckpts, "fifo"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"missing", "link", "fifo"} {
			_, err := e.svc.Artifacts.CompleteCheckpoint(ctx, admin, id, 1, name)
			want := fmt.Sprintf("no checkpoint %q under TRAINYARD_CHECKPOINT_DIR of job %d (a directory or a regular file, not a link); write it first, then mark it complete", name, id)
			if !errors.Is(err, domain.ErrNotFound) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want not found: %s", name, err, want)
			}
		}
		for _, name := range []string{"", "a/b", ".hidden", "x.tmp", "last.pt" + domain.CheckpointMarker, "..", "."} {
			_, err := e.svc.Artifacts.CompleteCheckpoint(ctx, admin, id, 1, name)
			var fe domain.FieldErrors
			if !errors.As(err, &fe) || len(fe) != 1 || fe[0].Path != "name" || !strings.Contains(fe[0].Message, "is not a checkpoint name") {
				t.Errorf("name %q: %v, want a field error at name", name, err)
			}
		}
	})
}
