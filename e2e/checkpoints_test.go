package e2e

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The checkpoint tests drive examples/torchstyle_trainer.py, which saves
// the way torch.save does: a zip archive written straight onto its final
// name, central directory last.

// resumedStep returns the step an attempt's log says it resumed from, or -1.
func resumedStep(log string) int {
	for _, l := range strings.Split(log, "\n") {
		var n int
		if _, err := fmt.Sscanf(l, "resumed from step %d", &n); err == nil {
			return n
		}
	}
	return -1
}

// A trainer killed while torch.save writes its newest checkpoint leaves a
// file that is no zip: the next attempt is never handed it, but resumes
// from the one before, whose digest still matches.
func TestTorchSaveCutShortIsNeverResumed(t *testing.T) {
	s := startServer(t, serverOpts{})
	trainer := filepath.Join(repoRoot(), "examples", "torchstyle_trainer.py")
	job := s.submit(fmt.Sprintf(`name: cut-short
entrypoint: [python3, %s, --steps, "15", --checkpoint-every, "5", --name, "step-{step}.pt", --entry-delay, "0.5"]
policy: {retries: 1, reentrant: true}
`, trainer))
	id := strconv.FormatInt(job.ID, 10)
	s.waitState(job.ID, 30*time.Second, "running")
	// Kill the trainer in the middle of its second save.
	waitFor(t, 60*time.Second, "the second save to start", func() bool {
		out, _, _ := s.cli("logs", "--attempt", "1", id)
		return strings.Contains(out, "saving ") && strings.Contains(out, "step-10.pt")
	})
	s.killJobProcess(job.ID, 1)
	final := s.waitState(job.ID, 90*time.Second, "succeeded", "failed", "canceled")
	first := s.mustCLI("logs", "--attempt", "1", id)
	if strings.Contains(first, "saved "+filepath.Join(s.job(job.ID).OutputDir, "checkpoints", "step-10.pt")) {
		t.Fatalf("the kill came after the save ended; the test proves nothing:\n%s", first)
	}
	second := s.mustCLI("logs", "--attempt", "2", id)
	if final.State != "succeeded" {
		t.Fatalf("job ended %s (%s): %s\nattempt 2:\n%s", final.State, final.Reason, final.Message, second)
	}
	if got := resumedStep(second); got != 5 {
		t.Fatalf("attempt 2 resumed from step %d, want 5 (the last whole save; step-10.pt was cut short):\n%s", got, second)
	}
	if strings.Contains(second, "cannot load checkpoint") {
		t.Errorf("attempt 2 was handed a checkpoint it could not load:\n%s", second)
	}
	sys := s.mustCLI("logs", "--attempt", "2", "--timestamps", id)
	if !strings.Contains(sys, "resuming from checkpoint step-5.pt (digest verified)") {
		t.Errorf("attempt 2's log does not say which checkpoint it was handed:\n%s", sys)
	}
}

// A checkpoint that is a whole zip but does not load makes the attempt
// that resumes from it fail before its first step; the next attempt is
// handed the checkpoint before it, and the job says so.
func TestFailedResumeFallsBackToThePreviousCheckpoint(t *testing.T) {
	s := startServer(t, serverOpts{})
	trainer := filepath.Join(repoRoot(), "examples", "torchstyle_trainer.py")
	// Attempt 1 saves step-5.pt (good) and step-10.pt (broken), then
	// fails at step 12; attempt 2 resumes from step-10.pt and cannot load
	// it; attempt 3 must resume from step-5.pt.
	job := s.submit(fmt.Sprintf(`name: fallback
entrypoint: [python3, %s, --steps, "15", --checkpoint-every, "5", --name, "step-{step}.pt", --broken-at, "10", --fail-at, "12"]
policy: {retries: 2, reentrant: true}
`, trainer))
	id := strconv.FormatInt(job.ID, 10)
	final := s.waitState(job.ID, 120*time.Second, "succeeded", "failed", "canceled")
	logs := map[int]string{}
	for n := 1; n <= 3; n++ {
		logs[n], _, _ = s.cli("logs", "--attempt", strconv.Itoa(n), id)
	}
	if final.State != "succeeded" {
		t.Fatalf("job ended %s (%s): %s\nattempt 2:\n%s\nattempt 3:\n%s", final.State, final.Reason, final.Message, logs[2], logs[3])
	}
	if !strings.Contains(logs[2], "cannot load checkpoint") || !strings.Contains(logs[2], "step-10.pt") {
		t.Fatalf("attempt 2 was not handed the broken step-10.pt:\n%s", logs[2])
	}
	if got := resumedStep(logs[3]); got != 5 {
		t.Fatalf("attempt 3 resumed from step %d, want 5 (the checkpoint before the one that failed to load):\n%s", got, logs[3])
	}
	show := s.mustCLI("show", id)
	if !strings.Contains(show, "checkpoint step-10.pt set aside") || !strings.Contains(show, "resuming from checkpoint step-5.pt") {
		t.Errorf("show does not tell the fallback:\n%s", show)
	}
}

// checkpoint.keep removes only registered checkpoints: other files the job
// keeps in its checkpoint directory stay.
func TestPruningLeavesUnregisteredFiles(t *testing.T) {
	s := startServer(t, serverOpts{})
	trainer := filepath.Join(repoRoot(), "examples", "trainer.py")
	job := s.submit(fmt.Sprintf(`name: prune
entrypoint: [sh, -c, 'mkdir -p "$TRAINYARD_CHECKPOINT_DIR" && echo "lr: 0.1" > "$TRAINYARD_CHECKPOINT_DIR/hparams.yaml" && exec python3 %s --steps 60 --checkpoint-every 10']
checkpoint: {keep: 2}
`, trainer))
	if j := s.waitState(job.ID, 60*time.Second, "succeeded", "failed"); j.State != "succeeded" {
		t.Fatalf("job %s: %s", j.State, j.Message)
	}
	ckpts := filepath.Join(s.job(job.ID).OutputDir, "checkpoints")
	if got := readFile(t, filepath.Join(ckpts, "hparams.yaml")); got != "lr: 0.1\n" {
		t.Errorf("hparams.yaml after pruning: %q", got)
	}
	m, _ := filepath.Glob(filepath.Join(ckpts, "ckpt-*.json"))
	if len(m) != 2 {
		t.Errorf("%d checkpoints on disk, want the 2 kept: %v", len(m), m)
	}
	out := s.mustCLI("checkpoints", "ls", strconv.FormatInt(job.ID, 10))
	if strings.Contains(out, "hparams") || strings.Count(out, "\nckpt-") != 2 {
		t.Errorf("checkpoints ls:\n%s", out)
	}
}
