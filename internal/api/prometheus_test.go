package api

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
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

func TestMetricsRoute(t *testing.T) {
	cases := map[string]struct {
		token, auth string
		want        int
	}{
		"open without a token":      {want: 200},
		"token required and given":  {token: "s3cret", auth: "Bearer s3cret", want: 200},
		"token required, none sent": {token: "s3cret", want: 401},
		"token required, wrong one": {token: "s3cret", auth: "Bearer nope", want: 401},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			fm := &fakeMetrics{}
			h := Handler(Config{Metrics: fm, MetricsToken: tc.token})
			req := httptest.NewRequest("GET", "/metrics", nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Fatalf("status %d, want %d (%s)", rec.Code, tc.want, rec.Body)
			}
			if tc.want == 200 && rec.Body.String() != "trainyard_up 1\n" {
				t.Fatalf("body %q is not the exposition", rec.Body)
			}
			rec = httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/nowhere", nil))
			fm.mu.Lock()
			defer fm.mu.Unlock()
			wantCode := "OK"
			if tc.want == 401 {
				wantCode = "Unauthorized"
			}
			want := []string{"GET /metrics " + wantCode, "GET /healthz OK", " Not Found"}
			if len(fm.requests) != 3 || fm.requests[0] != want[0] || fm.requests[1] != want[1] || fm.requests[2] != want[2] {
				t.Fatalf("observed %q, want %q", fm.requests, want)
			}
		})
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
