package control_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	blobfs "trainyard/internal/blob/fs"
	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
)

// A checkpoint whose local copy is gone is restored from the object store
// before the attempt that resumes from it launches: the attempt reads the
// bytes the first one wrote, and the record says both tiers hold it.
func TestResumeRestoresFromTheObjectStore(t *testing.T) {
	bs, err := blobfs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	read := make(chan string, 1)
	ex := &executortest.Fake{Script: func(l executor.Launch) []executor.Event {
		ck := envOf(l, "TRAINYARD_CHECKPOINT_DIR")
		if l.Attempt == 1 {
			os.MkdirAll(filepath.Join(ck, "step-1"), 0o755)
			os.WriteFile(filepath.Join(ck, "step-1", "state"), []byte("trained 100 steps"), 0o644)
			os.WriteFile(filepath.Join(ck, "step-1", domain.CheckpointMarker), nil, 0o644)
			return []executor.Event{{Kind: executor.Started, PID: 1}, exited(domain.AttemptFailed, domain.ReasonExitCode, 1)}
		}
		// What the attempt would load from TRAINYARD_RESUME_FROM.
		b, _ := os.ReadFile(filepath.Join(ck, "step-1", "state"))
		read <- string(b)
		if len(l.Resume) == 0 || l.Resume[0].Name != "step-1" {
			return []executor.Event{{Kind: executor.Started, PID: 2}, exited(domain.AttemptFailed, domain.ReasonExitCode, 2)}
		}
		return []executor.Event{{Kind: executor.Started, PID: 2, Resumed: "step-1"}, exited(domain.AttemptSucceeded, domain.ReasonCompleted, 0)}
	}}
	// The retry waits long enough for the test to move the checkpoint off
	// the local tier, as a lifecycle policy does.
	r := newTunedRig(t, ex, func(c *control.Config) {
		c.Blobs, c.CopyCheckpoints, c.RetryBackoff = bs, true, 2*time.Second
	})
	j := r.submit("name: resume\nentrypoint: [train]\npolicy: {retries: 1, reentrant: true}\n")
	ctx := context.Background()
	var rec domain.CheckpointRecord
	deadline := time.Now().Add(10 * time.Second)
	for rec.Object.IsZero() {
		cks, _ := r.st.ListCheckpoints(ctx, j.ID, false)
		if len(cks) == 1 {
			rec = cks[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("the checkpoint was not copied to the object store: %+v", cks)
		}
		time.Sleep(time.Millisecond) // polling the store
	}
	job, _ := r.st.GetJob(ctx, j.ID)
	out := filepath.Join(job.OutputDir, "checkpoints")
	if err := os.RemoveAll(filepath.Join(out, "step-1")); err != nil {
		t.Fatal(err)
	}
	if err := r.st.MarkCheckpointMoved(ctx, j.ID, "step-1", time.Now(), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-read:
		if got != "trained 100 steps" {
			t.Fatalf("the resumed attempt read %q, want the first attempt's checkpoint", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no second attempt")
	}
	if final := r.wait(j.ID, domain.JobSucceeded, domain.JobFailed); final.State != domain.JobSucceeded {
		t.Fatalf("job %s: %s", final.State, final.Message)
	}
	cks, err := r.st.ListCheckpoints(ctx, j.ID, false)
	if err != nil || len(cks) != 1 || cks[0].Tier() != "both" || cks[0].ResumedBy != 2 {
		t.Fatalf("after the resume: %+v, %v; want step-1 on both tiers, resumed by attempt 2", cks, err)
	}
}
