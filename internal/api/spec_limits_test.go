package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"trainyard/internal/api/apitypes"
)

// aliases is "*a, *a, …" with n aliases.
func aliases(n int) string { return strings.TrimSuffix(strings.Repeat("*a, ", n), ", ") }

// billionLaughs nests ten aliases of the level below, nine levels deep:
// 90 aliases standing for 10^10 strings.
func billionLaughs() string {
	var b strings.Builder
	b.WriteString("name: laughs\nlabels:\n  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "  l%d: &l%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 10), ", "))
	}
	b.WriteString("entrypoint: *l9\n")
	return b.String()
}

// specBombs are submit requests whose spec stands for far more than it
// weighs, with the words the 400 must have.
func specBombs() map[string]struct {
	req  apitypes.SubmitRequest
	want string
} {
	text := func(s string) json.RawMessage { b, _ := json.Marshal(s); return b }
	return map[string]struct {
		req  apitypes.SubmitRequest
		want string
	}{
		// 78 KB standing for 360 MB.
		"repeated argument": {apitypes.SubmitRequest{Spec: text("name: rep\nentrypoint: [&a " + strings.Repeat("x", 30_000) + ", " + aliases(12_000) + "]\n")},
			"at most 100"},
		"billion laughs": {apitypes.SubmitRequest{Spec: text(billionLaughs())}, "at most 100000"},
		"expanded size": {apitypes.SubmitRequest{Spec: text("name: big\nentrypoint: [&a " + strings.Repeat("x", 200<<10) + ", " + aliases(5) + "]\n")},
			"at most 1048576"},
		// Nearly the whole request body: 480,000 values.
		"node bomb": {apitypes.SubmitRequest{Spec: text("name: flat\nentrypoint: [" + strings.Repeat("0,", 480_000) + "0]\n")},
			"at most 100000"},
		"node bomb as a JSON object": {apitypes.SubmitRequest{Spec: json.RawMessage(`{"name": "flat", "entrypoint": [` + strings.Repeat(`0,`, 480_000) + `0]}`)},
			"at most 100000"},
	}
}

// A spec over the limits is a 400 that names the document and the limit,
// and nothing is stored.
func TestSpecBombsAreRefused(t *testing.T) {
	e := newEnv(t)
	for name, tc := range specBombs() {
		t.Run(name, func(t *testing.T) {
			code, b := e.do("POST", "/api/v1/jobs", e.token, tc.req)
			got := decodeErr(t, b)
			if code != http.StatusBadRequest || got.Code != "invalid_spec" || len(got.Fields) != 1 ||
				got.Fields[0].Path != "document" || !strings.Contains(got.Fields[0].Message, tc.want) {
				t.Fatalf("%d %+v; want 400 invalid_spec with one document problem naming %q", code, got, tc.want)
			}
		})
	}
	n, _ := e.st.CountJobs(context.Background())
	for st, c := range n {
		if c != 0 {
			t.Errorf("%d jobs %s after refused submits", c, st)
		}
	}
}

// Templates are held to the same limits: a bomb is refused at creation,
// and variable values that would expand past 1 MiB at submit.
func TestTemplateBombsAreRefused(t *testing.T) {
	e := newEnv(t)
	code, b := e.do("POST", "/api/v1/templates", e.token, apitypes.CreateTemplate{Name: "laughs", Body: billionLaughs()})
	if got := decodeErr(t, b); code != 400 || got.Code != "invalid_template" || len(got.Fields) != 1 || !strings.Contains(got.Fields[0].Message, "at most 100000") {
		t.Fatalf("create: %d %+v; want 400 naming the node limit", code, got)
	}
	body := "vars: {arg: {default: x}}\nname: t\nentrypoint: [\"${arg}\", \"${arg}\", \"${arg}\"]\n"
	if code, b := e.do("POST", "/api/v1/templates", e.token, apitypes.CreateTemplate{Name: "t", Body: body}); code != 201 && code != 200 {
		t.Fatalf("create: %d %s", code, b)
	}
	code, b = e.do("POST", "/api/v1/jobs", e.token, apitypes.SubmitRequest{Template: "t", Vars: map[string]string{"arg": strings.Repeat("y", 400<<10)}})
	if got := decodeErr(t, b); code != 400 || len(got.Fields) != 1 || got.Fields[0].Path != "vars" || !strings.Contains(got.Fields[0].Message, "at most 1048576") {
		t.Fatalf("submit: %d %+v; want 400 naming vars and the size limit", code, got)
	}
}

// BenchmarkRefuseSpecBomb measures a refused submit through the HTTP API,
// request and answer included; B/op bounds what the server's memory grows
// by for one request.
func BenchmarkRefuseSpecBomb(b *testing.B) {
	e := newEnv(b)
	for name, tc := range specBombs() {
		body, _ := json.Marshal(tc.req)
		b.Run(strings.ReplaceAll(name, " ", "_"), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if code, _ := e.do("POST", "/api/v1/jobs", e.token, string(body)); code != http.StatusBadRequest {
					b.Fatalf("status %d", code)
				}
			}
		})
	}
}
