package api_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

// TestControlCharactersRefusedAtInput: reasons, notes, token names, labels
// and descriptions are printed in terminals; one that could drive the
// terminal (an escape sequence, a bidirectional override) is refused with
// a 400 naming the field, and nothing stored changes.
func TestControlCharactersRefusedAtInput(t *testing.T) {
	e := newAuthzEnv(t)
	admin := e.tokens["admin"]
	job := e.jobs["own"]
	spec, _ := json.Marshal("name: evil\nentrypoint: [\"true\"]\nlabels: {team: \"vision\u202egpj.exe\"}\n")
	code, b := e.do("POST", "/api/v1/quota-requests", e.tokens["member"], apitypes.QuotaRequest{Project: "default", Pool: "default",
		CPUs: 2, Until: time.Now().Add(24 * time.Hour), Reason: "ablation runs"})
	if code != 201 {
		t.Fatalf("file a request: %d %s", code, b)
	}
	var req apitypes.QuotaRequest
	json.Unmarshal(b, &req)
	code, b = e.do("POST", "/api/v1/envs", admin, apitypes.RegisterEnv{Name: "torch", PathPrefix: []string{"/opt/torch/bin"}})
	if code != 201 {
		t.Fatalf("register an environment: %d %s", code, b)
	}
	tokens := func() int {
		_, b := e.do("GET", "/api/v1/tokens", admin, nil)
		var l apitypes.TokenList
		json.Unmarshal(b, &l)
		return len(l.Tokens)
	}
	before := tokens()
	for _, tc := range []struct {
		name, method, path, token string
		body                      any
		field                     string
	}{
		{"cancel reason", "POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", job), admin, apitypes.CancelRequest{Reason: "done\x1b[2J\x1b[Hjob succeeded"}, "reason"},
		{"token name", "POST", "/api/v1/tokens", admin, apitypes.TokenRequest{Name: "laptop\x1b]0;owned\x07"}, "name"},
		{"request reason", "POST", "/api/v1/quota-requests", e.tokens["member"], apitypes.QuotaRequest{Project: "default", Pool: "default",
			CPUs: 2, Until: time.Now().Add(24 * time.Hour), Reason: "urgent\u202edesoppo"}, "reason"},
		{"decision note", "POST", fmt.Sprintf("/api/v1/quota-requests/%d/deny", req.ID), e.tokens["resource-admin"], apitypes.Decision{Note: "no\u009b2J"}, "note"},
		{"label value", "POST", "/api/v1/jobs", admin, apitypes.SubmitRequest{Spec: spec}, "labels.team"},
		{"gpu type", "PUT", "/api/v1/pools/default", admin, apitypes.Pool{Executor: "local", GPUType: "a100\x7f",
			Nodes: []apitypes.Node{{Name: "n1", CPUs: 8, Memory: "32GiB"}}}, "gpu_type"},
		{"env description", "POST", "/api/v1/envs", admin, apitypes.RegisterEnv{Name: "torch", PathPrefix: []string{"/opt/t2"}, Description: "fast\r\x1b[1Aok"}, "description"},
		{"env deprecation reason", "POST", "/api/v1/envs/torch/1/deprecate", admin, apitypes.DeprecateEnv{Reason: "old\u2066"}, "reason"},
	} {
		code, b := e.do(tc.method, tc.path, tc.token, tc.body)
		var body apitypes.Error
		json.Unmarshal(b, &body)
		if code != 400 || len(body.Error.Fields) == 0 || body.Error.Fields[0].Path != tc.field ||
			!strings.Contains(body.Error.Fields[0].Message, "U+") {
			t.Errorf("%s: %d %s; want 400 naming %s and the character", tc.name, code, b, tc.field)
		}
	}
	// Nothing stored changed.
	_, b = e.do("GET", fmt.Sprintf("/api/v1/jobs/%d", job), admin, nil)
	var j apitypes.Job
	json.Unmarshal(b, &j)
	if j.State != "queued" || j.CancelRequested {
		t.Errorf("job after the refused cancel: %s", b)
	}
	if n := tokens(); n != before {
		t.Errorf("admin has %d tokens after the refused create, want %d", n, before)
	}
	_, b = e.do("GET", "/api/v1/quota-requests", admin, nil)
	var rl apitypes.QuotaRequestList
	json.Unmarshal(b, &rl)
	if len(rl.Requests) != 1 || rl.Requests[0].Status != "pending" {
		t.Errorf("requests after the refused ones: %s; want the one pending request", b)
	}
	_, b = e.do("GET", "/api/v1/envs/torch", admin, nil)
	var el apitypes.EnvList
	json.Unmarshal(b, &el)
	if len(el.Envs) != 1 || el.Envs[0].Deprecated {
		t.Errorf("environments after the refused ones: %s; want torch@1, not deprecated", b)
	}
	_, b = e.do("GET", "/api/v1/pools/default", admin, nil)
	if strings.Contains(string(b), "a100") {
		t.Errorf("pool after the refused write: %s", b)
	}
}
