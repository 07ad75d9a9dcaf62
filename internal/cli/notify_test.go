package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

// notifyFake stands in for /api/v1/notify: one stored default per user
// (the caller is alice), and the requests it got.
type notifyFake struct {
	mu    sync.Mutex
	prefs map[string]apitypes.NotifyPref
	reqs  []string // "METHOD user body"
}

func newNotifyHarness(t *testing.T) (*harness, *notifyFake) {
	t.Helper()
	nf := &notifyFake{prefs: map[string]apitypes.NotifyPref{}}
	user := func(r *http.Request) string {
		if u := r.URL.Query().Get("user"); u != "" {
			return u
		}
		return "alice"
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/notify", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		nf.mu.Lock()
		defer nf.mu.Unlock()
		u := user(r)
		nf.reqs = append(nf.reqs, strings.TrimSpace(r.Method+" "+u+" "+string(body)))
		switch r.Method {
		case http.MethodGet:
			p, ok := nf.prefs[u]
			if !ok {
				fail(w, http.StatusNotFound, "not_found", u+" has no default notification; set one with: trainyard notify set --on failed --email ADDRESS")
				return
			}
			reply(w, http.StatusOK, p)
		case http.MethodPut:
			var p apitypes.NotifyPref
			if err := json.Unmarshal(body, &p); err != nil {
				fail(w, http.StatusBadRequest, "invalid_request", err.Error())
				return
			}
			p.User, p.UpdatedAt = u, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			nf.prefs[u] = p
			reply(w, http.StatusOK, p)
		case http.MethodDelete:
			delete(nf.prefs, u)
			w.WriteHeader(http.StatusNoContent)
		}
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			fail(w, http.StatusUnauthorized, "unauthorized", "invalid or missing token")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return &harness{t: t, srv: &fakeServer{t: t, srv: srv}, vars: map[string]string{
		EnvServer: srv.URL, EnvToken: testToken, "XDG_CONFIG_HOME": t.TempDir(), "NO_COLOR": "",
	}}, nf
}

func TestNotifySetShowClear(t *testing.T) {
	h, nf := newNotifyHarness(t)
	if r := h.run("notify", "set", "--on", "failed"); r.code != 2 || !strings.Contains(r.stderr, "--channel or --email") {
		t.Fatalf("set without a target: exit %d, stderr %q; want a usage error", r.code, r.stderr)
	}
	r := h.mustRun(0, "notify", "set", "--on", "failed,canceled", "--email", "me@example.com", "--channel", "team-slack")
	want := "user:      alice\non:        failed, canceled\nchannels:  team-slack\nemail:     me@example.com\nupdated:   2026-03-01 12:00:00 UTC\n"
	if r.stdout != want {
		t.Errorf("set stdout = %q, want %q", r.stdout, want)
	}
	if r := h.mustRun(0, "notify", "show"); r.stdout != want {
		t.Errorf("show stdout = %q, want %q", r.stdout, want)
	}
	r = h.mustRun(0, "notify", "show", "-o", "json")
	var p apitypes.NotifyPref
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil || p.User != "alice" || len(p.Email) != 1 {
		t.Errorf("show -o json = %s (%v)", r.stdout, err)
	}
	if r := h.mustRun(0, "notify", "clear", "--user", "bob"); r.stderr != "cleared bob's default notification\n" {
		t.Errorf("clear --user bob stderr = %q", r.stderr)
	}
	h.mustRun(0, "notify", "clear")
	if r := h.run("notify", "show"); r.code == 0 || !strings.Contains(r.stderr, "trainyard notify set") {
		t.Errorf("show after clear: exit %d, stderr %q", r.code, r.stderr)
	}
	nf.mu.Lock()
	defer nf.mu.Unlock()
	if got := nf.reqs[0]; got != `PUT alice {"user":"","on":["failed","canceled"],"channels":["team-slack"],"email":["me@example.com"],"updated_at":"0001-01-01T00:00:00Z"}` {
		t.Errorf("PUT body = %s", got)
	}
}
