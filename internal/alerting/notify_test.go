package alerting_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/alerting"
	"trainyard/internal/alerting/smtptest"
	"trainyard/internal/alerts"
	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// endHook is a webhook receiver that records job-end bodies.
type endHook struct {
	mu   sync.Mutex
	got  []alerts.JobEndPayload
	fail bool
}

func (h *endHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fail {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	b, _ := io.ReadAll(r.Body)
	var p alerts.JobEndPayload
	_ = json.Unmarshal(b, &p)
	h.got = append(h.got, p)
}

func (h *endHook) list() []alerts.JobEndPayload {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got)
}

// submit stores a queued job of submitter with notify.
func submit(t *testing.T, st store.Store, name, submitter string, notify *domain.Notify) domain.Job {
	t.Helper()
	spec := domain.Spec{Name: name, Project: "vision", Pool: "standard", Env: "host", Entrypoint: []string{"true"},
		Resources: domain.Resources{CPUs: 1, Memory: 1 << 30, Nodes: 1}, Notify: notify}
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	j, _, err := st.CreateJob(context.Background(), store.NewJob{Spec: spec, SpecJSON: b, SpecHash: "sha256:" + hex.EncodeToString(sum[:]),
		Submitter: submitter, SubmittedAt: time.Now(), Actor: "user:" + submitter,
		OutputDir: func(id int64) string { return fmt.Sprintf("/out/%d", id) }}, domain.AuditRecord{Actor: "user:" + submitter, Action: "job.submit", Result: domain.AuditOK})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// end moves a job through moves, each a second after the one before.
func end(t *testing.T, st store.Store, j domain.Job, at time.Time, reason domain.Reason, msg string, moves ...domain.Move) {
	t.Helper()
	for i, m := range moves {
		errs, err := st.Apply(context.Background(), []store.Change{{JobID: j.ID, Move: m, At: at.Add(time.Duration(i) * time.Second),
			Reason: reason, Message: msg, Actor: "system:test"}})
		if err != nil || errs[0] != nil {
			t.Fatalf("job %d %v: %v %v", j.ID, m, errs, err)
		}
	}
}

type notifyRig struct {
	st   store.Store
	hook *endHook
	smtp *smtptest.Server
	clk  *clock.Fake
	cfg  alerting.NotifierConfig
}

func newNotifyRig(t *testing.T) *notifyRig {
	t.Helper()
	r := &notifyRig{st: openStore(t), hook: &endHook{}, smtp: smtptest.Start(t, smtptest.Options{User: "relay", Password: "pw-123"}),
		clk: clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	srv := httptest.NewServer(r.hook)
	t.Cleanup(srv.Close)
	smtp := alerts.SMTPConfig{Host: r.smtp.Host, Port: r.smtp.Port, From: "trainyard@example.com", Username: "relay"}
	mailer, err := alerting.NewMailer(smtp, "pw-123", r.smtp.TLSConfig(), r.clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	r.cfg = alerting.NotifierConfig{Store: r.st, Mailer: mailer, PublicURL: "https://ty.example/", Clock: r.clk,
		Cost: func(context.Context, domain.Job) string { return "3.00 USD" },
		Alerts: alerts.Config{SMTP: &smtp, Channels: []alerts.ChannelConfig{{Name: "team", Type: alerts.TypeWebhook, URL: srv.URL}},
			Delivery: alerts.DeliveryConfig{MaxTries: 3, Backoff: domain.Duration(time.Minute), MaxBackoff: domain.Duration(time.Hour), MaxAge: domain.Duration(24 * time.Hour)}}}
	return r
}

func (r *notifyRig) notifier(t *testing.T) *alerting.Notifier {
	t.Helper()
	n, err := alerting.NewNotifier(r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// mailsTo returns the messages received for addr.
func (r *notifyRig) mailsTo(addr string) []smtptest.Message {
	var out []smtptest.Message
	for _, m := range r.smtp.Messages() {
		if slices.Contains(m.To, addr) {
			out = append(out, m)
		}
	}
	return out
}

// Each job end notifies once, on the webhook and by e-mail, as the job's
// notify section or else its submitter's default asks; a replayed end and
// a second notifier (a restart) send nothing more; a job without either
// notifies nobody.
func TestJobEndsNotifyOnce(t *testing.T) {
	ctx := context.Background()
	r := newNotifyRig(t)
	st := r.st
	if err := st.PutNotifyPref(ctx, domain.NotifyPref{User: "carol", UpdatedAt: r.clk.Now(),
		Notify: domain.Notify{On: []domain.JobState{domain.JobFailed}, Email: []string{"carol@example.com"}}}, domain.AuditRecord{Actor: "user:carol", Action: "notify.set", Result: domain.AuditOK}); err != nil {
		t.Fatal(err)
	}
	t0 := r.clk.Now()
	a := submit(t, st, "resnet", "alice", &domain.Notify{Channels: []string{"team"}, Email: []string{"alice@example.com"}})
	b := submit(t, st, "quiet", "bob", nil)
	c := submit(t, st, "fine", "carol", nil)
	d := submit(t, st, "broken", "carol", nil)
	e := submit(t, st, "only-fails", "alice", &domain.Notify{On: []domain.JobState{domain.JobFailed}, Channels: []string{"team"}})
	end(t, st, a, t0, "", "", domain.MoveStart(), domain.MoveRun(), domain.MoveSucceed())
	end(t, st, b, t0, domain.ReasonCanceledByUser, "by bob", domain.MoveCancel())
	end(t, st, c, t0, "", "", domain.MoveStart(), domain.MoveSucceed())
	end(t, st, d, t0, domain.ReasonExitCode, "exit code 3", domain.MoveStart(), domain.MoveFail())
	end(t, st, e, t0, "", "", domain.MoveStart(), domain.MoveSucceed())
	// The control loop records an end again (a retried transition): its
	// guard fails and no second end is recorded.
	if errs, err := st.Apply(ctx, []store.Change{{JobID: a.ID, Move: domain.MoveSucceed(), At: t0.Add(time.Minute)}}); err != nil || !errors.Is(errs[0], store.ErrConflict) {
		t.Fatalf("replayed end: %v %v, want a conflict", errs, err)
	}

	r.notifier(t).Pass(ctx)
	got := r.hook.list()
	if len(got) != 1 {
		t.Fatalf("webhook got %d job ends (%+v), want 1: job %d's", len(got), got, a.ID)
	}
	if p := got[0]; p.Kind != "job_end" || p.Job != a.ID || p.State != "succeeded" || p.Name != "resnet" || p.Project != "vision" ||
		p.URL != fmt.Sprintf("https://ty.example/jobs/%d", a.ID) || p.RunSeconds != 1 || p.Cost != "3.00 USD" {
		t.Fatalf("webhook body = %+v", p)
	}
	if m := r.mailsTo("alice@example.com"); len(m) != 1 || !strings.Contains(m[0].Data, fmt.Sprintf("Subject: [trainyard] job %d (resnet) succeeded", a.ID)) || !m[0].TLS {
		t.Fatalf("mails to alice: %+v, want one about job %d over TLS", m, a.ID)
	}
	if m := r.mailsTo("carol@example.com"); len(m) != 1 || !strings.Contains(m[0].Data, fmt.Sprintf("job %d (broken) failed", d.ID)) ||
		!strings.Contains(m[0].Data, "exit code 3") {
		t.Fatalf("mails to carol: %+v, want one about her failed job %d only", m, d.ID)
	}
	if n := len(r.smtp.Messages()); n != 2 {
		t.Fatalf("relay got %d messages, want 2", n)
	}

	// A restarted server (a new notifier over the same store) owes nothing.
	r.notifier(t).Pass(ctx)
	if n, m := len(r.hook.list()), len(r.smtp.Messages()); n != 1 || m != 2 {
		t.Fatalf("after a restart: %d webhook bodies and %d mails, want 1 and 2", n, m)
	}
	pend, err := st.PendingJobNotifications(ctx, 0)
	if err != nil || len(pend) != 0 {
		t.Fatalf("pending notifications: %+v, %v", pend, err)
	}
}

// A notification that fails is retried after its backoff and sent once;
// one whose channel is gone is given up with the reason.
func TestJobEndNotificationRetried(t *testing.T) {
	ctx := context.Background()
	r := newNotifyRig(t)
	j := submit(t, r.st, "flaky", "alice", &domain.Notify{Channels: []string{"team", "gone"}, Email: []string{"alice@example.com"}})
	end(t, r.st, j, r.clk.Now(), domain.ReasonCanceledByUser, "", domain.MoveCancel())
	r.smtp.FailNext(1)
	r.hook.mu.Lock()
	r.hook.fail = true
	r.hook.mu.Unlock()
	n := r.notifier(t)
	n.Pass(ctx)
	notes, err := r.st.JobNotifications(ctx, j.ID)
	if err != nil || len(notes) != 3 {
		t.Fatalf("notifications of job %d: %+v, %v", j.ID, notes, err)
	}
	for _, no := range notes {
		switch no.Target {
		case "channel:gone":
			if !no.GaveUp || !strings.Contains(no.LastError, `no channel named "gone"`) {
				t.Errorf("unknown channel: %+v, want given up naming it", no)
			}
		default:
			if no.GaveUp || no.Tries != 1 || no.LastError == "" || !no.SentAt.IsZero() {
				t.Errorf("%s after a failed try: %+v", no.Target, no)
			}
		}
	}
	r.hook.mu.Lock()
	r.hook.fail = false
	r.hook.mu.Unlock()
	n.Pass(ctx) // before the backoff: nothing is tried
	if len(r.hook.list()) != 0 || len(r.smtp.Messages()) != 0 {
		t.Fatalf("sent before the backoff ended")
	}
	r.clk.Advance(2 * time.Minute)
	n.Pass(ctx)
	n.Pass(ctx)
	if got := r.hook.list(); len(got) != 1 || got[0].State != "canceled" || got[0].Reason != string(domain.ReasonCanceledByUser) {
		t.Fatalf("webhook after the retry: %+v, want one canceled", got)
	}
	if m := r.mailsTo("alice@example.com"); len(m) != 1 {
		t.Fatalf("mails after the retry: %d, want 1", len(m))
	}
}

// Run finds a job end on its own, soon after the end is recorded.
func TestNotifierRunDelivers(t *testing.T) {
	r := newNotifyRig(t)
	r.cfg.Interval = 10 * time.Millisecond
	n := r.notifier(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Run(ctx) }()
	defer func() { cancel(); <-done }()
	j := submit(t, r.st, "late", "alice", &domain.Notify{Channels: []string{"team"}})
	end(t, r.st, j, r.clk.Now(), "", "", domain.MoveCancel())
	n.Wake()
	waitFor(t, "the job end on the webhook", func() bool { return len(r.hook.list()) == 1 })
	if !slices.Equal(n.Channels(), []string{"team"}) || !n.Email() {
		t.Fatalf("Channels = %v, Email = %v", n.Channels(), n.Email())
	}
}

// A sweep's members do not notify their submitter's default (a sweep of
// thousands would flood it); a member's own notify: still does.
func TestSweepMembersSkipTheDefault(t *testing.T) {
	ctx := context.Background()
	r := newNotifyRig(t)
	if err := r.st.PutNotifyPref(ctx, domain.NotifyPref{User: "dana", UpdatedAt: r.clk.Now(),
		Notify: domain.Notify{Email: []string{"dana@example.com"}}}, domain.AuditRecord{Actor: "user:dana", Action: "notify.set", Result: domain.AuditOK}); err != nil {
		t.Fatal(err)
	}
	member := func(name string, n *domain.Notify) domain.Job {
		t.Helper()
		spec := domain.Spec{Name: name, Project: "vision", Pool: "standard", Env: "host", Entrypoint: []string{"true"},
			Resources: domain.Resources{CPUs: 1, Memory: 1 << 30, Nodes: 1}, Notify: n,
			Labels: map[string]string{domain.SweepLabel: "7", domain.ArrayIndexLabel: "0"}}
		b, _ := json.Marshal(spec)
		sum := sha256.Sum256(b)
		j, _, err := r.st.CreateJob(ctx, store.NewJob{Spec: spec, SpecJSON: b, SpecHash: "sha256:" + hex.EncodeToString(sum[:]),
			Submitter: "dana", SubmittedAt: time.Now(), Actor: "user:dana",
			OutputDir: func(id int64) string { return fmt.Sprintf("/out/%d", id) }}, domain.AuditRecord{Actor: "user:dana", Action: "job.submit", Result: domain.AuditOK})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	quiet := member("quiet", nil)
	loud := member("loud", &domain.Notify{Channels: []string{"team"}})
	plain := submit(t, r.st, "plain", "dana", nil)
	for _, j := range []domain.Job{quiet, loud, plain} {
		end(t, r.st, j, r.clk.Now(), "", "", domain.MoveStart(), domain.MoveSucceed())
	}
	r.notifier(t).Pass(ctx)
	if m := r.mailsTo("dana@example.com"); len(m) != 1 || !strings.Contains(m[0].Data, fmt.Sprintf("job %d (plain)", plain.ID)) {
		t.Fatalf("mails to dana: %+v, want one, about job %d", m, plain.ID)
	}
	if got := r.hook.list(); len(got) != 1 || got[0].Job != loud.ID {
		t.Fatalf("webhook: %+v, want job %d's end", got, loud.ID)
	}
}
