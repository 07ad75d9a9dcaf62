package api_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api"
	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store/sqlite"
)

// newQueueEnv is newEnv with a fixed queue function.
func newQueueEnv(t *testing.T, queue service.QueueFunc) *env {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	svc := service.New(service.Config{Store: st, Queue: queue})
	token, err := svc.Identity.Bootstrap(context.Background())
	if err != nil || token == "" {
		t.Fatalf("bootstrap: %q %v", token, err)
	}
	srv := httptest.NewServer(api.Handler(api.Config{Service: svc, Ready: st.Ping}))
	t.Cleanup(func() { srv.Close(); st.Close() })
	return &env{t: t, srv: srv, st: st, token: token}
}

const poolBody = `{
  "name": "standard", "gpu_type": "a100-80g",
  "nodes": [{"name": "node-a", "cpus": 32, "memory": "256GiB", "gpus": [0, 1, 2, 3]},
            {"name": "node-b", "cpus": 8, "memory": "32GiB", "gpus": []}],
  "max_gpus_per_job": 4, "max_timeout": "24h", "max_running": 8,
  "priorities": ["normal", "high"], "borrowing": true, "preemption": true,
  "log_limit": "2GiB", "rates": {"gpu_hour": "2.1", "object_gib_month": 0.023},
  "idle_stop": {"below": 0.05, "for": "1800s"}
}`

func decodeInto[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %T from %s: %v", v, b, err)
	}
	return v
}

