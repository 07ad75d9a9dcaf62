package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"trainyard/internal/api/apitypes"
)

func TestRerun(t *testing.T) {
	e := newEnv(t)
	code, orig := e.submit("name: sweep\nentrypoint: [\"true\"]\nparams: {lr: \"0.1\", epochs: \"3\"}\n")
	if code != 201 {
		t.Fatalf("submit: %d", code)
	}
	path := fmt.Sprintf("/api/v1/jobs/%d/rerun", orig.ID)

	code, b := e.do("POST", path, e.token, apitypes.RerunRequest{Set: []string{"params.lr=0.2"}}, "Idempotency-Key", "r1")
	var job apitypes.Job
	if err := json.Unmarshal(b, &job); err != nil || code != 201 {
		t.Fatalf("rerun: %d %s", code, b)
	}
	if job.ID == orig.ID || job.RerunOf != orig.ID || job.Created == nil || !*job.Created || job.State != "queued" {
		t.Fatalf("rerun answered %+v; want a new queued job with rerun_of %d and created true", job, orig.ID)
	}
	if !strings.Contains(string(b), fmt.Sprintf(`"rerun_of":%d`, orig.ID)) {
		t.Errorf("answer lacks rerun_of: %s", b)
	}

	// GET shows the link and the changed spec; the rest is the original's.
	var got, origFull apitypes.Job
	_, b = e.do("GET", fmt.Sprintf("/api/v1/jobs/%d", job.ID), e.token, nil)
	json.Unmarshal(b, &got)
	_, ob := e.do("GET", fmt.Sprintf("/api/v1/jobs/%d", orig.ID), e.token, nil)
	json.Unmarshal(ob, &origFull)
	if got.RerunOf != orig.ID || origFull.RerunOf != 0 || strings.Contains(string(ob), "rerun_of") {
		t.Errorf("GET rerun_of: new job %d, original %d (%s); want %d and absent", got.RerunOf, origFull.RerunOf, ob, orig.ID)
	}
	var newSpec, oldSpec map[string]any
	json.Unmarshal(got.Spec, &newSpec)
	json.Unmarshal(origFull.Spec, &oldSpec)
	if p := newSpec["params"].(map[string]any); p["lr"] != "0.2" || p["epochs"] != "3" {
		t.Errorf("new params = %v; want lr 0.2, epochs 3", p)
	}
	oldSpec["params"].(map[string]any)["lr"] = "0.2"
	if !reflect.DeepEqual(newSpec, oldSpec) {
		t.Errorf("new spec %s differs from the original beyond params.lr: %s", got.Spec, origFull.Spec)
	}

	// The same Idempotency-Key returns the same job.
	code, b = e.do("POST", path, e.token, apitypes.RerunRequest{Set: []string{"params.lr=0.2"}}, "Idempotency-Key", "r1")
	var again apitypes.Job
	json.Unmarshal(b, &again)
	if code != 200 || again.ID != job.ID || again.Created == nil || *again.Created {
		t.Errorf("replay: %d %s; want 200, job %d, created false", code, b, job.ID)
	}

	// No body: the original's exact snapshot.
	code, b = e.do("POST", path, e.token, nil)
	var same apitypes.Job
	json.Unmarshal(b, &same)
	if code != 201 || same.SpecHash != orig.SpecHash || same.RerunOf != orig.ID {
		t.Errorf("rerun without a body: %d %s; want 201 with spec hash %s", code, b, orig.SpecHash)
	}
}

func TestRerunErrors(t *testing.T) {
	e := newEnv(t)
	_, orig := e.submit("name: a\nentrypoint: [\"true\"]\n")
	before, _ := e.st.CountJobs(context.Background())

	code, b := e.do("POST", fmt.Sprintf("/api/v1/jobs/%d/rerun", orig.ID), e.token,
		apitypes.RerunRequest{Env: "pytorch", Set: []string{"resources.gpus=-1", "resorces.cpus=2"}})
	got := decodeErr(t, b)
	var paths []string
	for _, f := range got.Fields {
		paths = append(paths, f.Path)
		if f.Line != 0 {
			t.Errorf("field %s has line %d; a re-run has no document the caller wrote", f.Path, f.Line)
		}
	}
	slices.Sort(paths)
	if code != 400 || got.Code != "invalid_spec" || !slices.Equal(paths, []string{"env", "resources.gpus", "set[1]"}) {
		t.Errorf("invalid overrides: %d %s; want 400 invalid_spec on env, resources.gpus and set[1]", code, b)
	}
	if after, _ := e.st.CountJobs(context.Background()); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("jobs per state %v after refused re-runs, want %v", after, before)
	}

	for name, tc := range map[string]struct {
		path, body string
		status     int
		code       string
	}{
		"unknown job":        {"/api/v1/jobs/99/rerun", "", 404, "not_found"},
		"bad id":             {"/api/v1/jobs/abc/rerun", "", 400, "invalid_request"},
		"unknown body field": {fmt.Sprintf("/api/v1/jobs/%d/rerun", orig.ID), `{"sets": ["a=b"]}`, 400, "invalid_request"},
		"bad json":           {fmt.Sprintf("/api/v1/jobs/%d/rerun", orig.ID), `{`, 400, "invalid_request"},
	} {
		var body any
		if tc.body != "" {
			body = tc.body
		}
		code, b := e.do("POST", tc.path, e.token, body)
		if got := decodeErr(t, b); code != tc.status || got.Code != tc.code {
			t.Errorf("%s: %d %+v; want %d %s", name, code, got, tc.status, tc.code)
		}
	}
	if code, _ := e.do("POST", fmt.Sprintf("/api/v1/jobs/%d/rerun", orig.ID), "", nil); code != 401 {
		t.Errorf("without a token: %d, want 401", code)
	}
}
