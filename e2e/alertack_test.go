package e2e

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A start failure (a program that does not exist) fires an alert that the
// job's owner acknowledges: it is listed as acknowledged, the
// acknowledgement is audited, a second one is refused, and re-running the
// job resolves the alert instead of leaving it firing for 24 h.
func TestStartFailureAlertIsAcknowledgedAndResolvedByRerun(t *testing.T) {
	rc := &receiver{path: "/hooks/ack"}
	hook := httptest.NewServer(rc)
	defer hook.Close()
	s := startServer(t, serverOpts{extra: fmt.Sprintf(`alerts:
  interval: 200ms
  channels:
    - {name: hook, type: webhook, url: %q}
`, hook.URL+rc.path)})
	job := s.submit("name: typo\nentrypoint: [no-such-trainer-binary]\n")
	if j := s.waitState(job.ID, 30*time.Second, "succeeded", "failed", "canceled"); j.State != "failed" {
		t.Fatalf("job %d ended %s (%s); want failed", job.ID, j.State, j.Reason)
	}
	key := fmt.Sprintf("start_failure/job=%d", job.ID)
	type alert struct {
		ID                     int64
		Key, State, Resolution string
		AckedBy                string `json:"acked_by"`
		AckReason              string `json:"ack_reason"`
	}
	var list struct{ Alerts []alert }
	waitFor(t, 30*time.Second, "the start_failure alert", func() bool {
		list.Alerts = nil
		s.api("GET", fmt.Sprintf("/api/v1/alerts?job=%d", job.ID), nil, &list)
		return len(list.Alerts) == 1 && list.Alerts[0].Key == key
	})
	id := fmt.Sprint(list.Alerts[0].ID)
	if out := s.mustCLI("alerts", "ack", id, "--reason", "typo in the entrypoint"); !strings.Contains(out, "acknowledged alert "+id) {
		t.Errorf("alerts ack: %s", out)
	}
	var got struct{ Alerts []alert }
	s.api("GET", fmt.Sprintf("/api/v1/alerts?job=%d", job.ID), nil, &got)
	if len(got.Alerts) != 1 || got.Alerts[0].State != "firing" || got.Alerts[0].AckedBy == "" || got.Alerts[0].AckReason != "typo in the entrypoint" {
		t.Fatalf("after ack: %+v", got.Alerts)
	}
	if out := s.mustCLI("alerts", "ls", "--job", fmt.Sprint(job.ID)); !strings.Contains(out, "acknowledged") {
		t.Errorf("alerts ls does not show the acknowledgement:\n%s", out)
	}
	if _, errOut, code := s.cli("alerts", "ack", id); code == 0 || !strings.Contains(errOut, "already acknowledged") {
		t.Errorf("second ack: exit %d, stderr %q; want a refusal", code, errOut)
	}
	if out := s.mustCLI("audit", "ls", "--action", "alert.ack"); !strings.Contains(out, "alert/"+id) {
		t.Errorf("audit ls --action alert.ack:\n%s", out)
	}
	// The re-run resolves it.
	rerun := strings.TrimSpace(s.mustCLI("rerun", fmt.Sprint(job.ID)))
	waitFor(t, 30*time.Second, "the alert to resolve", func() bool {
		got.Alerts = nil
		s.api("GET", fmt.Sprintf("/api/v1/alerts?job=%d", job.ID), nil, &got)
		return len(got.Alerts) == 1 && got.Alerts[0].State == "resolved"
	})
	if r := got.Alerts[0].Resolution; !strings.Contains(r, "re-run as job") {
		t.Errorf("resolution %q (rerun printed %q); want it to name the re-run", r, rerun)
	}
	if n := rc.count("firing", key); n > 1 {
		t.Errorf("the webhook got %s firing %d times; want at most once", key, n)
	}
}
