package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api"
	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/local"
	"trainyard/internal/logs"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
)

type env struct {
	t     testing.TB
	srv   *httptest.Server
	st    store.Store
	token string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	return newEnvOn(t, st)
}

// newEnvOn is newEnv on a given store.
func newEnvOn(t testing.TB, st store.Store) *env {
	return newEnvFiles(t, st, nil)
}

// newEnvFiles is newEnv on a given store, reading the jobs' files with
// files (nil: the local executor's reader).
func newEnvFiles(t testing.TB, st store.Store, files executor.Files) *env {
	t.Helper()
	dir := t.TempDir()
	var err error
	runs := filepath.Join(dir, "runs")
	if files == nil {
		files = local.NewReader(runs)
	}
	svc := service.New(service.Config{Store: st, ArtifactsRoot: filepath.Join(dir, "artifacts"), Logs: logs.Layout{Root: runs}, Files: files})
	token, err := svc.Identity.Bootstrap(context.Background())
	if err != nil || token == "" {
		t.Fatalf("bootstrap: %q %v", token, err)
	}
	admin := service.Principal{Subject: "admin", Role: "admin"}
	pool := domain.Pool{Name: "default", Borrowing: true,
		Nodes: []domain.Node{{Name: "n1", CPUs: 8, Memory: 32 << 30}}}
	if _, _, err := svc.Pools.PutPool(context.Background(), admin, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Pools.SetQuota(context.Background(), admin, domain.Quota{Project: "default", Pool: "default",
		Guaranteed: pool.Capacity(), MaxPriority: domain.PriorityUrgent}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler(api.Config{Service: svc, Ready: st.Ping}))
	t.Cleanup(func() { srv.Close(); st.Close() })
	return &env{t: t, srv: srv, st: st, token: token}
}

// do sends a request and returns the status and raw body.
func (e *env) do(method, path, token string, body any, header ...string) (int, []byte) {
	e.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		r = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, e.srv.URL+path, r)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (e *env) submit(spec string, header ...string) (int, apitypes.Job) {
	e.t.Helper()
	s, _ := json.Marshal(spec)
	code, b := e.do("POST", "/api/v1/jobs", e.token, apitypes.SubmitRequest{Spec: s}, header...)
	var j apitypes.Job
	json.Unmarshal(b, &j)
	return code, j
}

func decodeErr(t *testing.T, b []byte) apitypes.ErrorBody {
	t.Helper()
	var e apitypes.Error
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Code == "" {
		t.Fatalf("not a JSON error body: %q", b)
	}
	return e.Error
}

func TestAuthentication(t *testing.T) {
	e := newEnv(t)
	for name, token := range map[string]string{"none": "", "unknown": "ty_nope"} {
		code, b := e.do("GET", "/api/v1/jobs", token, nil)
		if code != 401 || decodeErr(t, b).Code != "unauthorized" {
			t.Errorf("%s token: %d %s", name, code, b)
		}
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, _ := e.do("GET", p, "", nil); code != 200 {
			t.Errorf("%s without a token: %d", p, code)
		}
	}
}

func TestSubmitGetAndIdempotency(t *testing.T) {
	e := newEnv(t)
	code, j := e.submit("name: a\nentrypoint: [true]\n", "Idempotency-Key", "k1")
	if code != 201 || j.ID == 0 || j.State != "queued" || j.Created == nil || !*j.Created {
		t.Fatalf("submit: %d %+v", code, j)
	}
	code, again := e.submit("name: a\nentrypoint: [true]\n", "Idempotency-Key", "k1")
	if code != 200 || again.ID != j.ID || *again.Created {
		t.Fatalf("replay: %d id %d created %v; want 200, id %d, created false", code, again.ID, *again.Created, j.ID)
	}
	code, b := e.do("GET", fmt.Sprintf("/api/v1/jobs/%d", j.ID), e.token, nil)
	var full apitypes.Job
	json.Unmarshal(b, &full)
	if code != 200 || len(full.Spec) == 0 || len(full.Transitions) != 1 || full.Transitions[0].To != "queued" || full.Resources.CPUs != 1 {
		t.Fatalf("get: %d %s", code, b)
	}
}

// TestSweepIdempotency: a sweep submit repeated with its Idempotency-Key
// answers 200 with the first sweep and its members, and stores nothing.
func TestSweepIdempotency(t *testing.T) {
	e := newEnv(t)
	spec, _ := json.Marshal("name: arr\nentrypoint: [true]\n")
	submit := func(key string) (int, apitypes.Sweep) {
		code, b := e.do("POST", "/api/v1/sweeps", e.token, apitypes.SweepRequest{Spec: spec, Array: "0-2"}, "Idempotency-Key", key)
		var sw apitypes.Sweep
		if err := json.Unmarshal(b, &sw); err != nil {
			t.Fatalf("submit sweep: %d %s", code, b)
		}
		return code, sw
	}
	code, first := submit("nightly-7")
	if code != 201 || first.ID == 0 || len(first.Jobs) != 3 || first.Created == nil || !*first.Created {
		t.Fatalf("submit: %d %+v", code, first)
	}
	code, again := submit("nightly-7")
	if code != 200 || again.ID != first.ID || again.Created == nil || *again.Created || !slices.Equal(again.Jobs, first.Jobs) {
		t.Fatalf("replay: %d %+v; want 200, sweep %d with members %v, created false", code, again, first.ID, first.Jobs)
	}
	code, b := e.do("GET", "/api/v1/jobs?limit=100", e.token, nil)
	var list apitypes.JobList
	if err := json.Unmarshal(b, &list); err != nil || code != 200 || len(list.Jobs) != 3 {
		t.Fatalf("jobs after a replay: %d, %d jobs (%v); want 3", code, len(list.Jobs), err)
	}
	if code, other := submit("nightly-8"); code != 201 || other.ID == first.ID {
		t.Errorf("another key: %d sweep %d; want 201 and a new sweep", code, other.ID)
	}
	code, b = e.do("POST", "/api/v1/sweeps", e.token, apitypes.SweepRequest{Spec: spec, Array: "0-2"}, "Idempotency-Key", strings.Repeat("k", 201))
	if code != 400 || !strings.Contains(string(b), "Idempotency-Key") {
		t.Errorf("a 201-character key: %d %s; want 400 naming Idempotency-Key", code, b)
	}
}

func TestErrors(t *testing.T) {
	e := newEnv(t)
	cases := map[string]struct {
		method, path, body string
		status             int
		code, contains     string
	}{
		"unknown job":        {"GET", "/api/v1/jobs/99", "", 404, "not_found", "job 99 does not exist"},
		"bad id":             {"GET", "/api/v1/jobs/abc", "", 400, "invalid_request", ""},
		"bad json":           {"POST", "/api/v1/jobs", "{", 400, "invalid_spec", ""},
		"unknown body field": {"POST", "/api/v1/jobs", `{"spec": "name: a", "bogus": 1}`, 400, "invalid_spec", ""},
		"missing spec":       {"POST", "/api/v1/jobs", `{}`, 400, "invalid_spec", ""},
		"bad state filter":   {"GET", "/api/v1/jobs?state=done", "", 400, "invalid_request", ""},
		"bad limit":          {"GET", "/api/v1/jobs?limit=x", "", 400, "invalid_request", ""},
		"no attempt logs":    {"GET", "/api/v1/jobs/1/logs", "", 404, "not_found", "no attempt yet"},
		"unknown route":      {"GET", "/api/v1/nope", "", 404, "not_found", ""},
	}
	e.submit("name: a\nentrypoint: [true]\n")
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var body any
			if tc.body != "" {
				body = tc.body
			}
			code, b := e.do(tc.method, tc.path, e.token, body)
			got := decodeErr(t, b)
			if code != tc.status || got.Code != tc.code || !strings.Contains(got.Message, tc.contains) {
				t.Fatalf("%d %+v; want %d %s containing %q", code, got, tc.status, tc.code, tc.contains)
			}
			if strings.HasPrefix(got.Message, "not found") || strings.HasPrefix(got.Message, "conflict") {
				t.Errorf("message starts with its class: %q", got.Message)
			}
		})
	}
}

