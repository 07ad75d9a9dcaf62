package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// submitRunning submits spec and records its first attempt as running.
func (e *env) submitRunning(spec string) int64 {
	e.t.Helper()
	s, _ := json.Marshal(spec)
	code, body := e.do("POST", "/api/v1/jobs", e.token, apitypes.SubmitRequest{Spec: s})
	if code != 201 {
		e.t.Fatalf("submit: %d %s", code, body)
	}
	var j apitypes.Job
	_ = json.Unmarshal(body, &j)
	errs, err := e.st.Apply(context.Background(), []store.Change{
		{JobID: j.ID, Move: domain.MoveStart(), At: time.Now(), Attempt: &store.AttemptChange{Create: true, Number: 1, To: domain.AttemptRunning}},
		{JobID: j.ID, Move: domain.MoveRun(), At: time.Now()}})
	if err != nil || errs[0] != nil || errs[1] != nil {
		e.t.Fatalf("create attempt: %v %v", err, errs)
	}
	return j.ID
}

func TestCompare(t *testing.T) {
	e := newEnv(t)
	a := e.submitRunning("name: sweep\nentrypoint: [\"true\"]\nparams: {lr: \"0.1\", epochs: \"3\"}\n")
	b := e.submitRunning("name: sweep\nentrypoint: [\"true\"]\nparams: {lr: \"0.2\", epochs: \"3\"}\nresources: {gpus: 0, cpus: 2}\n")
	for id, body := range map[int64]string{
		a: `{"points": [{"step": 1, "metrics": {"loss": 0.9}}, {"step": 2, "metrics": {"loss": 0.4}}, {"step": 3, "metrics": {"loss": 0.5}}]}`,
		b: `{"points": [{"step": 1, "metrics": {"loss": 0.8, "acc": 0.5}}]}`,
	} {
		if code, out := e.do("POST", fmt.Sprintf("/api/v1/jobs/%d/attempts/1/metrics", id), e.token, body); code != 200 {
			t.Fatalf("report: %d %s", code, out)
		}
	}
	code, body := e.do("GET", fmt.Sprintf("/api/v1/compare?jobs=%d,%d", a, b), e.token, nil)
	if code != 200 {
		t.Fatalf("compare: %d %s", code, body)
	}
	var got apitypes.Comparison
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Jobs) != 2 || got.Jobs[0].ID != a || got.Jobs[1].ID != b {
		t.Fatalf("jobs = %+v", got.Jobs)
	}
	var diffs []string
	for _, d := range got.Differences {
		diffs = append(diffs, fmt.Sprintf("%s=%s", d.Path, d.Values))
	}
	if want := `params.lr=["0.1" "0.2"] resources.cpus=[1 2]`; strings.Join(diffs, " ") != want {
		t.Errorf("differences = %s, want %s", strings.Join(diffs, " "), want)
	}
	ja, jb := got.Jobs[0], got.Jobs[1]
	if len(ja.Metrics) != 1 || ja.Metrics[0] != (apitypes.MetricSummary{Key: "loss", LastStep: 3, Last: 0.5, Min: 0.4, Max: 0.9}) {
		t.Errorf("a's metrics = %+v", ja.Metrics)
	}
	if len(jb.Metrics) != 2 || jb.Metrics[0].Key != "acc" || jb.Metrics[1].Last != 0.8 {
		t.Errorf("b's metrics = %+v", jb.Metrics)
	}
	if ja.Env != "host@1" || ja.State != "running" || ja.Params["lr"] != "0.1" || ja.Submitter != "admin" || ja.Attempts != 1 {
		t.Errorf("a = %+v", ja)
	}
	// An absent value is null, so that it reads apart from any value.
	code, body = e.do("GET", fmt.Sprintf("/api/v1/compare?jobs=%d&jobs=%d", a, e.submitRunning("name: other\nentrypoint: [\"true\"]\nparams: {lr: \"0.1\"}\n")), e.token, nil)
	if code != 200 || !strings.Contains(string(body), `{"path":"params.epochs","values":["3",null]}`) {
		t.Errorf("repeated jobs parameter, a missing param: %d %s", code, body)
	}
}

func TestCompareRefusesBadRequests(t *testing.T) {
	e := newEnv(t)
	a := e.submitRunning("name: a\nentrypoint: [\"true\"]\n")
	b := e.submitRunning("name: b\nentrypoint: [\"true\"]\n")
	for name, c := range map[string]struct {
		query string
		code  int
		want  string
	}{
		"no jobs":      {"", 400, `"path":"jobs"`},
		"one job":      {fmt.Sprintf("jobs=%d", a), 400, "name 2 to 20 jobs"},
		"not an id":    {fmt.Sprintf("jobs=%d,x", a), 400, `\"x\" is not a job id`},
		"negative":     {fmt.Sprintf("jobs=%d,-2", a), 400, `\"-2\" is not a job id`},
		"twice":        {fmt.Sprintf("jobs=%d,%d,%d", a, b, a), 400, fmt.Sprintf("names job %d twice", a)},
		"missing job":  {fmt.Sprintf("jobs=%d,999", a), 404, "job 999 does not exist"},
		"too many":     {"jobs=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21", 400, "compare at most 20"},
		"far too many": {"jobs=" + strings.Repeat("7,", 100000), 400, "names 100000 jobs; compare at most 20"},
		"junk":         {"jobs=" + strings.Repeat("x", 1000) + strings.Repeat(",y", 100), 400, `\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx…\" is not a job id`},
	} {
		code, body := e.do("GET", "/api/v1/compare?"+c.query, e.token, nil)
		if code != c.code || !strings.Contains(string(body), c.want) {
			t.Errorf("%s: %d %.500s, want %d with %q", name, code, body, c.code, c.want)
		}
		if len(body) > 2000 {
			t.Errorf("%s: an error of %d bytes", name, len(body))
		}
	}
	if code, _ := e.do("GET", fmt.Sprintf("/api/v1/compare?jobs=%d,%d", a, b), "", nil); code != 401 {
		t.Errorf("without a token: %d, want 401", code)
	}
}

// A member compares their own jobs only: another member's job answers as
// a missing one; the project's lead reads both; a job token compares none.
func TestCompareAuthorization(t *testing.T) {
	e := newAuthzEnv(t)
	both := fmt.Sprintf("/api/v1/compare?jobs=%d,%d", e.jobs["own"], e.jobs["other-member"])
	for row, want := range map[string]string{"member": "hidden", "lead": "ok", "admin": "ok", "viewer": "ok", "none": "hidden", "job": "forbidden"} {
		code, body := e.do("GET", both, e.tokens[row], nil)
		if got := outcome(code, body); got != want {
			t.Errorf("%s: %s (%d %s), want %s", row, got, code, body, want)
		}
	}
}
