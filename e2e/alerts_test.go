package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// receiver is a real local HTTP webhook receiver that records what it gets.
type receiver struct {
	mu   sync.Mutex
	got  []map[string]any
	path string
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var m map[string]any
	if r.URL.Path != rc.path || json.Unmarshal(b, &m) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	rc.got = append(rc.got, m)
	rc.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// count returns how many notifications with this status (and key, when not
// empty) arrived.
func (rc *receiver) count(status, key string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := 0
	for _, m := range rc.got {
		if m["status"] == status && (key == "" || m["key"] == key) {
			n++
		}
	}
	return n
}

// A stalled attempt raises an alert that reaches a webhook once firing and,
// once the retry runs, once resolved; alerts test reaches the same webhook.
func TestAlertsReachAWebhookOnceEach(t *testing.T) {
	rc := &receiver{path: "/hooks/s3cr3t-token"}
	hook := httptest.NewServer(rc)
	defer hook.Close()
	s := startServer(t, serverOpts{extra: fmt.Sprintf(`alerts:
  interval: 200ms
  channels:
    - {name: hook, type: webhook, url: %q}
    - {name: log, type: log}
`, hook.URL+rc.path)})

	// Attempt 1 reports progress, then hangs (the stall check stops it);
	// attempt 2 reports and ends well.
	job := s.submit(fmt.Sprintf("name: flaky\nentrypoint: [python3, -c, %q]\nhealth: {stall: 2s}\npolicy: {retries: 1, reentrant: true}\n", `import os, time
print('trainyard: {"step": 1, "loss": 1.0}', flush=True)
if os.environ["TRAINYARD_ATTEMPT"] == "1":
    time.sleep(60)
`))
	if j := s.waitState(job.ID, 60*time.Second, "succeeded", "failed", "canceled"); j.State != "succeeded" {
		t.Fatalf("job %d ended %s (%s) %s; want succeeded on its retry", job.ID, j.State, j.Reason, j.Message)
	}
	key := fmt.Sprintf("stalled/job=%d", job.ID)
	deadline := time.Now().Add(30 * time.Second)
	for rc.count("resolved", key) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the receiver got no resolution of %s; it got %d firing", key, rc.count("firing", key))
		}
		time.Sleep(50 * time.Millisecond) // polling the receiver, not waiting for state
	}
	// More evaluations run while another job goes through: nothing repeats.
	other := s.submit("name: quick\nentrypoint: [\"true\"]\n")
	s.waitState(other.ID, 30*time.Second, "succeeded")
	var list struct {
		Alerts []struct {
			ID                     int64
			Key, State, Resolution string
		}
	}
	s.api("GET", fmt.Sprintf("/api/v1/alerts?job=%d", job.ID), nil, &list)
	if len(list.Alerts) != 1 || list.Alerts[0].State != "resolved" || list.Alerts[0].Key != key {
		t.Fatalf("GET /api/v1/alerts?job=%d = %+v; want one resolved %s", job.ID, list.Alerts, key)
	}
	if f, r := rc.count("firing", key), rc.count("resolved", key); f != 1 || r != 1 {
		t.Errorf("the receiver got %s %d time(s) firing and %d time(s) resolved; want once each", key, f, r)
	}
	out := s.mustCLI("alerts", "ls", "--job", fmt.Sprint(job.ID))
	if !strings.Contains(out, "stalled") || !strings.Contains(out, "resolved") {
		t.Errorf("alerts ls:\n%s\nwant the resolved stalled alert", out)
	}

	if out := s.mustCLI("alerts", "test", "hook"); !strings.Contains(out, "accepted") {
		t.Errorf("alerts test hook: %q", out)
	}
	if rc.count("test", "") != 1 {
		t.Errorf("the receiver got %d test notifications, want 1", rc.count("test", ""))
	}
	_, errOut, code := s.cli("alerts", "test", "nope")
	if code == 0 || !strings.Contains(errOut, "hook") {
		t.Errorf("alerts test nope: exit %d, stderr %q; want an error listing the channels", code, errOut)
	}
	hook.Close()
	_, errOut, code = s.cli("alerts", "test", "hook")
	if code == 0 || strings.Contains(errOut, "s3cr3t") {
		t.Errorf("alerts test to a closed receiver: exit %d, stderr %q; want an error without the URL's token", code, errOut)
	}
	if strings.Contains(s.stderrText(), "s3cr3t") {
		t.Errorf("the server log shows the webhook URL's token")
	}
}