func TestInvalidSpecStoresNothing(t *testing.T) {
	e := newEnv(t)
	code, b := e.do("POST", "/api/v1/jobs", e.token, apitypes.SubmitRequest{Spec: json.RawMessage(`{"name": "Bad Name", "entrypoint": [], "resources": {"gpus": -1}}`)})
	got := decodeErr(t, b)
	if code != 400 || len(got.Fields) < 3 {
		t.Fatalf("%d %+v", code, got)
	}
	n, _ := e.st.CountJobs(context.Background())
	for st, c := range n {
		if c != 0 {
			t.Errorf("%d jobs %s after an invalid submit", c, st)
		}
	}
}

func TestListPagesWithCursor(t *testing.T) {
	e := newEnv(t)
	for i := range 5 {
		e.submit(fmt.Sprintf("name: j%d\nentrypoint: [true]\n", i))
	}
	var ids []int64
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		code, b := e.do("GET", "/api/v1/jobs?limit=2&cursor="+cursor, e.token, nil)
		var l apitypes.JobList
		if err := json.Unmarshal(b, &l); err != nil || code != 200 {
			t.Fatalf("%d %s", code, b)
		}
		for _, j := range l.Jobs {
			ids = append(ids, j.ID)
		}
		if l.NextCursor == "" {
			break
		}
		cursor = l.NextCursor
	}
	if fmt.Sprint(ids) != "[5 4 3 2 1]" {
		t.Fatalf("pages gave %v, want newest first without gaps or repeats", ids)
	}
}

func TestCancel(t *testing.T) {
	e := newEnv(t)
	_, j := e.submit("name: a\nentrypoint: [true]\n")
	path := fmt.Sprintf("/api/v1/jobs/%d/cancel", j.ID)
	code, b := e.do("POST", path, e.token, apitypes.CancelRequest{Reason: "typo"})
	var got apitypes.Job
	json.Unmarshal(b, &got)
	if code != 200 || got.State != "canceled" || got.Message != "canceled by admin: typo" {
		t.Fatalf("cancel queued: %d %s", code, b)
	}
	if code, _ := e.do("POST", path, e.token, nil); code != 200 {
		t.Errorf("cancel twice: %d, want 200", code)
	}
	// A finished job cannot be canceled.
	_, done := e.submit("name: b\nentrypoint: [true]\n")
	now := time.Now()
	errs, err := e.st.Apply(context.Background(), []store.Change{
		{JobID: done.ID, Move: domain.MoveStart(), At: now, Actor: "test"},
		{JobID: done.ID, Move: domain.MoveFail(), At: now, Actor: "test"}})
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatal(err, errs)
	}
	code, b = e.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", done.ID), e.token, nil)
	if got := decodeErr(t, b); code != 409 || !strings.Contains(got.Message, "already failed") {
		t.Fatalf("cancel failed job: %d %+v", code, got)
	}
}
