package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
	"trainyard/internal/store/sqlite/sqlitetest"
)

// fakeMetrics records what the API tells it.
type fakeMetrics struct {
	mu       sync.Mutex
	requests []string
}

func (f *fakeMetrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.WriteString(w, "trainyard_up 1\n")
}

func (f *fakeMetrics) ObserveRequest(route string, code int, took time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, route+" "+http.StatusText(code))
}

func (f *fakeMetrics) JobSubmitted(project, pool string) {}

// metricsEnv is an API with /metrics in front of a real service, and
// API tokens for an admin, an auditor and a project member.
type metricsEnv struct {
	svc                    *service.Service
	st                     *sqlite.Store
	admin, auditor, member string
}

func newMetricsEnv(t *testing.T) *metricsEnv {
	t.Helper()
	st := sqlitetest.Open(t, t.TempDir())
	e := &metricsEnv{svc: service.New(service.Config{Store: st}), st: st}
	var err error
	if e.admin, err = e.svc.Identity.Bootstrap(context.Background()); err != nil {
		t.Fatal(err)
	}
	root := service.Principal{Subject: "admin", Role: domain.RoleAdmin}
	for name, b := range map[string]domain.RoleBinding{"audrey": {Role: domain.RoleAuditor}, "bob": {Role: domain.RoleMember, Project: "vision"}} {
		if _, err := e.svc.Identity.CreateUser(context.Background(), root, name); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.Identity.GrantRole(context.Background(), root, name, b); err != nil {
			t.Fatal(err)
		}
		secret, _, err := e.svc.Identity.CreateToken(context.Background(), root, service.TokenInput{User: name})
		if err != nil {
			t.Fatal(err)
		}
		if name == "audrey" {
			e.auditor = secret
		} else {
			e.member = secret
		}
	}
	return e
}

