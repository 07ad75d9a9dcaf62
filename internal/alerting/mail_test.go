package alerting

import (
	"context"
	"io"
	"mime/quotedprintable"
	"strings"
	"testing"
	"time"

	"trainyard/internal/alerting/smtptest"
	"trainyard/internal/alerts"
	"trainyard/internal/domain"
)

var mailNow = func() time.Time { return time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC) }

func smtpConfig(srv *smtptest.Server) alerts.SMTPConfig {
	return alerts.SMTPConfig{Host: srv.Host, Port: srv.Port, From: "trainyard@example.com", Username: "relay", Timeout: domain.Duration(10 * time.Second)}
}

// body decodes the quoted-printable body of a received message.
func body(t *testing.T, data string) string {
	t.Helper()
	_, raw, ok := strings.Cut(data, "\n\n")
	if !ok {
		t.Fatalf("message has no body: %q", data)
	}
	b, err := io.ReadAll(quotedprintable.NewReader(strings.NewReader(raw)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMailerSendsOverSTARTTLSWithLogin(t *testing.T) {
	srv := smtptest.Start(t, smtptest.Options{User: "relay", Password: "s3cret-pw"})
	m, err := NewMailer(smtpConfig(srv), "s3cret-pw", srv.TLSConfig(), mailNow)
	if err != nil {
		t.Fatal(err)
	}
	e := alerts.JobEnd{Job: 42, Name: "resnet", Project: "vision", State: "failed", Reason: "ExitCode", Message: "exit code 1",
		Attempts: 2, RunTime: 62 * time.Minute, Cost: "1.20 USD", URL: "https://ty.example/jobs/42"}
	if err := m.Send(context.Background(), Mail{To: "alice@example.com", Subject: e.Subject(), Body: e.Text(), ID: "n7"}); err != nil {
		t.Fatal(err)
	}
	msgs := srv.Messages()
	if len(msgs) != 1 {
		t.Fatalf("received %d messages, want 1", len(msgs))
	}
	got := msgs[0]
	if !got.TLS || got.User != "relay" || got.From != "trainyard@example.com" || len(got.To) != 1 || got.To[0] != "alice@example.com" {
		t.Fatalf("session = TLS %v user %q from %q to %v; want TLS, relay, the sender and alice", got.TLS, got.User, got.From, got.To)
	}
	for _, h := range []string{"Subject: [trainyard] job 42 (resnet) failed\n", "To: alice@example.com\n",
		"Message-ID: <trainyard.n7@example.com>\n", "Date: Thu, 02 Jan 2025 03:04:05 +0000\n"} {
		if !strings.Contains(got.Data, h) {
			t.Errorf("message lacks header %q:\n%s", h, got.Data)
		}
	}
	b := body(t, got.Data)
	for _, want := range []string{"Reason:   ExitCode", "Message:  exit code 1", "Run time: 1h2m", "Cost:     1.20 USD", "https://ty.example/jobs/42"} {
		if !strings.Contains(b, want) {
			t.Errorf("body lacks %q:\n%s", want, b)
		}
	}
}

func TestMailerRequiresSTARTTLS(t *testing.T) {
	srv := smtptest.Start(t, smtptest.Options{NoTLS: true})
	cfg := smtpConfig(srv)
	cfg.Username = ""
	m, err := NewMailer(cfg, "", srv.TLSConfig(), mailNow)
	if err != nil {
		t.Fatal(err)
	}
	err = m.Send(context.Background(), Mail{To: "alice@example.com", Subject: "s", Body: "b"})
	if err == nil || !strings.Contains(err.Error(), "STARTTLS") {
		t.Fatalf("send to a relay without STARTTLS: %v, want an error naming STARTTLS", err)
	}
	if n := len(srv.Messages()); n != 0 {
		t.Fatalf("%d messages went out in clear text", n)
	}
	// insecure allows it, to a relay on this machine.
	cfg.Insecure = true
	m, err = NewMailer(cfg, "", nil, mailNow)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Send(context.Background(), Mail{To: "alice@example.com", Subject: "s", Body: "b"}); err != nil {
		t.Fatal(err)
	}
	if msgs := srv.Messages(); len(msgs) != 1 || msgs[0].TLS {
		t.Fatalf("insecure send: %+v, want one message without TLS", msgs)
	}
}

func TestMailerErrorsHideThePassword(t *testing.T) {
	srv := smtptest.Start(t, smtptest.Options{User: "relay", Password: "right-one"})
	m, err := NewMailer(smtpConfig(srv), "wrong-pa55word", srv.TLSConfig(), mailNow)
	if err != nil {
		t.Fatal(err)
	}
	err = m.Send(context.Background(), Mail{To: "alice@example.com", Subject: "s", Body: "b"})
	if err == nil || !strings.Contains(err.Error(), "login as relay") || strings.Contains(err.Error(), "wrong-pa55word") {
		t.Fatalf("bad login: %v; want a login error without the password", err)
	}
	if _, err := NewMailer(smtpConfig(srv), "", nil, mailNow); err == nil || !strings.Contains(err.Error(), alerts.SMTPPasswordEnv) {
		t.Fatalf("a username without a password: %v, want an error naming %s", err, alerts.SMTPPasswordEnv)
	}
}
