package cli

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// unavailableServer answers the first fail requests with 503
// store_unavailable and Retry-After: 0, then a job.
type unavailableServer struct {
	mu    sync.Mutex
	fail  int
	calls []string
}

func (u *unavailableServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.calls = append(u.calls, r.Method+" "+r.URL.Path)
	n := len(u.calls)
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if n <= u.fail {
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error": {"code": "store_unavailable", "message": "the store is unavailable: the server cannot reach its database; retry in a few seconds, and if this persists, an operator should check the database"}}`)
		return
	}
	io.WriteString(w, `{"id": 7, "name": "a", "project": "default", "pool": "default", "state": "queued"}`)
}

func (u *unavailableServer) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.calls...)
}

func retryHarness(t *testing.T, u *unavailableServer, retryFor string) *harness {
	srv := httptest.NewServer(u)
	t.Cleanup(srv.Close)
	h := newHarness(t)
	h.vars[EnvServer] = srv.URL
	h.vars[EnvRetryFor] = retryFor
	return h
}

// A read the server answers 503 twice completes on the third try, with one
// line on stderr per wait.
func TestCLIRetriesAReadOn503(t *testing.T) {
	u := &unavailableServer{fail: 2}
	h := retryHarness(t, u, "10s")
	r := h.mustRun(0, "show", "7", "-o", "json")
	if !strings.Contains(r.stdout, `"id": 7`) {
		t.Errorf("stdout: %s", r.stdout)
	}
	if want := "store unavailable (503); retrying in 500ms…\nstore unavailable (503); retrying in 1s…\n"; r.stderr != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", r.stderr, want)
	}
	if got := u.seen(); len(got) != 3 || got[2] != "GET /api/v1/jobs/7" {
		t.Errorf("requests: %v", got)
	}
}

// A call that is not idempotent is sent once and its 503 reported.
func TestCLIDoesNotRetryCancel(t *testing.T) {
	u := &unavailableServer{fail: 100}
	h := retryHarness(t, u, "10s")
	r := h.mustRun(ExitUnavailable, "cancel", "7")
	if got := u.seen(); len(got) != 1 {
		t.Errorf("requests: %v, want one", got)
	}
	if strings.Contains(r.stderr, "retrying") || !strings.HasPrefix(r.stderr, "error: the store is unavailable") {
		t.Errorf("stderr: %s", r.stderr)
	}
}

// When the retry time runs out the command fails with exit 5, saying how
// long it tried and what the server said.
func TestCLIGivesUpAfterTheRetryTime(t *testing.T) {
	u := &unavailableServer{fail: 1000}
	h := retryHarness(t, u, "1s")
	r := h.mustRun(ExitUnavailable, "ls")
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	last := lines[len(lines)-1]
	if !regexp.MustCompile(`^error: still unavailable after retrying for 1s \(\d+ tries\): the store is unavailable: .* an operator should check the database$`).MatchString(last) {
		t.Errorf("last line: %q", last)
	}
	// At least one retry before the end; how many fit in 1 s depends on the load.
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "store unavailable (503); retrying in ") {
		t.Errorf("stderr:\n%s", r.stderr)
	}

	h.vars[EnvRetryFor] = "0"
	r = h.mustRun(ExitUnavailable, "ls")
	if strings.Contains(r.stderr, "retrying") || !strings.HasPrefix(r.stderr, "error: the store is unavailable") {
		t.Errorf("with %s=0: %s", EnvRetryFor, r.stderr)
	}

	h.vars[EnvRetryFor] = "soon"
	r = h.mustRun(ExitUsage, "ls")
	if !strings.Contains(r.stderr, EnvRetryFor+`="soon" is not a duration`) {
		t.Errorf("a bad %s: %s", EnvRetryFor, r.stderr)
	}
}
