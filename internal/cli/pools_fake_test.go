package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
)

// poolFake is an in-memory stand-in for the pool, quota, project and queue
// endpoints of the API.
type poolFake struct {
	mu       sync.Mutex
	pools    map[string]apitypes.Pool
	quotas   map[string]apitypes.Quota // "project/pool" →
	projects map[string]apitypes.Project
	queue    []apitypes.QueueEntry
	puts     []string // raw bodies of PUT requests, in order
	requests []string // "METHOD path?query"
}

// newPoolHarness returns a harness whose server is a poolFake.
func newPoolHarness(t *testing.T) (*harness, *poolFake) {
	t.Helper()
	pf := &poolFake{pools: map[string]apitypes.Pool{}, quotas: map[string]apitypes.Quota{}, projects: map[string]apitypes.Project{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/pools", pf.listPools)
	mux.HandleFunc("GET /api/v1/pools/{name}", pf.getPool)
	mux.HandleFunc("PUT /api/v1/pools/{name}", pf.putPool)
	mux.HandleFunc("GET /api/v1/quotas", pf.listQuotas)
	mux.HandleFunc("PUT /api/v1/quotas/{project}/{pool}", pf.putQuota)
	mux.HandleFunc("DELETE /api/v1/quotas/{project}/{pool}", pf.deleteQuota)
	mux.HandleFunc("GET /api/v1/projects", pf.listProjects)
	mux.HandleFunc("PUT /api/v1/projects/{name}", pf.putProject)
	mux.HandleFunc("GET /api/v1/queue", pf.getQueue)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pf.mu.Lock()
		pf.requests = append(pf.requests, r.Method+" "+r.URL.RequestURI())
		pf.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			fail(w, http.StatusUnauthorized, "unauthorized", "invalid or missing token")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	h := &harness{
		t:   t,
		srv: &fakeServer{t: t, srv: srv},
		vars: map[string]string{
			EnvServer:         srv.URL,
			EnvToken:          testToken,
			"XDG_CONFIG_HOME": t.TempDir(),
			"NO_COLOR":        "",
		},
	}
	return h, pf
}

func (pf *poolFake) seenPuts() []string {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	return append([]string(nil), pf.puts...)
}

func (pf *poolFake) seenRequests() []string {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	return append([]string(nil), pf.requests...)
}

// addPool stores p with its capacity computed.
func (pf *poolFake) addPool(p apitypes.Pool) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	pf.pools[p.Name] = withCapacity(p)
}

func withCapacity(p apitypes.Pool) apitypes.Pool {
	var c apitypes.PoolCapacity
	var mem domain.ByteSize
	for _, n := range p.Nodes {
		c.GPUs += len(n.GPUs)
		c.CPUs += n.CPUs
		b, _ := domain.ParseByteSize(n.Memory)
		mem += b
	}
	c.Memory = mem.String()
	p.Capacity = c
	if p.CreatedAt.IsZero() {
		p.CreatedAt = testNow.Add(-48 * 3600e9)
	}
	p.UpdatedAt = p.CreatedAt
	return p
}

func (pf *poolFake) readPut(w http.ResponseWriter, r *http.Request, v any) bool {
	var raw json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&raw); err != nil {
		fail(w, http.StatusBadRequest, "invalid_request", err.Error())
		return false
	}
	pf.puts = append(pf.puts, string(raw))
	if err := json.Unmarshal(raw, v); err != nil {
		fail(w, http.StatusBadRequest, "invalid_request", err.Error())
		return false
	}
	return true
}

func (pf *poolFake) listPools(w http.ResponseWriter, r *http.Request) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	out := apitypes.PoolList{Pools: []apitypes.Pool{}}
	for _, p := range pf.pools {
		out.Pools = append(out.Pools, p)
	}
	sort.Slice(out.Pools, func(i, j int) bool { return out.Pools[i].Name < out.Pools[j].Name })
	reply(w, http.StatusOK, out)
}

func (pf *poolFake) getPool(w http.ResponseWriter, r *http.Request) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	p, ok := pf.pools[r.PathValue("name")]
	if !ok {
		fail(w, http.StatusNotFound, "not_found", `pool "`+r.PathValue("name")+`" does not exist; list pools with: trainyard pool ls`)
		return
	}
	reply(w, http.StatusOK, p)
}

