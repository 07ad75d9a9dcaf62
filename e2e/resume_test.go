package e2e

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

// A run of the sample trainer canceled by mistake, re-run with --resume,
// continues from its last checkpoint's step; the new job's lineage names
// the checkpoint it started from, and a re-run of a job without
// checkpoints says how to look instead.
func TestRerunResumeContinuesACanceledRun(t *testing.T) {
	s := startServer(t, serverOpts{})
	trainer := filepath.Join(repoRoot(), "examples", "trainer.py")
	orig := s.submit(fmt.Sprintf("name: mistake\nentrypoint: [python3, %s, --steps, '300', --sleep, '0.02', --checkpoint-every, '20']\n", trainer))
	oid := strconv.FormatInt(orig.ID, 10)
	waitFor(t, 60*time.Second, "the first checkpoint", func() bool {
		out, _, _ := s.cli("checkpoints", "ls", oid)
		return strings.Contains(out, "ckpt-")
	})
	s.mustCLI("cancel", oid)
	if j := s.waitState(orig.ID, 60*time.Second, "canceled", "succeeded", "failed"); j.State != "canceled" {
		t.Fatalf("original ended %s, want canceled: %s", j.State, j.Message)
	}
	var cl apitypes.CheckpointList
	if code := s.api("GET", "/api/v1/jobs/"+oid+"/checkpoints", nil, &cl); code != 200 || len(cl.Checkpoints) == 0 {
		t.Fatalf("checkpoints of the canceled run: status %d, %+v", code, cl)
	}
	latest := cl.Checkpoints[0]
	for _, c := range cl.Checkpoints {
		if c.At.After(latest.At) || (c.At.Equal(latest.At) && c.Name > latest.Name) {
			latest = c
		}
	}
	var step int
	if _, err := fmt.Sscanf(latest.Name, "ckpt-%d.json", &step); err != nil || step == 0 {
		t.Fatalf("latest checkpoint %q: no step in its name", latest.Name)
	}

	out := s.mustCLI("rerun", oid, "--resume")
	id, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatalf("rerun printed %q", out)
	}
	nid := strconv.FormatInt(id, 10)
	if j := s.waitState(id, 90*time.Second, "succeeded", "failed", "canceled"); j.State != "succeeded" {
		log, _, _ := s.cli("logs", nid)
		t.Fatalf("resumed run ended %s: %s\n%s", j.State, j.Message, log)
	}
	log := s.mustCLI("logs", nid)
	if got := resumedStep(log); got != step {
		t.Fatalf("the resumed run resumed from step %d, want %d (checkpoint %s):\n%s", got, step, latest.Name, log)
	}
	if strings.Contains(log, `{"step": 10,`) {
		t.Errorf("the resumed run reported steps from the beginning:\n%s", log)
	}
	show := s.mustCLI("show", nid)
	if want := "resuming from checkpoint " + latest.Name + " of job " + oid; !strings.Contains(show, want) {
		t.Errorf("show %s lacks %q:\n%s", nid, want, show)
	}
	arts := s.mustCLI("artifacts", "ls", nid)
	if want := "resumed from job " + oid + " checkpoint " + latest.Name; !strings.Contains(arts, want) {
		t.Errorf("artifacts ls %s lacks %q:\n%s", nid, want, arts)
	}
	if j := s.job(orig.ID); j.State != "canceled" {
		t.Errorf("the original is %s after the re-run, want canceled still", j.State)
	}

	// A named checkpoint that is not the original's, and an original
	// without checkpoints: refused with how to look.
	_, errOut, code := s.cli("rerun", oid, "--from-checkpoint", "ckpt-99999999.json")
	if code == 0 || !strings.Contains(errOut, "trainyard checkpoints ls "+oid) {
		t.Errorf("rerun --from-checkpoint of an unknown checkpoint: exit %d, %q", code, errOut)
	}
	plain := s.submit("name: plain\nentrypoint: ['true']\n")
	s.waitState(plain.ID, 30*time.Second, "succeeded", "failed")
	pid := strconv.FormatInt(plain.ID, 10)
	_, errOut, code = s.cli("rerun", pid, "--resume")
	if code == 0 || !strings.Contains(errOut, "no complete checkpoint") || !strings.Contains(errOut, "trainyard checkpoints ls "+pid) {
		t.Errorf("rerun --resume of a job without checkpoints: exit %d, %q", code, errOut)
	}
}
