package api_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"trainyard/internal/api"
	"trainyard/internal/api/apitypes"
	"trainyard/internal/service"
	"trainyard/internal/store/sqlite"
)

type notifyTargets struct{}

func (notifyTargets) Channels() []string { return []string{"team"} }
func (notifyTargets) Email() bool        { return true }

// The notify routes set, show and clear the caller's default; bad input
// is 400 with field paths, a missing default 404, another user's 403.
func TestNotifyRoutes(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	svc := service.New(service.Config{Store: st, Notify: notifyTargets{}})
	token, err := svc.Identity.Bootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler(api.Config{Service: svc, Ready: st.Ping}))
	t.Cleanup(func() { srv.Close(); st.Close() })
	e := &env{t: t, srv: srv, st: st, token: token}

	if code, b := e.do("GET", "/api/v1/notify", token, nil); code != 404 || !strings.Contains(string(b), "trainyard notify set") {
		t.Fatalf("GET before set: %d %s", code, b)
	}
	code, b := e.do("PUT", "/api/v1/notify", token, apitypes.NotifyPref{On: []string{"done"}, Channels: []string{"https://evil.example/x"}})
	if code != 400 {
		t.Fatalf("PUT bad: %d %s", code, b)
	}
	var paths []string
	for _, f := range decodeErr(t, b).Fields {
		paths = append(paths, f.Path)
	}
	if strings.Join(paths, " ") != "on[0] channels[0] channels[0]" {
		t.Fatalf("PUT bad: field paths %v in %s", paths, b)
	}
	code, b = e.do("PUT", "/api/v1/notify", token, apitypes.NotifyPref{On: []string{"failed"}, Channels: []string{"team"}, Email: []string{"ops@example.com"}})
	var p apitypes.NotifyPref
	if code != 200 || json.Unmarshal(b, &p) != nil || p.User != "admin" || p.Channels[0] != "team" || p.UpdatedAt.IsZero() {
		t.Fatalf("PUT: %d %s", code, b)
	}
	if code, b := e.do("GET", "/api/v1/notify?user=admin", token, nil); code != 200 || !strings.Contains(string(b), `"email":["ops@example.com"]`) {
		t.Fatalf("GET: %d %s", code, b)
	}
	if code, b := e.do("DELETE", "/api/v1/notify", token, nil); code != 204 {
		t.Fatalf("DELETE: %d %s", code, b)
	}
	if code, b := e.do("DELETE", "/api/v1/notify", token, nil); code != 404 {
		t.Fatalf("second DELETE: %d %s", code, b)
	}
	if code, _ := e.do("GET", "/api/v1/notify", "", nil); code != 401 {
		t.Fatalf("GET without a token: %d", code)
	}
}
