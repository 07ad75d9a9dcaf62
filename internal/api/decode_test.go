package api_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"trainyard/internal/api/apitypes"
)

// TestBodyMustBeOneJSONObject: a PUT or POST body of null decoded to the
// zero value, so PUT /quotas/... with null zeroed the quota; every route
// now refuses a body that is not exactly one JSON object, and nothing
// stored changes.
func TestBodyMustBeOneJSONObject(t *testing.T) {
	e := newAuthzEnv(t)
	admin := e.tokens["admin"]
	quota := func() apitypes.Quota {
		t.Helper()
		_, b := e.do("GET", "/api/v1/quotas?project=default&pool=default", admin, nil)
		var l apitypes.QuotaList
		if err := json.Unmarshal(b, &l); err != nil || len(l.Quotas) != 1 {
			t.Fatalf("quotas: %s", b)
		}
		return l.Quotas[0]
	}
	before := quota()
	if before.CPUs != 4 {
		t.Fatalf("setup quota = %+v, want 4 CPUs", before)
	}
	routes := []struct{ method, path string }{
		{"PUT", "/api/v1/quotas/default/default"},
		{"PUT", "/api/v1/pools/default"},
		{"PUT", "/api/v1/projects/default"},
		{"POST", "/api/v1/jobs"},
		{"POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", e.jobs["own"])},
		{"POST", "/api/v1/tokens"},
		{"POST", "/api/v1/users"},
		{"POST", "/api/v1/quota-requests"},
		{"PUT", "/api/v1/budgets/default"},
	}
	for _, rt := range routes {
		for body, want := range map[string]string{
			"null":                    "is null, not a JSON object",
			"  null\n":                "is null, not a JSON object",
			"[]":                      "is an array",
			`"x"`:                     "is a string",
			`{"cpus": 4} {"cpus": 0}`: "more follows the JSON object",
			`{"cpus": 4} trailing`:    "not valid JSON",
			`{"cpus": 4`:              "not valid JSON for this endpoint: unexpected EOF",
			// What follows the object is reported before what is wrong
			// in it.
			`{"no_such_field": 1} {}`: "more follows the JSON object",
			`{"no_such_field": 1}`:    `unknown field "no_such_field"`,
		} {
			code, b := e.do(rt.method, rt.path, admin, body)
			var eb apitypes.Error
			json.Unmarshal(b, &eb)
			if code != 400 || len(eb.Error.Fields) != 1 || eb.Error.Fields[0].Path != "body" || !strings.Contains(eb.Error.Fields[0].Message, want) {
				t.Errorf("%s %s with %q: %d %s; want 400 on body saying %q", rt.method, rt.path, body, code, b, want)
			}
		}
	}
	if after := quota(); after.CPUs != before.CPUs || after.Memory != before.Memory {
		t.Errorf("quota after refused writes = %+v, want %+v", after, before)
	}
	// One object, with surrounding whitespace, still works.
	if code, b := e.do("PUT", "/api/v1/quotas/default/default", admin, "\n {\"cpus\": 2, \"memory\": \"8GiB\"} \n"); code != 200 {
		t.Errorf("a valid quota: %d %s", code, b)
	}
}
