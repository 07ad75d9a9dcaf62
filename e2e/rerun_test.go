package e2e

import (
	"encoding/json"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

func TestRerunFromSnapshot(t *testing.T) {
	s := startServer(t, serverOpts{})
	orig := s.submit("name: lr-probe\nentrypoint: echo lr=$TRAINYARD_PARAM_LR\nparams: {lr: \"0.1\", epochs: \"2\"}\nlabels: {team: vision}\n")
	origID := strconv.FormatInt(orig.ID, 10)
	if j := s.waitState(orig.ID, time.Minute, "succeeded", "failed"); j.State != "succeeded" {
		t.Fatalf("original ended %s: %s %s", j.State, j.Reason, j.Message)
	}

	out := s.mustCLI("rerun", origID, "--set", "params.lr=0.2")
	id, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil || id == orig.ID {
		t.Fatalf("rerun printed %q, want the new job's id", out)
	}
	rerun := s.waitState(id, time.Minute, "succeeded", "failed")
	if rerun.State != "succeeded" {
		t.Fatalf("re-run ended %s: %s %s", rerun.State, rerun.Reason, rerun.Message)
	}
	newID := strconv.FormatInt(id, 10)
	if got := s.mustCLI("logs", newID); got != "lr=0.2\n" {
		t.Errorf("re-run log = %q, want %q", got, "lr=0.2\n")
	}
	if got := s.mustCLI("logs", origID); got != "lr=0.1\n" {
		t.Errorf("original log = %q, want %q", got, "lr=0.1\n")
	}

	// The new spec is the original's stored snapshot with params.lr changed.
	var newSpec, origSpec map[string]any
	if err := json.Unmarshal(rerun.Spec, &newSpec); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(s.job(orig.ID).Spec, &origSpec); err != nil {
		t.Fatal(err)
	}
	origSpec["params"].(map[string]any)["lr"] = "0.2"
	if !reflect.DeepEqual(newSpec, origSpec) {
		t.Errorf("re-run spec differs from the original beyond params.lr:\n got %s\nwant %v", rerun.Spec, origSpec)
	}
	if rerun.RerunOf != orig.ID || rerun.OutputDir == orig.OutputDir {
		t.Errorf("re-run: rerun_of %d, output dir %s; want %d and its own directory (original: %s)", rerun.RerunOf, rerun.OutputDir, orig.ID, orig.OutputDir)
	}

	// show names the original; the original names none.
	if show := s.mustCLI("show", newID); !regexp.MustCompile(`(?m)^Rerun of:\s+` + origID + `$`).MatchString(show) {
		t.Errorf("show %s lacks \"Rerun of: %s\":\n%s", newID, origID, show)
	}
	if show := s.mustCLI("show", origID); strings.Contains(show, "Rerun of") {
		t.Errorf("show of the original names an original:\n%s", show)
	}
	var shown apitypes.Job
	if err := json.Unmarshal([]byte(s.mustCLI("show", "-o", "json", newID)), &shown); err != nil || shown.RerunOf != orig.ID {
		t.Errorf("show -o json: rerun_of %d (%v), want %d", shown.RerunOf, err, orig.ID)
	}

	// --follow streams the new job's log and exits 0 when it succeeds.
	out = s.mustCLI("rerun", origID, "--set", "params.lr=0.3", "--follow")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || lines[1] != "lr=0.3" {
		t.Errorf("rerun --follow printed %q; want the new id, then lr=0.3", out)
	}

	// An invalid change is refused with its field path, and nothing is stored.
	var before apitypes.JobList
	s.api("GET", "/api/v1/jobs", nil, &before)
	stdout, stderr, code := s.cli("rerun", origID, "--set", "resources.gpus=-1", "--set", "params.lr=0.4")
	if code != 2 || stdout != "" || !strings.Contains(stderr, "resources.gpus") {
		t.Errorf("invalid rerun: exit %d, stdout %q, stderr %q; want exit 2 naming resources.gpus", code, stdout, stderr)
	}
	var after apitypes.JobList
	s.api("GET", "/api/v1/jobs", nil, &after)
	if len(after.Jobs) != len(before.Jobs) {
		t.Errorf("an invalid rerun stored a job: %d jobs before, %d after", len(before.Jobs), len(after.Jobs))
	}
}
