package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/alerting/smtptest"
)

// endReceiver is a webhook receiver that records job-end bodies.
type endReceiver struct {
	mu  sync.Mutex
	got []map[string]any
}

func (rc *endReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	rc.got = append(rc.got, m)
	rc.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// jobs returns the job ids of the bodies received, in order.
func (rc *endReceiver) jobs() []int64 {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var ids []int64
	for _, m := range rc.got {
		if f, ok := m["job"].(float64); ok && m["kind"] == "job_end" {
			ids = append(ids, int64(f))
		}
	}
	return ids
}

// Job ends reach a webhook and an SMTP relay (STARTTLS, AUTH PLAIN) once
// each, as the job's notify section or its submitter's default asks; a
// restart sends nothing again.
func TestJobEndNotificationsArriveOnce(t *testing.T) {
	rc := &endReceiver{}
	hook := httptest.NewServer(rc)
	defer hook.Close()
	relay := smtptest.Start(t, smtptest.Options{User: "relay", Password: "relay-pw"})
	dir := t.TempDir()
	ca, pw := filepath.Join(dir, "relay-ca.pem"), filepath.Join(dir, "smtp-password")
	if err := os.WriteFile(ca, relay.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pw, []byte("relay-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, serverOpts{extra: fmt.Sprintf(`public_url: https://ty.example
alerts:
  channels:
    - {name: team, type: webhook, url: %q}
  smtp: {host: 127.0.0.1, port: %d, from: trainyard@example.com, username: relay, password_file: %q, ca_file: %q}
`, hook.URL+"/hook", relay.Port, pw, ca)})

	// A channel the server lacks is refused at submit, naming the ones it has.
	b, _ := json.Marshal("name: typo\nentrypoint: [\"true\"]\nnotify: {channels: [nope]}\n")
	if code, body := s.rawAPI("POST", "/api/v1/jobs", map[string]any{"spec": json.RawMessage(b)}); code != 400 ||
		!strings.Contains(body, "notify.channels[0]") || !strings.Contains(body, "configured channels: team") {
		t.Fatalf("submit naming an unknown channel: %d %s", code, body)
	}
	s.mustCLI("notify", "set", "--on", "failed", "--email", "admin@example.com")

	a := s.submit("name: told\nentrypoint: [\"true\"]\nnotify: {channels: [team], email: [a@example.com]}\n")
	bad := s.submit("name: broken\nentrypoint: [sh, -c, \"exit 3\"]\n")
	fine := s.submit("name: fine\nentrypoint: [\"true\"]\n")
	for _, j := range []int64{a.ID, bad.ID, fine.ID} {
		s.waitState(j, 60*time.Second, "succeeded", "failed", "canceled")
	}
	waitFor(t, 30*time.Second, "the webhook and two e-mails", func() bool {
		return len(rc.jobs()) >= 1 && len(relay.Messages()) >= 2
	})

	// After a restart, one more job end arrives, and nothing before it again.
	s.kill9()
	s.start()
	last := s.submit("name: last\nentrypoint: [\"true\"]\nnotify: {channels: [team]}\n")
	s.waitState(last.ID, 60*time.Second, "succeeded")
	waitFor(t, 30*time.Second, "the last job's webhook", func() bool { return slices.Contains(rc.jobs(), last.ID) })

	if got := rc.jobs(); !slices.Equal(got, []int64{a.ID, last.ID}) {
		t.Fatalf("webhook got job ends %v, want %v", got, []int64{a.ID, last.ID})
	}
	rc.mu.Lock()
	first := rc.got[0]
	rc.mu.Unlock()
	if first["state"] != "succeeded" || first["url"] != fmt.Sprintf("https://ty.example/jobs/%d", a.ID) || first["job_name"] != "told" {
		t.Fatalf("webhook body = %v", first)
	}
	var to []string
	for _, m := range relay.Messages() {
		if !m.TLS || m.User != "relay" {
			t.Errorf("mail to %v: TLS %v, user %q; want STARTTLS and a login", m.To, m.TLS, m.User)
		}
		to = append(to, m.To...)
		if slices.Contains(m.To, "admin@example.com") && !strings.Contains(m.Data, fmt.Sprintf("job %d (broken) failed", bad.ID)) {
			t.Errorf("mail to admin is not about job %d failing:\n%s", bad.ID, m.Data)
		}
	}
	slices.Sort(to)
	if !slices.Equal(to, []string{"a@example.com", "admin@example.com"}) {
		t.Fatalf("mails went to %v, want a@example.com and admin@example.com once each", to)
	}
}
