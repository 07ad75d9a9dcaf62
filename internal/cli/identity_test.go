package cli

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"trainyard/internal/api"
	"trainyard/internal/api/apitypes"
	"trainyard/internal/service"
	"trainyard/internal/store/sqlite"
)

// newRealHarness runs the commands against a real server (API, service and
// SQLite store) with the bootstrap admin token.
func newRealHarness(t *testing.T) *harness {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	svc := service.New(service.Config{Store: st})
	token, err := svc.Identity.Bootstrap(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler(api.Config{Service: svc}))
	t.Cleanup(func() { srv.Close(); st.Close() })
	return &harness{t: t, srv: &fakeServer{t: t, srv: srv}, vars: map[string]string{
		EnvServer: srv.URL, EnvToken: token, "XDG_CONFIG_HOME": t.TempDir(), "NO_COLOR": "",
	}}
}

func TestIdentityCommands(t *testing.T) {
	h := newRealHarness(t)
	if r := h.mustRun(0, "user", "create", "researcher-a"); !strings.Contains(r.stdout, "created user researcher-a") {
		t.Errorf("user create: %+v", r)
	}
	if r := h.mustRun(0, "role", "grant", "researcher-a", "member", "--project", "vision"); r.stdout != "granted researcher-a: member@vision\n" {
		t.Errorf("role grant: %q", r.stdout)
	}
	if r := h.mustRun(0, "role", "grant", "researcher-a", "member", "--project", "vision"); !strings.Contains(r.stdout, "already holds") {
		t.Errorf("second role grant: %q", r.stdout)
	}
	h.mustRun(2, "role", "grant", "researcher-a", "member") // a project role needs --project
	r := h.mustRun(0, "user", "ls")
	if !strings.Contains(r.stdout, "researcher-a") || !strings.Contains(r.stdout, "member@vision") || !strings.Contains(r.stdout, "admin") {
		t.Errorf("user ls:\n%s", r.stdout)
	}
	r = h.mustRun(0, "token", "create", "--user", "researcher-a", "--expires", "30d", "--name", "laptop", "-o", "json")
	var tok apitypes.Token
	if err := json.Unmarshal([]byte(r.stdout), &tok); err != nil || !strings.HasPrefix(tok.Token, "ty_") || tok.User != "researcher-a" || tok.ExpiresAt == nil {
		t.Fatalf("token create -o json: %q (%v)", r.stdout, err)
	}
	h.mustRun(2, "token", "create", "--expires", "soon")

	// login reads the token from stdin, checks it, and writes the config.
	h.vars[EnvToken] = ""
	h.stdin = tok.Token + "\n"
	r = h.mustRun(0, "login", "--server", h.vars[EnvServer])
	if !strings.Contains(r.stdout, "researcher-a") || !strings.Contains(r.stdout, "member@vision") {
		t.Errorf("login: %+v", r)
	}
	h.stdin = ""
	b, err := os.ReadFile(filepath.Join(h.vars["XDG_CONFIG_HOME"], "trainyard", "config.yaml"))
	if err != nil || !strings.Contains(string(b), tok.Token) {
		t.Fatalf("config after login: %q %v", b, err)
	}
	// Now the config file's token is used.
	h.vars[EnvServer] = ""
	r = h.mustRun(0, "whoami")
	if !strings.Contains(r.stdout, "user:    researcher-a") {
		t.Errorf("whoami: %q", r.stdout)
	}
	r = h.mustRun(0, "token", "ls")
	if !strings.Contains(r.stdout, "laptop") || !strings.Contains(r.stdout, "active") {
		t.Errorf("token ls:\n%s", r.stdout)
	}
	h.mustRun(ExitPermission, "user", "create", "someone") // a member may not
	r = h.mustRun(0, "token", "revoke", strconv.FormatInt(tok.ID, 10))
	if !strings.Contains(r.stdout, "revoked token") {
		t.Errorf("token revoke: %q", r.stdout)
	}
	if r := h.mustRun(ExitPermission, "whoami"); !strings.Contains(r.stderr, "revoked") {
		t.Errorf("whoami after revoking: %+v", r)
	}
}
