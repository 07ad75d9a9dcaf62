package control_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	blobfs "trainyard/internal/blob/fs"
	"trainyard/internal/clock"
	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/executor/local"
	"trainyard/internal/logs"
	"trainyard/internal/service"
)

// envOf returns one variable of a launch's environment.
func envOf(l executor.Launch, key string) string { return envValue(l.Env, key) }

// When an attempt ends, the loop records the manifest and lineage, registers
// complete checkpoints, keeps checkpoint.keep of them, copies the kept ones
// to the object store, and makes a succeeded job's outputs read-only.
func TestOutputsAndCheckpointsAreRecorded(t *testing.T) {
	st, dir := openStore(t)
	bs, err := blobfs.New(filepath.Join(dir, "objects"))
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	ex := &executortest.Fake{Script: func(l executor.Launch) []executor.Event {
		out, ck := envOf(l, "TRAINYARD_OUTPUT_DIR"), envOf(l, "TRAINYARD_CHECKPOINT_DIR")
		for i, name := range []string{"step-1", "step-2", "step-3", "step-4"} {
			os.MkdirAll(filepath.Join(ck, name), 0o755)
			os.WriteFile(filepath.Join(ck, name, "state"), []byte(name), 0o644)
			if name != "step-4" { // still being written
				os.WriteFile(filepath.Join(ck, name, domain.CheckpointMarker), nil, 0o644)
			}
			at := time.Now().Add(time.Duration(i-10) * time.Minute)
			os.Chtimes(filepath.Join(ck, name, domain.CheckpointMarker), at, at)
		}
		os.WriteFile(filepath.Join(out, "model.pt"), []byte("weights"), 0o644)
		return []executor.Event{{Kind: executor.Started, PID: 1}, exited(domain.AttemptSucceeded, domain.ReasonCompleted, 0)}
	}}
	layout := logs.Layout{Root: filepath.Join(dir, "runs")}
	ctl := control.New(control.Config{Store: st, Executor: onDisk{ex, local.NewReader(layout.Root)}, Clock: clock.Real{}, Logs: layout,
		BaseEnv: []string{"PATH=/usr/bin:/bin"}, Blobs: bs, CopyCheckpoints: true})
	inputs, err := service.DataRoots{Default: []string{filepath.Join(dir, "datasets")}}.Resolve(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	svc := service.New(service.Config{Store: st, Logs: layout, ArtifactsRoot: filepath.Join(dir, "artifacts"), InputRoots: inputs, Wake: ctl.Wake})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctl.Run(ctx) }()
	defer func() { cancel(); <-done }()
	r := &rig{t: t, st: st, svc: svc, ex: ex, dir: dir}
	pool := domain.Pool{Name: "default", Executor: "local", Nodes: []domain.Node{{Name: "fake", CPUs: 8, Memory: 64 << 30}}}
	if _, _, err := svc.Pools.PutPool(ctx, admin, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Pools.SetQuota(ctx, admin, domain.Quota{Project: "default", Pool: "default", Guaranteed: pool.Capacity(), MaxPriority: domain.PriorityUrgent}); err != nil {
		t.Fatal(err)
	}
	j := r.submit("name: ck\nentrypoint: [train]\ncheckpoint: {keep: 2}\ninputs: [{name: imagenet, path: " + filepath.Join(dir, "datasets", "imagenet") + ", version: v2}]\n")
	r.wait(j.ID, domain.JobSucceeded)

	var m domain.Manifest
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m, err = st.GetManifest(ctx, j.ID, 0); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no manifest: %v", err)
		}
		time.Sleep(5 * time.Millisecond) // polling the store
	}
	if len(m.Files) != 1 || m.Files[0].Path != "model.pt" || m.Lineage.State != "succeeded" || m.Lineage.Env != "host@1" && m.Lineage.Env != "host" ||
		len(m.Lineage.Inputs) != 1 || m.Lineage.Submitter == "" {
		t.Fatalf("manifest = %+v", m)
	}
	cks, _ := st.ListCheckpoints(ctx, j.ID, false)
	if len(cks) != 2 || cks[0].Name != "step-2" || cks[1].Name != "step-3" {
		t.Fatalf("kept checkpoints = %+v, want step-2 and step-3", cks)
	}
	out := j.OutputDir
	if _, err := os.Stat(filepath.Join(out, "checkpoints", "step-1")); !os.IsNotExist(err) {
		t.Errorf("step-1 beyond keep still on disk (%v)", err)
	}
	for _, name := range []string{"step-2", "step-3"} {
		rc, _, err := bs.Get(ctx, control.CheckpointKey(j.ID, name, "state"))
		if err != nil {
			t.Fatalf("checkpoint %s not copied: %v", name, err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != name {
			t.Errorf("copied %s holds %q", name, b)
		}
	}
	if _, _, err := bs.Get(ctx, control.CheckpointKey(j.ID, "step-1", "state")); err == nil {
		t.Error("step-1, removed by keep, was copied")
	}
	if fi, err := os.Stat(filepath.Join(out, "model.pt")); err != nil || fi.Mode().Perm()&0o222 != 0 {
		t.Errorf("a succeeded job's output is writable: %v %v", fi.Mode(), err)
	}
}

// Outputs still owed when the server stopped (their marker is in the
// attempt directory) are recorded at the next start.
func TestOwedOutputsAreRecordedAfterRestart(t *testing.T) {
	r := newRig(t, &executortest.Fake{})
	j := r.submit("name: owed\nentrypoint: [train]\n")
	r.wait(j.ID, domain.JobSucceeded)
	ctx := context.Background()
	manifest := func() (domain.Manifest, error) { return r.st.GetManifest(ctx, j.ID, 0) }
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := manifest(); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no manifest")
		}
		time.Sleep(5 * time.Millisecond) // polling the store
	}
	r.stop()
	r.stop = nil
	// The attempt's outputs changed and their recording was cut short.
	out := j.OutputDir
	os.Chmod(out, 0o755)
	if err := os.WriteFile(filepath.Join(out, "late.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(r.dir, "state", "outputs-pending", fmt.Sprintf("%d-1", j.ID))
	os.MkdirAll(filepath.Dir(marker), 0o755)
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r.start()
	deadline = time.Now().Add(10 * time.Second)
	for {
		m, err := manifest()
		if err == nil && len(m.Files) == 1 && m.Files[0].Path == "late.txt" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("manifest after restart = %+v, %v; want late.txt", m, err)
		}
		time.Sleep(5 * time.Millisecond) // polling the store
	}
	waitGone := time.Now().Add(10 * time.Second)
	for fileExists(marker) {
		if time.Now().After(waitGone) {
			t.Fatal("the marker stayed after the outputs were recorded")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// A job's outputs are its own: links it plants to files and directories
// elsewhere (a file the server may read, another directory with a
// complete checkpoint in it) are not hashed, listed, sealed, registered or
// copied to the object store, a link planted as a checkpoint's marker is
// not followed, and a fifo does not hold the server.
func TestHostileOutputsStayInTheirDirectory(t *testing.T) {
	bs, err := blobfs.New(filepath.Join(t.TempDir(), "objects"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.Close() })
	elsewhere := t.TempDir()
	victim := filepath.Join(elsewhere, "shadow")
	if err := os.WriteFile(victim, []byte("secret"), 0o640); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(elsewhere, "ckpt"), 0o755)
	os.WriteFile(filepath.Join(elsewhere, "ckpt", "state"), []byte("stolen"), 0o644)
	os.WriteFile(filepath.Join(elsewhere, "ckpt", domain.CheckpointMarker), nil, 0o644)
	ex := &executortest.Fake{Script: func(l executor.Launch) []executor.Event {
		out, ck := envOf(l, "TRAINYARD_OUTPUT_DIR"), envOf(l, "TRAINYARD_CHECKPOINT_DIR")
		os.WriteFile(filepath.Join(out, "model.pt"), []byte("weights"), 0o644)
		os.Symlink(victim, filepath.Join(out, "output.txt"))
		syscall.Mkfifo(filepath.Join(out, "fifo"), 0o644)
		os.MkdirAll(filepath.Join(ck, "x"), 0o755)
		os.Symlink(victim, filepath.Join(ck, "x", domain.CheckpointMarker))
		os.Symlink(filepath.Join(elsewhere, "ckpt"), filepath.Join(ck, "evil"))
		os.MkdirAll(filepath.Join(ck, "own"), 0o755)
		os.WriteFile(filepath.Join(ck, "own", "state"), []byte("own"), 0o644)
		os.Symlink(victim, filepath.Join(ck, "own", "leak"))
		os.WriteFile(filepath.Join(ck, "own", domain.CheckpointMarker), nil, 0o644)
		return []executor.Event{{Kind: executor.Started, PID: 1}, exited(domain.AttemptSucceeded, domain.ReasonCompleted, 0)}
	}}
	r := newTunedRig(t, ex, func(c *control.Config) { c.Blobs, c.CopyCheckpoints = bs, true })
	st, ctx := r.st, context.Background()
	j := r.submit("name: hostile\nentrypoint: [train]\n")
	r.wait(j.ID, domain.JobSucceeded)
	var m domain.Manifest
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m, err = st.GetManifest(ctx, j.ID, 0); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no manifest: %v", err)
		}
		time.Sleep(5 * time.Millisecond) // polling the store
	}
	if len(m.Files) != 1 || m.Files[0].Path != "model.pt" {
		t.Errorf("manifest = %+v, want model.pt alone", m.Files)
	}
	if b, _ := os.ReadFile(victim); string(b) != "secret" {
		t.Errorf("the linked file now holds %q", b)
	}
	if fi, _ := os.Stat(victim); fi.Mode().Perm() != 0o640 {
		t.Errorf("the linked file's mode changed to %v", fi.Mode())
	}
	cks, _ := st.ListCheckpoints(ctx, j.ID, false)
	if len(cks) != 1 || cks[0].Name != "own" || cks[0].Files != 2 {
		t.Errorf("registered checkpoints = %+v, want own alone (its state and marker)", cks)
	}
	if _, _, err := bs.Get(ctx, control.CheckpointKey(j.ID, "own", "state")); err != nil {
		t.Errorf("own checkpoint not copied: %v", err)
	}
	for _, key := range []string{control.CheckpointKey(j.ID, "own", "leak"), control.CheckpointKey(j.ID, "evil", "state")} {
		if _, _, err := bs.Get(ctx, key); err == nil {
			t.Errorf("%s was copied to the object store", key)
		}
	}
	t.Cleanup(func() {
		filepath.Walk(j.OutputDir, func(p string, _ os.FileInfo, _ error) error { return os.Chmod(p, 0o755) })
	})
}