func TestPoolsCreateGetList(t *testing.T) {
	e := newEnv(t)
	code, b := e.do("PUT", "/api/v1/pools/standard", e.token, poolBody)
	if code != 201 {
		t.Fatalf("create: %d %s", code, b)
	}
	p := decodeInto[apitypes.Pool](t, b)
	want := apitypes.Pool{Name: "standard", Executor: "local", GPUType: "a100-80g",
		Nodes: []apitypes.Node{{Name: "node-a", CPUs: 32, Memory: "256GiB", GPUs: []int{0, 1, 2, 3}},
			{Name: "node-b", CPUs: 8, Memory: "32GiB", GPUs: []int{}}},
		MaxGPUsPerJob: 4, MaxTimeout: "24h", MaxRunning: 8, Priorities: []string{"normal", "high"},
		Borrowing: true, Preemption: true, LogLimit: "2GiB",
		Rates:    apitypes.PoolRates{Currency: "USD", GPUHour: "2.10", ObjectGiBMonth: "0.023"},
		IdleStop: &apitypes.PoolIdleStop{Below: 0.05, For: "30m"},
		Capacity: apitypes.PoolCapacity{GPUs: 4, CPUs: 40, Memory: "288GiB"}, Open: true}
	if p.CreatedAt.IsZero() || !p.UpdatedAt.Equal(p.CreatedAt) {
		t.Errorf("times: created %v updated %v", p.CreatedAt, p.UpdatedAt)
	}
	createdAt := p.CreatedAt
	p.CreatedAt, p.UpdatedAt = time.Time{}, time.Time{}
	if g, w := mustJSON(t, p), mustJSON(t, want); g != w {
		t.Errorf("created pool:\n got %s\nwant %s", g, w)
	}

	code, b = e.do("GET", "/api/v1/pools/standard", e.token, nil)
	if code != 200 || decodeInto[apitypes.Pool](t, b).Capacity.GPUs != 4 {
		t.Errorf("get: %d %s", code, b)
	}

	// Replacing returns 200 and changes what was sent; GET's own output
	// (with its computed fields) is accepted back as a body.
	got := decodeInto[apitypes.Pool](t, b)
	got.MaxRunning = 2
	got.Borrowing = false
	got.LogLimit = "" // the server's limit again
	got.IdleStop = nil
	code, b = e.do("PUT", "/api/v1/pools/standard", e.token, got)
	if code != 200 {
		t.Fatalf("replace: %d %s", code, b)
	}
	if r := decodeInto[apitypes.Pool](t, b); r.MaxRunning != 2 || r.Borrowing || r.LogLimit != "" || r.IdleStop != nil || !r.CreatedAt.Equal(createdAt) {
		t.Errorf("replaced: %s", b)
	}

	code, b = e.do("PUT", "/api/v1/pools/big", e.token, strings.Replace(poolBody, `"standard"`, `"big"`, 1))
	if code != 201 {
		t.Fatalf("create big: %d %s", code, b)
	}
	code, b = e.do("GET", "/api/v1/pools", e.token, nil)
	list := decodeInto[apitypes.PoolList](t, b)
	// newEnv's own pool "default" sorts between the two.
	if code != 200 || len(list.Pools) != 3 || list.Pools[0].Name != "big" || list.Pools[2].Name != "standard" {
		t.Errorf("list: %d %s", code, b)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestPoolsErrors(t *testing.T) {
	e := newEnv(t)
	cases := map[string]struct {
		method, path, body string
		status             int
		code               string
		paths              []string
		contains           string
	}{
		"no token":        {"GET", "/api/v1/pools", "", 401, "unauthorized", nil, ""},
		"unknown pool":    {"GET", "/api/v1/pools/gpu", "", 404, "not_found", nil, `pool "gpu" does not exist; list pools with: trainyard pool ls`},
		"name mismatch":   {"PUT", "/api/v1/pools/other", poolBody, 400, "invalid_request", []string{"name"}, ""},
		"bad json":        {"PUT", "/api/v1/pools/standard", "{", 400, "invalid_request", []string{"body"}, ""},
		"unknown field":   {"PUT", "/api/v1/pools/standard", `{"nodes": [], "bogus": 1}`, 400, "invalid_request", []string{"body"}, ""},
		"bad memory":      {"PUT", "/api/v1/pools/standard", `{"nodes": [{"name": "a", "cpus": 1, "memory": "lots"}], "max_timeout": "forever"}`, 400, "invalid_request", []string{"nodes[0].memory", "max_timeout"}, ""},
		"bad log limit":   {"PUT", "/api/v1/pools/standard", `{"nodes": [{"name": "a", "cpus": 1, "memory": "1GiB"}], "log_limit": "a lot"}`, 400, "invalid_request", []string{"log_limit"}, ""},
		"idle stop for":   {"PUT", "/api/v1/pools/standard", `{"nodes": [{"name": "a", "cpus": 1, "memory": "1GiB"}], "idle_stop": {"below": 0.05, "for": "soon"}}`, 400, "invalid_request", []string{"idle_stop.for"}, ""},
		"small log limit": {"PUT", "/api/v1/pools/standard", `{"nodes": [{"name": "a", "cpus": 1, "memory": "1GiB"}], "log_limit": "64KiB"}`, 400, "invalid_request", []string{"log_limit"}, ""},
		"validation":      {"PUT", "/api/v1/pools/standard", `{"nodes": [{"name": "a", "cpus": 0, "memory": "1GiB", "gpus": [0]}, {"name": "b", "cpus": 1, "memory": "1GiB", "gpus": [0]}]}`, 400, "invalid_request", []string{"nodes[0].cpus", "nodes[1].gpus"}, ""},
		"quota no pool":   {"PUT", "/api/v1/quotas/vision/gpu", `{"gpus": 1}`, 404, "not_found", nil, `pool "gpu" does not exist`},
		"quota mismatch":  {"PUT", "/api/v1/quotas/vision/gpu", `{"project": "nlp", "pool": "x"}`, 400, "invalid_request", []string{"project", "pool"}, ""},
		"quota memory":    {"PUT", "/api/v1/quotas/vision/gpu", `{"memory": "2 bananas"}`, 400, "invalid_request", []string{"memory"}, ""},
		"delete missing":  {"DELETE", "/api/v1/quotas/vision/gpu", "", 404, "not_found", nil, `project "vision" has no quota in pool "gpu"`},
		"shares":          {"PUT", "/api/v1/projects/vision", `{"shares": 0}`, 400, "invalid_request", []string{"shares"}, ""},
		"project name":    {"PUT", "/api/v1/projects/Vision", `{"shares": 1}`, 400, "invalid_request", []string{"name"}, ""},
		"queue no pool":   {"GET", "/api/v1/queue?pool=nope", "", 404, "not_found", nil, `pool "nope" does not exist`},
		"bad rate": {"PUT", "/api/v1/pools/standard", `{"nodes": [{"name": "a", "cpus": 1, "memory": "1GiB"}], "rates": {"gpu_hour": "$2", "cpu_hour": "0.0000001"}}`,
			400, "invalid_request", []string{"rates.gpu_hour", "rates.cpu_hour"}, ""},
		"negative rate": {"PUT", "/api/v1/pools/standard", `{"nodes": [{"name": "a", "cpus": 1, "memory": "1GiB"}], "rates": {"memory_gib_hour": "-0.01"}}`,
			400, "invalid_request", []string{"rates.memory_gib_hour"}, ""},
		"other currency": {"PUT", "/api/v1/pools/standard", `{"nodes": [{"name": "a", "cpus": 1, "memory": "1GiB"}], "rates": {"currency": "EUR", "gpu_hour": "1"}}`,
			400, "invalid_request", []string{"rates.currency"}, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			token := e.token
			if tc.status == 401 {
				token = ""
			}
			code, b := e.do(tc.method, tc.path, token, tc.body)
			if code != tc.status {
				t.Fatalf("status %d, want %d: %s", code, tc.status, b)
			}
			eb := decodeErr(t, b)
			if eb.Code != tc.code || !strings.Contains(eb.Message, tc.contains) {
				t.Errorf("error = %+v, want code %s containing %q", eb, tc.code, tc.contains)
			}
			var paths []string
			for _, f := range eb.Fields {
				paths = append(paths, f.Path)
			}
			if strings.Join(paths, " ") != strings.Join(tc.paths, " ") {
				t.Errorf("field paths = %v, want %v", paths, tc.paths)
			}
		})
	}
}

func TestQuotasAPI(t *testing.T) {
	e := newEnv(t)
	for _, name := range []string{"standard", "big"} {
		if code, b := e.do("PUT", "/api/v1/pools/"+name, e.token, strings.Replace(poolBody, `"standard"`, `"`+name+`"`, 1)); code != 201 {
			t.Fatalf("create pool: %d %s", code, b)
		}
	}
	code, b := e.do("PUT", "/api/v1/quotas/vision/standard", e.token,
		`{"gpus": 2, "cpus": 16, "memory": "128GiB", "jobs": 4, "borrow": {"gpus": 2, "memory": "64GiB"}, "max_priority": "high"}`)
	if code != 200 {
		t.Fatalf("put quota: %d %s", code, b)
	}
	q := decodeInto[apitypes.Quota](t, b)
	if q.Project != "vision" || q.Pool != "standard" || q.GPUs != 2 || q.CPUs != 16 || q.Memory != "128GiB" || q.Jobs != 4 ||
		q.Borrow != (apitypes.QuotaBorrow{GPUs: 2, Memory: "64GiB"}) || q.MaxPriority != "high" || q.UpdatedAt.IsZero() {
		t.Errorf("quota = %+v", q)
	}
	for _, pq := range []string{"nlp/standard", "vision/big"} {
		if code, b := e.do("PUT", "/api/v1/quotas/"+pq, e.token, `{"gpus": 1}`); code != 200 {
			t.Fatalf("put quota %s: %d %s", pq, code, b)
		}
	}
	filters := map[string][]string{
		"":                         {"default/default", "nlp/standard", "vision/big", "vision/standard"},
		"?project=vision":          {"vision/big", "vision/standard"},
		"?pool=standard":           {"nlp/standard", "vision/standard"},
		"?project=vision&pool=big": {"vision/big"},
		"?project=audio":           nil,
	}
	for query, want := range filters {
		code, b := e.do("GET", "/api/v1/quotas"+query, e.token, nil)
		list := decodeInto[apitypes.QuotaList](t, b)
		var got []string
		for _, q := range list.Quotas {
			got = append(got, q.Project+"/"+q.Pool)
		}
		if code != 200 || strings.Join(got, " ") != strings.Join(want, " ") || list.Quotas == nil {
			t.Errorf("GET quotas%s: %d %s; want %v", query, code, b, want)
		}
	}
	if code, b := e.do("DELETE", "/api/v1/quotas/vision/big", e.token, nil); code != 204 || len(b) != 0 {
		t.Errorf("delete: %d %q", code, b)
	}
	if _, b := e.do("GET", "/api/v1/quotas?project=vision", e.token, nil); len(decodeInto[apitypes.QuotaList](t, b).Quotas) != 1 {
		t.Errorf("after delete: %s", b)
	}
}

func TestProjectsAPI(t *testing.T) {
	e := newEnv(t)
	code, b := e.do("PUT", "/api/v1/projects/vision", e.token, `{"shares": 2.5}`)
	if p := decodeInto[apitypes.Project](t, b); code != 200 || p.Name != "vision" || p.Shares != 2.5 || p.CreatedAt.IsZero() {
		t.Fatalf("put: %d %s", code, b)
	}
	if code, b := e.do("PUT", "/api/v1/projects/audio", e.token, `{"name": "audio", "shares": 1}`); code != 200 {
		t.Fatalf("put with matching name: %d %s", code, b)
	}
	code, b = e.do("GET", "/api/v1/projects", e.token, nil)
	list := decodeInto[apitypes.ProjectList](t, b)
	if code != 200 || len(list.Projects) != 2 || list.Projects[0].Name != "audio" || list.Projects[1].Shares != 2.5 {
		t.Errorf("list: %d %s", code, b)
	}
}

func TestQueueAPI(t *testing.T) {
	submitted := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	var asked []string
	e := newQueueEnv(t, func(_ context.Context, pool string) ([]service.QueueEntry, error) {
		asked = append(asked, pool)
		return []service.QueueEntry{
			{JobID: 4, Name: "a", Project: "vision", Pool: "standard", Priority: domain.PriorityHigh, Position: 1,
				Reason: domain.Reason("WaitingForResources"), Message: "needs 2 GPUs, 0 free", Submitted: submitted,
				EstimatedStart: submitted.Add(time.Hour)},
			{JobID: 5, Name: "b", Project: "nlp", Pool: "standard", Priority: domain.PriorityNormal, Position: 2, Submitted: submitted},
		}, nil
	})
	code, b := e.do("GET", "/api/v1/queue?pool=standard", e.token, nil)
	if code != 200 {
		t.Fatalf("queue: %d %s", code, b)
	}
	q := decodeInto[apitypes.Queue](t, b)
	if len(q.Entries) != 2 || len(asked) != 1 || asked[0] != "standard" {
		t.Fatalf("queue = %s (asked %v)", b, asked)
	}
	first := q.Entries[0]
	if first.ID != 4 || first.Position != 1 || first.Priority != "high" || first.Reason != "WaitingForResources" ||
		first.EstimatedStart == nil || !first.EstimatedStart.Equal(submitted.Add(time.Hour)) || !first.SubmittedAt.Equal(submitted) {
		t.Errorf("first entry = %+v", first)
	}
	if q.Entries[1].EstimatedStart != nil || strings.Contains(string(b), `"estimated_start":"0001`) {
		t.Errorf("an entry without an estimate must leave estimated_start out: %s", b)
	}

	empty := newEnv(t) // no control loop: the queue is empty, not null
	code, b = empty.do("GET", "/api/v1/queue", empty.token, nil)
	if code != 200 || !strings.Contains(string(b), `"entries":[]`) {
		t.Errorf("queue without a control loop: %d %s", code, b)
	}
}

// Rates set through the API read back exactly, in the server's currency,
// appear before and after in the pool's audit record, and a bad rate is
// refused without changing the pool or writing a record.
func TestPoolRatesAPI(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	svc := service.New(service.Config{Store: st})
	token, err := svc.Identity.Bootstrap(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler(api.Config{Service: svc, Ready: st.Ping, Currency: "EUR"}))
	t.Cleanup(func() { srv.Close(); st.Close() })
	e := &env{t: t, srv: srv, st: st, token: token}

	if code, b := e.do("PUT", "/api/v1/pools/standard", e.token, poolBody); code != 201 {
		t.Fatalf("create: %d %s", code, b)
	}
	code, b := e.do("GET", "/api/v1/pools/standard", e.token, nil)
	p := decodeInto[apitypes.Pool](t, b)
	if want := (apitypes.PoolRates{Currency: "EUR", GPUHour: "2.10", ObjectGiBMonth: "0.023"}); code != 200 || p.Rates != want {
		t.Fatalf("get: %d rates %+v, want %+v", code, p.Rates, want)
	}

	// A partial change: GET's body back with one rate changed and one added.
	p.Rates.GPUHour, p.Rates.CPUHour = "3.000125", "0.04"
	if code, b := e.do("PUT", "/api/v1/pools/standard", e.token, p); code != 200 {
		t.Fatalf("update: %d %s", code, b)
	}
	recs := poolAudit(t, e)
	last := recs[len(recs)-1]
	if !strings.Contains(last.Before, `"rates":{"gpu_hour":"2.10","object_gib_month":"0.023"}`) ||
		!strings.Contains(last.After, `"rates":{"gpu_hour":"3.000125","cpu_hour":"0.04","object_gib_month":"0.023"}`) {
		t.Errorf("audit record: before %s after %s", last.Before, last.After)
	}

	bad := p
	bad.Rates.GPUHour = "-1"
	code, b = e.do("PUT", "/api/v1/pools/standard", e.token, bad)
	if eb := decodeErr(t, b); code != 400 || len(eb.Fields) != 1 || eb.Fields[0].Path != "rates.gpu_hour" ||
		!strings.Contains(eb.Fields[0].Message, "is -1.00; a rate cannot be negative") {
		t.Errorf("negative rate: %d %s", code, b)
	}
	code, b = e.do("GET", "/api/v1/pools/standard", e.token, nil)
	if got := decodeInto[apitypes.Pool](t, b).Rates; code != 200 || got.GPUHour != "3.000125" || got.CPUHour != "0.04" {
		t.Errorf("after a refused change: %d %+v", code, got)
	}
	if n := len(poolAudit(t, e)); n != len(recs) {
		t.Errorf("a refused change left %d pool records, want %d", n, len(recs))
	}
}

func poolAudit(t *testing.T, e *env) []apitypes.AuditRecord {
	t.Helper()
	code, b := e.do("GET", "/api/v1/audit?action=pool.write&target=pool/standard", e.token, nil)
	recs := decodeInto[apitypes.AuditList](t, b).Records
	if code != 200 || len(recs) == 0 {
		t.Fatalf("audit: %d %s", code, b)
	}
	return recs
}
