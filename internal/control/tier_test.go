package control_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	blobfs "trainyard/internal/blob/fs"
	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
)

// resumeScript is a job whose attempt 1 saves step-1 and fails, and whose
// later attempts report on read what they would resume from.
func resumeScript(read chan<- string) *executortest.Fake {
	return &executortest.Fake{Script: func(l executor.Launch) []executor.Event {
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
}

// moveOnceCopied waits for the job's checkpoint step-1 to be copied to
// the object store, then removes its local copy as a lifecycle move does.
func moveOnceCopied(t *testing.T, r *rig, jobID int64) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cks, _ := r.st.ListCheckpoints(ctx, jobID, false)
		if len(cks) == 1 && cks[0].OnObject() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the checkpoint was not copied to the object store: %+v", cks)
		}
		time.Sleep(time.Millisecond) // polling the store
	}
	job, _ := r.st.GetJob(ctx, jobID)
	if err := os.RemoveAll(filepath.Join(job.OutputDir, "checkpoints", "step-1")); err != nil {
		t.Fatal(err)
	}
	if err := r.st.MarkCheckpointMoved(ctx, jobID, "step-1", time.Now(), nil); err != nil {
		t.Fatal(err)
	}
}

// checkResumed checks that the second attempt read the first one's
// checkpoint, and that the job succeeded with step-1 on both tiers.
func checkResumed(t *testing.T, r *rig, jobID int64, read <-chan string) {
	t.Helper()
	select {
	case got := <-read:
		if got != "trained 100 steps" {
			t.Fatalf("the resumed attempt read %q, want the first attempt's checkpoint", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no second attempt")
	}
	if final := r.wait(jobID, domain.JobSucceeded, domain.JobFailed); final.State != domain.JobSucceeded {
		t.Fatalf("job %s: %s", final.State, final.Message)
	}
	cks, err := r.st.ListCheckpoints(context.Background(), jobID, false)
	if err != nil || len(cks) != 1 || cks[0].Tier() != "both" || cks[0].ResumedBy != 2 {
		t.Fatalf("after the resume: %+v, %v; want step-1 on both tiers, resumed by attempt 2", cks, err)
	}
}

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
	// The retry waits long enough for the test to move the checkpoint off
	// the local tier, as a lifecycle policy does.
	r := newTunedRig(t, resumeScript(read), func(c *control.Config) {
		c.Blobs, c.CopyCheckpoints, c.RetryBackoff = bs, true, 2*time.Second
	})
	j := r.submit("name: resume\nentrypoint: [train]\npolicy: {retries: 1, reentrant: true}\n")
	moveOnceCopied(t, r, j.ID)
	checkResumed(t, r, j.ID, read)
}

// An attempt placed but never launched (its leader lost the lead between
// the two) still gets its checkpoint restored when another loop adopts it.
func TestAdoptedAttemptIsRestoredBeforeItStarts(t *testing.T) {
	bs, err := blobfs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	read := make(chan string, 1)
	var fence atomic.Bool // set: the next launch is refused as by a deposed leader
	r := newTunedRig(t, resumeScript(read), func(c *control.Config) {
		c.Blobs, c.CopyCheckpoints, c.RetryBackoff, c.AdoptAfter = bs, true, 2*time.Second, 100*time.Millisecond
		c.Fence = func(context.Context) error {
			if fence.CompareAndSwap(true, false) {
				return errors.New("term ended")
			}
			return nil
		}
	})
	j := r.submit("name: adopt\nentrypoint: [train]\npolicy: {retries: 1, reentrant: true}\n")
	moveOnceCopied(t, r, j.ID)
	fence.Store(true)
	checkResumed(t, r, j.ID, read)
	if fence.Load() {
		t.Fatal("attempt 2 was launched without passing the fence: the test did not cover adoption")
	}
}