// checkpoint.keep: 0 keeps every complete checkpoint (it used to mean the
// default, 3); keep: 1 keeps the newest only.
func TestCheckpointKeepZeroKeepsAll(t *testing.T) {
	ex := &executortest.Fake{Script: func(l executor.Launch) []executor.Event {
		ck := envOf(l, "TRAINYARD_CHECKPOINT_DIR")
		for i := range 5 {
			dir := filepath.Join(ck, fmt.Sprintf("step-%d", i))
			os.MkdirAll(dir, 0o755)
			os.WriteFile(filepath.Join(dir, "state"), []byte{byte(i)}, 0o644)
			os.WriteFile(filepath.Join(dir, domain.CheckpointMarker), nil, 0o644)
			at := time.Now().Add(time.Duration(i-10) * time.Minute)
			os.Chtimes(filepath.Join(dir, domain.CheckpointMarker), at, at)
		}
		return []executor.Event{{Kind: executor.Started, PID: 1}, exited(domain.AttemptSucceeded, domain.ReasonCompleted, 0)}
	}}
	r := newRig(t, ex)
	for keep, want := range map[int]int{0: 5, 1: 1} {
		j := r.submit(fmt.Sprintf("name: ck\nentrypoint: [train]\ncheckpoint: {keep: %d}\n", keep))
		r.wait(j.ID, domain.JobSucceeded)
		// The job succeeds only once its outputs and checkpoints are
		// recorded.
		if cks, _ := r.st.ListCheckpoints(context.Background(), j.ID, false); len(cks) != want {
			t.Errorf("keep %d: %d checkpoint(s) recorded, want %d", keep, len(cks), want)
		}
		ents, _ := os.ReadDir(filepath.Join(j.OutputDir, "checkpoints"))
		if len(ents) != want {
			t.Errorf("keep %d: %d checkpoint(s) on disk, want %d", keep, len(ents), want)
		}
	}
}