// scrape GETs /metrics from addr with token ("" for none).
func scrape(h http.Handler, addr, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.RemoteAddr = addr
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

const (
	local  = "127.0.0.1:40000"
	local6 = "[::1]:40000"
	remote = "192.0.2.7:40000"
)

func TestMetricsAuth(t *testing.T) {
	e := newMetricsEnv(t)
	type probe struct {
		addr, token string
		want        int
	}
	cases := map[string]struct {
		auth         MetricsAuth
		metricsToken string
		probes       map[string]probe
	}{
		"loopback (the default)": {
			probes: map[string]probe{
				"local, no token":         {local, "", 200},
				"local IPv6, no token":    {local6, "", 200},
				"remote, no token":        {remote, "", 401},
				"remote, unknown token":   {remote, "ty_nope", 401},
				"remote, admin token":     {remote, e.admin, 200},
				"remote, auditor token":   {remote, e.auditor, 200},
				"remote, member token":    {remote, e.member, 403},
				"remote, a metrics token": {remote, "scrape-secret", 401}, // none configured
			},
		},
		"loopback with a metrics token": {
			auth: MetricsAuthLoopback, metricsToken: "scrape-secret",
			probes: map[string]probe{
				"local, no token":       {local, "", 200},
				"remote, metrics token": {remote, "scrape-secret", 200},
				"remote, wrong token":   {remote, "scrape-secreT", 401},
				"remote, auditor token": {remote, e.auditor, 200},
			},
		},
		"metrics_token alone requires it everywhere, as before": {
			metricsToken: "scrape-secret",
			probes: map[string]probe{
				"local, no token":       {local, "", 401},
				"local, metrics token":  {local, "scrape-secret", 200},
				"remote, metrics token": {remote, "scrape-secret", 200},
				"remote, admin token":   {remote, e.admin, 200},
			},
		},
		"token": {
			auth: MetricsAuthToken,
			probes: map[string]probe{
				"local, no token":      {local, "", 401},
				"local, admin token":   {local, e.admin, 200},
				"remote, member token": {remote, e.member, 403},
			},
		},
		"none": {
			auth: MetricsAuthNone,
			probes: map[string]probe{
				"remote, no token":    {remote, "", 200},
				"remote, wrong token": {remote, "ty_nope", 200},
			},
		},
	}
	for name, tc := range cases {
		for pname, p := range tc.probes {
			t.Run(name+"/"+pname, func(t *testing.T) {
				h := Handler(Config{Service: e.svc, Metrics: &fakeMetrics{}, MetricsAuth: tc.auth, MetricsToken: tc.metricsToken})
				rec := scrape(h, p.addr, p.token)
				if rec.Code != p.want {
					t.Fatalf("status %d, want %d (%s)", rec.Code, p.want, rec.Body)
				}
				switch p.want {
				case 200:
					if rec.Body.String() != "trainyard_up 1\n" {
						t.Fatalf("body %q is not the exposition", rec.Body)
					}
				case 401:
					if !strings.Contains(rec.Body.String(), "GET /metrics needs a token") || !strings.Contains(rec.Body.String(), "metrics_token") ||
						rec.Header().Get("WWW-Authenticate") == "" {
						t.Fatalf("401 body %s does not say which token to send", rec.Body)
					}
				case 403:
					if !strings.Contains(rec.Body.String(), "needs role admin or auditor") {
						t.Fatalf("403 body %s does not say which role is needed", rec.Body)
					}
				}
				if p.token != "" && strings.Contains(rec.Body.String(), p.token) {
					t.Fatalf("the answer repeats the token: %s", rec.Body)
				}
			})
		}
	}
}

// A failed token on /metrics is audited and spends the same per-address
// budget as failed logins on the API: past it, /metrics and the API both
// refuse the address, the right metrics token included.
func TestMetricsFailuresAuditedAndLimited(t *testing.T) {
	e := newMetricsEnv(t)
	h := Handler(Config{Service: e.svc, Metrics: &fakeMetrics{}, MetricsToken: "scrape-secret"})
	const addr = "198.51.100.4:5555"
	if rec := scrape(h, addr, "ty_guess_0"); rec.Code != 401 {
		t.Fatalf("wrong token: %d %s", rec.Code, rec.Body)
	}
	recs, err := e.st.ListAudit(context.Background(), store.AuditFilter{Action: "auth.failed"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Client != "198.51.100.4" || recs[0].Result != domain.AuditFailed {
		t.Fatalf("audit records of the failed token: %+v; want one auth.failed from 198.51.100.4", recs)
	}
	if strings.Contains(recs[0].Detail, "ty_guess_0") {
		t.Fatalf("the audit record holds the token: %+v", recs[0])
	}
	if scrape(h, "198.51.100.5:1", e.member).Code != 403 {
		t.Fatal("member token was not refused")
	}
	denied, err := e.st.ListAudit(context.Background(), store.AuditFilter{Action: "audit.read", Target: "route/GET /metrics"})
	if err != nil || len(denied) != 1 || denied[0].Actor != "user:bob" || denied[0].Result != domain.AuditDenied {
		t.Fatalf("denial of the member: %+v, %v; want one audit.read on route/GET /metrics, denied", denied, err)
	}

	limited := 0
	for i := 1; i < 30 && limited == 0; i++ {
		if rec := scrape(h, addr, fmt.Sprintf("ty_guess_%d", i)); rec.Code == http.StatusTooManyRequests {
			limited = i
			if rec.Header().Get("Retry-After") == "" {
				t.Fatal("429 without Retry-After")
			}
		}
	}
	if limited == 0 {
		t.Fatal("30 wrong tokens on /metrics were never limited")
	}
	// Valid tokens are never refused for others' failures: a job on the
	// same address must not lock out users or scrapers.
	if rec := scrape(h, addr, "scrape-secret"); rec.Code != 200 {
		t.Errorf("the metrics token from a limited address: %d, want 200", rec.Code)
	}
	if rec := scrape(h, addr, "ty_guess_99"); rec.Code != http.StatusTooManyRequests {
		t.Errorf("another wrong token from the limited address: %d, want 429", rec.Code)
	}
	req := httptest.NewRequest("GET", "/api/v1/version", nil)
	req.RemoteAddr = addr
	req.Header.Set("Authorization", "Bearer "+e.admin)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Errorf("a valid token on the API from an address limited on /metrics: %d, want 200", rec.Code)
	}
	if rec := scrape(h, "198.51.100.9:1", "scrape-secret"); rec.Code != 200 {
		t.Errorf("another address: %d, want 200", rec.Code)
	}
}

func TestMetricsRouteObserved(t *testing.T) {
	fm := &fakeMetrics{}
	h := Handler(Config{Metrics: fm, MetricsAuth: MetricsAuthNone})
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/metrics", nil))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/healthz", nil))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/nowhere", nil))
	fm.mu.Lock()
	defer fm.mu.Unlock()
	want := []string{"GET /metrics OK", "GET /healthz OK", " Not Found"}
	if len(fm.requests) != 3 || fm.requests[0] != want[0] || fm.requests[1] != want[1] || fm.requests[2] != want[2] {
		t.Fatalf("observed %q, want %q", fm.requests, want)
	}
}

// Without Metrics there is no /metrics route.
func TestNoMetricsRoute(t *testing.T) {
	rec := httptest.NewRecorder()
	Handler(Config{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("status %d, want 404", rec.Code)
	}
}
