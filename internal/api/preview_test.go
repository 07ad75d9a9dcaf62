package api_test

import (
	"context"
	"encoding/json"
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
