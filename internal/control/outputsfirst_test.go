package control_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
)

// writesOutput is a script whose attempt writes an output of size bytes
// and succeeds.
func writesOutput(size int) func(l executor.Launch) []executor.Event {
	return func(l executor.Launch) []executor.Event {
		os.WriteFile(filepath.Join(envOf(l, "TRAINYARD_OUTPUT_DIR"), "model.bin"), bytes.Repeat([]byte{7}, size), 0o644)
		return []executor.Event{{Kind: executor.Started, PID: 1}, exited(domain.AttemptSucceeded, domain.ReasonCompleted, 0)}
	}
}

// A job is succeeded only once its outputs are recorded: whoever sees it
// succeeded (submit --wait) lists them at once, however long hashing takes.
func TestSucceededJobHasItsOutputsRecorded(t *testing.T) {
	r := newRig(t, &executortest.Fake{Script: writesOutput(32 << 20)})
	ctx := context.Background()
	for range 3 {
		j := r.submit("name: big\nentrypoint: [train]\n")
		r.wait(j.ID, domain.JobSucceeded)
		m, err := r.st.GetManifest(ctx, j.ID, 0)
		if err != nil {
			t.Fatalf("job %d succeeded without its manifest: %v", j.ID, err)
		}
		if len(m.Files) != 1 || m.Files[0].Path != "model.bin" || m.Files[0].Size != 32<<20 || m.Lineage.State != "succeeded" ||
			m.Lineage.FinishedAt.IsZero() || m.Lineage.StartedAt.IsZero() {
			t.Fatalf("manifest = %+v", m)
		}
		if fi, err := os.Stat(filepath.Join(j.OutputDir, "model.bin")); err != nil || fi.Mode().Perm()&0o222 != 0 {
			t.Errorf("a succeeded job's output is writable: %v %v", fi.Mode(), err)
		}
	}
}

// holdOutputs is an executor whose Outputs waits, while hold is set,
// until its context ends (a server stopped while it reads and hashes an
// ended attempt's outputs).
type holdOutputs struct {
	executor.Executor
	hold    bool
	only    string // when not "", only the output directories ending in it are held
	entered chan struct{}
}

func (e *holdOutputs) Outputs(ctx context.Context, dir string) (executor.Outputs, error) {
	if !e.hold || e.only != "" && !strings.HasSuffix(dir, e.only) {
		return e.Executor.Outputs(ctx, dir)
	}
	e.entered <- struct{}{}
	<-ctx.Done()
	return nil, ctx.Err()
}

// A server that stops between an attempt's end and the recording of its
// outputs leaves the attempt active; after the restart the end is
// reported again and recorded after the outputs.
func TestEndBeforeOutputsIsRecordedAfterRestart(t *testing.T) {
	held := &holdOutputs{hold: true, entered: make(chan struct{}, 1)}
	r := newTunedRig(t, &executortest.Fake{Script: writesOutput(1 << 10)}, func(cfg *control.Config) {
		held.Executor = cfg.Executor
		cfg.Executor = held
	})
	j := r.submit("name: cut\nentrypoint: [train]\n")
	select {
	case <-held.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the outputs were never recorded")
	}
	if got, _ := r.st.GetJob(context.Background(), j.ID); got.State != domain.JobRunning {
		t.Fatalf("job is %s while its outputs are being recorded, want running", got.State)
	}
	r.stop()
	r.stop = nil
	if a := r.attempts(j.ID); len(a) != 1 || a[0].State != domain.AttemptRunning {
		t.Fatalf("attempts after a stop during recording = %+v, want one running", a)
	}
	held.hold = false
	r.start()
	r.wait(j.ID, domain.JobSucceeded)
	m, err := r.st.GetManifest(context.Background(), j.ID, 0)
	if err != nil || len(m.Files) != 1 || m.Files[0].Path != "model.bin" {
		t.Fatalf("manifest after restart = %+v, %v", m, err)
	}
	if a := r.attempts(j.ID); len(a) != 1 || a[0].State != domain.AttemptSucceeded {
		t.Fatalf("attempts = %+v, want one succeeded", a)
	}
}

// Recording one job's outputs, however long it takes, holds up no other
// job: the loop goes on scheduling and recording the ends of others.
func TestSlowOutputsHoldUpNoOtherJob(t *testing.T) {
	held := &holdOutputs{hold: true, only: "/slow/1", entered: make(chan struct{}, 1)}
	r := newTunedRig(t, &executortest.Fake{Script: writesOutput(1 << 10)}, func(cfg *control.Config) {
		held.Executor = cfg.Executor
		cfg.Executor = held
	})
	slow := r.submit("name: slow\nentrypoint: [train]\n")
	if !strings.HasSuffix(slow.OutputDir, held.only) {
		t.Fatalf("first job's output directory is %s, want one ending in %s", slow.OutputDir, held.only)
	}
	select {
	case <-held.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow job's outputs were never recorded")
	}
	quick := r.submit("name: quick\nentrypoint: [train]\n")
	r.wait(quick.ID, domain.JobSucceeded)
	if _, err := r.st.GetManifest(context.Background(), quick.ID, 0); err != nil {
		t.Fatalf("quick job succeeded without its manifest: %v", err)
	}
	if got, _ := r.st.GetJob(context.Background(), slow.ID); got.State != domain.JobRunning {
		t.Fatalf("slow job is %s while its outputs are being recorded, want running", got.State)
	}
}

// The manifest the executor's agent recorded when the attempt ended
// (OutputsSealed) is the one stored: the server does not read the job's
// outputs again.
func TestSealedOutputsAreRecordedAsTheAgentListedThem(t *testing.T) {
	files := []domain.ArtifactFile{{Path: "model.bin", Size: 7, SHA256: strings.Repeat("a", 64)}}
	r := newRig(t, &executortest.Fake{Script: func(l executor.Launch) []executor.Event {
		return []executor.Event{{Kind: executor.Started, PID: 1},
			{Kind: executor.OutputsSealed, Outputs: &executor.SealedOutputs{Files: files, ReadOnly: true}},
			exited(domain.AttemptSucceeded, domain.ReasonCompleted, 0)}
	}})
	j := r.submit("name: sealed\nentrypoint: [train]\n")
	r.wait(j.ID, domain.JobSucceeded)
	m, err := r.st.GetManifest(context.Background(), j.ID, 0)
	if err != nil || !reflect.DeepEqual(m.Files, files) {
		t.Fatalf("manifest %+v, %v; want the agent's %+v (nothing is on disk)", m.Files, err, files)
	}
}
