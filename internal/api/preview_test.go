package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"trainyard/internal/api/apitypes"
)

// A dry-run submit answers what it would store and stores nothing; it
// refuses what a submit refuses, with the same errors.
func TestDryRunSubmitStoresNothing(t *testing.T) {
	e := newEnv(t)
	spec, _ := json.Marshal("name: sweep\nentrypoint: [python3, train.py]\nresources: {cpus: 2, memory: 4GiB}\npolicy: {timeout: 2h}\n")
	code, b := e.do("POST", "/api/v1/jobs/preview", e.token, apitypes.SubmitRequest{Spec: spec})
	var pv apitypes.SubmitPreview
	if err := json.Unmarshal(b, &pv); err != nil || code != 200 {
		t.Fatalf("dry run: %d %s", code, b)
	}
	if !pv.DryRun || pv.Name != "sweep" || pv.Pool != "default" || pv.Project != "default" || pv.Priority != "normal" ||
		pv.Resources.CPUs != 2 || pv.Resources.Memory != "4GiB" || pv.Timeout != "2h" || pv.SpecHash == "" || len(pv.Spec) == 0 {
		t.Fatalf("preview = %+v", pv)
	}
	if pv.Queue != nil {
		t.Errorf("queue %+v without a scheduler, want none", pv.Queue)
	}
	if n, _ := e.st.CountJobs(context.Background()); n["queued"] != 0 {
		t.Fatalf("a dry run stored a job: %v", n)
	}
	// The job a real submit stores has the snapshot the preview showed.
	code, j := e.submit("name: sweep\nentrypoint: [python3, train.py]\nresources: {cpus: 2, memory: 4GiB}\npolicy: {timeout: 2h}\n")
	if code != 201 || j.SpecHash != pv.SpecHash {
		t.Fatalf("submit after the preview: %d, hash %s; preview's %s", code, j.SpecHash, pv.SpecHash)
	}

	// Refused like a submit: an oversized request, naming the field.
	big, _ := json.Marshal("name: big\nentrypoint: [true]\nresources: {cpus: 64}\n")
	code, b = e.do("POST", "/api/v1/jobs/preview", e.token, apitypes.SubmitRequest{Spec: big})
	if got := decodeErr(t, b); code != 400 || len(got.Fields) == 0 || got.Fields[0].Path != "resources.cpus" {
		t.Fatalf("oversized dry run: %d %s", code, b)
	}
	if n, _ := e.st.CountJobs(context.Background()); n["queued"] != 1 {
		t.Fatalf("jobs after the refused dry runs: %v, want the one real submit", n)
	}
}

// A submit that repeats a live job of the same user and spec is stored,
// with a warning naming the earlier job and how to cancel the new one; a
// replay by Idempotency-Key and a different spec are not warned about.
func TestRepeatedSubmitWarns(t *testing.T) {
	e := newEnv(t)
	const spec = "name: sweep\nentrypoint: [python3, train.py]\n"
	code, first := e.submit(spec, "Idempotency-Key", "k1")
	if code != 201 || len(first.Warnings) != 0 {
		t.Fatalf("first submit: %d %+v", code, first)
	}
	code, second := e.submit(spec)
	if code != 201 || len(second.Warnings) != 1 {
		t.Fatalf("repeat: %d, warnings %q; want 201 and one warning", code, second.Warnings)
	}
	want := fmt.Sprintf("job %d has the same spec as your job %d (queued, submitted ", second.ID, first.ID)
	if w := second.Warnings[0]; !strings.HasPrefix(w, want) || !strings.HasSuffix(w, fmt.Sprintf("cancel it with: trainyard cancel %d", second.ID)) {
		t.Errorf("warning = %q, want it to start %q and say how to cancel job %d", w, want, second.ID)
	}
	if code, replay := e.submit(spec, "Idempotency-Key", "k1"); code != 200 || replay.ID != first.ID || len(replay.Warnings) != 0 {
		t.Errorf("replay: %d id %d warnings %q; want 200, job %d, none", code, replay.ID, replay.Warnings, first.ID)
	}
	if code, other := e.submit("name: sweep\nentrypoint: [python3, train.py]\nparams: {lr: '0.2'}\n"); code != 201 || len(other.Warnings) != 0 {
		t.Errorf("another spec: %d, warnings %q; want none", code, other.Warnings)
	}
}