func (pf *poolFake) putPool(w http.ResponseWriter, r *http.Request) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	var p apitypes.Pool
	if !pf.readPut(w, r, &p) {
		return
	}
	for i, n := range p.Nodes {
		if n.CPUs <= 0 {
			fail(w, http.StatusBadRequest, "invalid_request", "the request is invalid",
				apitypes.FieldError{Path: fmt.Sprintf("nodes[%d].cpus", i), Message: "must be more than 0"})
			return
		}
	}
	status := http.StatusCreated
	p.CreatedAt = testNow
	if old, ok := pf.pools[p.Name]; ok {
		status, p.CreatedAt = http.StatusOK, old.CreatedAt
	}
	p = withCapacity(p)
	pf.pools[p.Name] = p
	reply(w, status, p)
}

func (pf *poolFake) listQuotas(w http.ResponseWriter, r *http.Request) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	project, pool := r.URL.Query().Get("project"), r.URL.Query().Get("pool")
	out := apitypes.QuotaList{Quotas: []apitypes.Quota{}}
	for _, q := range pf.quotas {
		if (project == "" || q.Project == project) && (pool == "" || q.Pool == pool) {
			out.Quotas = append(out.Quotas, q)
		}
	}
	sort.Slice(out.Quotas, func(i, j int) bool {
		a, b := out.Quotas[i], out.Quotas[j]
		return a.Project < b.Project || a.Project == b.Project && a.Pool < b.Pool
	})
	reply(w, http.StatusOK, out)
}

func (pf *poolFake) putQuota(w http.ResponseWriter, r *http.Request) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	var q apitypes.Quota
	if !pf.readPut(w, r, &q) {
		return
	}
	q.Project, q.Pool = r.PathValue("project"), r.PathValue("pool")
	if _, ok := pf.pools[q.Pool]; !ok {
		fail(w, http.StatusNotFound, "not_found", `pool "`+q.Pool+`" does not exist; list pools with: trainyard pool ls`)
		return
	}
	q.UpdatedAt = testNow
	pf.quotas[q.Project+"/"+q.Pool] = q
	reply(w, http.StatusOK, q)
}

func (pf *poolFake) deleteQuota(w http.ResponseWriter, r *http.Request) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	key := r.PathValue("project") + "/" + r.PathValue("pool")
	if _, ok := pf.quotas[key]; !ok {
		fail(w, http.StatusNotFound, "not_found", `project "`+r.PathValue("project")+`" has no quota in pool "`+r.PathValue("pool")+`"; list quotas with: trainyard quota ls`)
		return
	}
	delete(pf.quotas, key)
	w.WriteHeader(http.StatusNoContent)
}

func (pf *poolFake) listProjects(w http.ResponseWriter, r *http.Request) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	out := apitypes.ProjectList{Projects: []apitypes.Project{}}
	for _, p := range pf.projects {
		out.Projects = append(out.Projects, p)
	}
	sort.Slice(out.Projects, func(i, j int) bool { return out.Projects[i].Name < out.Projects[j].Name })
	reply(w, http.StatusOK, out)
}

func (pf *poolFake) putProject(w http.ResponseWriter, r *http.Request) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	var p apitypes.Project
	if !pf.readPut(w, r, &p) {
		return
	}
	if p.Shares <= 0 || p.Shares > 1000 {
		fail(w, http.StatusBadRequest, "invalid_request", "the request is invalid",
			apitypes.FieldError{Path: "shares", Message: "must be more than 0 and at most 1000"})
		return
	}
	p.Name = r.PathValue("name")
	p.CreatedAt = testNow.Add(-3600e9)
	pf.projects[p.Name] = p
	reply(w, http.StatusOK, p)
}

func (pf *poolFake) getQueue(w http.ResponseWriter, r *http.Request) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	pool := r.URL.Query().Get("pool")
	out := apitypes.Queue{Entries: []apitypes.QueueEntry{}}
	for _, e := range pf.queue {
		if pool == "" || strings.EqualFold(e.Pool, pool) {
			out.Entries = append(out.Entries, e)
		}
	}
	reply(w, http.StatusOK, out)
}
