package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"trainyard/internal/store/postgres"
	"trainyard/internal/store/postgres/pgtest"
)

// With the network to a real PostgreSQL cut under the server, every API
// call answers 503 store_unavailable with Retry-After (a token the server
// has not seen yet too: the store cannot say whether it is valid), and
// /readyz agrees; once the network is back the same calls succeed and the
// job submitted before is intact.
func TestStoreOutageAnswers503(t *testing.T) {
	proxy, dsn := pgtest.NewProxy(t, pgtest.Schema(t))
	st, err := postgres.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvOn(t, st)
	code, job := e.submit("name: before\nentrypoint: [true]\n")
	if code != 201 {
		t.Fatalf("submit: %d", code)
	}

	proxy.Cut()
	calls := []struct{ method, path, token string }{
		{"GET", fmt.Sprintf("/api/v1/jobs/%d", job.ID), e.token},
		{"GET", "/api/v1/jobs", e.token},
		{"POST", "/api/v1/jobs", e.token},
		{"POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", job.ID), e.token},
		{"GET", "/api/v1/pools", e.token},
		{"GET", "/api/v1/jobs", "ty_never_seen_before_0123456789"},
	}
	for _, c := range calls {
		var body any
		if c.path == "/api/v1/jobs" && c.method == "POST" {
			body = map[string]any{"spec": "name: during\nentrypoint: [true]\n"}
		}
		req, _ := http.NewRequest(c.method, e.srv.URL+c.path, strings.NewReader(jsonText(t, body)))
		req.Header.Set("Authorization", "Bearer "+c.token)
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b := readAll(t, resp)
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("%s %s during the outage: %d %s, want 503", c.method, c.path, resp.StatusCode, b)
			continue
		}
		if ra := resp.Header.Get("Retry-After"); ra != "2" {
			t.Errorf("%s %s: Retry-After %q, want 2", c.method, c.path, ra)
		}
		if eb := decodeErr(t, []byte(b)); eb.Code != "store_unavailable" || !strings.Contains(eb.Message, "retry in a few seconds") {
			t.Errorf("%s %s: error %+v", c.method, c.path, eb)
		}
	}
	resp, err := http.Get(e.srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, resp); resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(b, "store_unavailable") {
		t.Errorf("readyz during the outage: %d %s", resp.StatusCode, b)
	}

	proxy.Restore()
	deadline := time.Now().Add(20 * time.Second)
	var got int
	for time.Now().Before(deadline) {
		if got, _ = e.do("GET", fmt.Sprintf("/api/v1/jobs/%d", job.ID), e.token, nil); got == 200 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got != 200 {
		t.Fatalf("after the outage: GET job answers %d", got)
	}
	if code, after := e.submit("name: after\nentrypoint: [true]\n"); code != 201 || after.ID <= job.ID {
		t.Errorf("submit after the outage: %d, job %d", code, after.ID)
	}
	if code, b := e.do("GET", "/api/v1/jobs", e.token, nil); code != 200 || !strings.Contains(string(b), `"before"`) {
		t.Errorf("list after the outage: %d %s", code, b)
	}
}

func jsonText(t *testing.T, v any) string {
	t.Helper()
	if v == nil {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
