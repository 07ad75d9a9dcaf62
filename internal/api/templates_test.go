package api_test

import (
	"encoding/json"
	"strings"
	"testing"

	"trainyard/internal/api/apitypes"
)

const apiTemplate = `vars:
  profile: {default: dev, description: dev or prod}
  steps: {}
name: run-${profile}
entrypoint: [sh, -c, "echo $${HOME}", "${steps}"]
`

func TestTemplateEndpoints(t *testing.T) {
	e := newEnv(t)
	create := func(body string) (int, []byte) {
		return e.do("POST", "/api/v1/templates", e.token, apitypes.CreateTemplate{Name: "run", Body: body})
	}
	code, b := create(apiTemplate)
	var tm apitypes.Template
	if json.Unmarshal(b, &tm); code != 201 || tm.Version != 1 || tm.Project != "default" || tm.Created == nil || !*tm.Created {
		t.Fatalf("create: %d %s", code, b)
	}
	if len(tm.Vars) != 2 || tm.Vars[0].Default == nil || *tm.Vars[0].Default != "dev" || !tm.Vars[1].Required || tm.Vars[1].Default != nil {
		t.Errorf("vars = %+v", tm.Vars)
	}
	code, b = create(apiTemplate)
	if json.Unmarshal(b, &tm); code != 200 || tm.Version != 1 || *tm.Created {
		t.Errorf("identical create: %d %s, want 200, version 1, created false", code, b)
	}
	code, b = create(apiTemplate + "# v2\n")
	if json.Unmarshal(b, &tm); code != 201 || tm.Version != 2 {
		t.Errorf("changed create: %d %s, want 201 version 2", code, b)
	}

	// Problems come back with paths and template lines.
	code, b = create("name: x\nentrypoint: [a]\nenv_vars:\n  WANDB_API_KEY: abc123\n")
	eb := decodeErr(t, b)
	if code != 400 || eb.Code != "invalid_template" || len(eb.Fields) != 1 || eb.Fields[0].Path != "env_vars.WANDB_API_KEY" ||
		eb.Fields[0].Line != 4 || !strings.Contains(eb.Fields[0].Message, "trainyard secret set WANDB_API_KEY") {
		t.Errorf("credential: %d %s", code, b)
	}

	code, b = e.do("GET", "/api/v1/templates", e.token, nil)
	var list apitypes.TemplateList
	if json.Unmarshal(b, &list); code != 200 || len(list.Templates) != 1 || list.Templates[0].Version != 2 || list.Templates[0].Body != "" {
		t.Errorf("list: %d %s", code, b)
	}
	code, b = e.do("GET", "/api/v1/templates/run?version=1&project=default", e.token, nil)
	if json.Unmarshal(b, &tm); code != 200 || tm.Version != 1 || tm.Body != apiTemplate {
		t.Errorf("get version 1: %d %s", code, b)
	}
	for path, want := range map[string]int{
		"/api/v1/templates/run?version=0": 400, "/api/v1/templates/run?version=9": 404, "/api/v1/templates/nope": 404,
		"/api/v1/templates/Bad_Name": 400,
	} {
		if code, b := e.do("GET", path, e.token, nil); code != want {
			t.Errorf("GET %s: %d %s, want %d", path, code, b, want)
		}
	}
	if code, _ := e.do("GET", "/api/v1/templates", "", nil); code != 401 {
		t.Errorf("list without a token: %d, want 401", code)
	}

	// Submit from the template.
	code, b = e.do("POST", "/api/v1/jobs", e.token, apitypes.SubmitRequest{Template: "run@1", Vars: map[string]string{"steps": "5", "profile": "prod"}})
	var job apitypes.Job
	if json.Unmarshal(b, &job); code != 201 || job.Name != "run-prod" {
		t.Fatalf("submit from template: %d %s", code, b)
	}
	code, b = e.do("GET", "/api/v1/jobs/"+itoa(job.ID), e.token, nil)
	if !strings.Contains(string(b), `"trainyard.template":"run@1"`) && !strings.Contains(string(b), `"trainyard.template": "run@1"`) {
		t.Errorf("job %d does not record its template: %d %s", job.ID, code, b)
	}
	code, b = e.do("POST", "/api/v1/jobs", e.token, apitypes.SubmitRequest{Template: "run", Vars: map[string]string{"step": "5"}})
	eb = decodeErr(t, b)
	if code != 400 || eb.Code != "invalid_spec" || !hasField(eb.Fields, "vars.step") || !hasField(eb.Fields, "vars.steps") {
		t.Errorf("unknown and missing variables: %d %s", code, b)
	}
}

func hasField(fs []apitypes.FieldError, path string) bool {
	for _, f := range fs {
		if f.Path == path {
			return true
		}
	}
	return false
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
