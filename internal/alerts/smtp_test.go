package alerts

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

var mailNow = func() time.Time { return time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC) }

func TestSMTPConfigValidate(t *testing.T) {
	c := Config{SMTP: &SMTPConfig{Host: "smtp.example.com", From: "Trainyard <ty@example.com>", Insecure: true, PasswordFile: "/run/pw"}}
	c.Defaults()
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate accepted a bad smtp section")
	}
	for _, want := range []string{"alerts.smtp.from:", "alerts.smtp.insecure:", "alerts.smtp.username:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors lack %q:\n%v", want, err)
		}
	}
	c = Config{SMTP: &SMTPConfig{Host: "localhost", From: "ty@example.com", Insecure: true}}
	c.Defaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("insecure to localhost: %v", err)
	}
	if c.SMTP.Port != DefaultSMTPPort || c.SMTP.Timeout.D() != DefaultSMTPTimeout {
		t.Fatalf("defaults: port %d timeout %s", c.SMTP.Port, c.SMTP.Timeout)
	}
}

func TestWebhookSendsJobEnd(t *testing.T) {
	for _, format := range []string{FormatJSON, FormatSlack} {
		r := newReceiver(t)
		w, err := NewWebhook(ChannelConfig{Name: "team", Type: TypeWebhook, URL: r.URL + "/hook", Format: format}, nil)
		if err != nil {
			t.Fatal(err)
		}
		e := JobEnd{Job: 7, Name: "bert", Project: "nlp", State: "succeeded", Attempts: 1, RunTime: 90 * time.Second,
			URL: "http://127.0.0.1:7070/jobs/7", EndedAt: mailNow()}
		if err := w.SendJobEnd(context.Background(), e); err != nil {
			t.Fatal(err)
		}
		req := r.next(t)
		if format == FormatSlack {
			var p SlackPayload
			if err := json.Unmarshal(req.body, &p); err != nil || !strings.HasPrefix(p.Text, ":white_check_mark: job 7 (bert) in project nlp succeeded after 1m30s") ||
				!strings.Contains(p.Text, e.URL) {
				t.Fatalf("slack body %s (%v)", req.body, err)
			}
			continue
		}
		var p map[string]any
		if err := json.Unmarshal(req.body, &p); err != nil {
			t.Fatal(err)
		}
		if p["kind"] != "job_end" || p["job"] != float64(7) || p["state"] != "succeeded" || p["url"] != e.URL ||
			p["run_seconds"] != float64(90) || p["project"] != "nlp" {
			t.Fatalf("json body %s", req.body)
		}
	}
}
