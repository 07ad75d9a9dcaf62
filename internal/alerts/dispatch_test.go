package alerts

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"trainyard/internal/domain"
)

const (
	pathToken   = "T0AAA/B0BBB/pathSECRETtoken"
	headerToken = "Bearer headerSECRETvalue"
)

type request struct {
	path   string
	header http.Header
	body   []byte
}

// receiver is a real HTTP server that records every request and answers
// with codes[i] for the i-th request (200 once codes run out).
type receiver struct {
	*httptest.Server
	reqs  chan request
	n     atomic.Int64
	codes []int
}

func newReceiver(t *testing.T, codes ...int) *receiver {
	r := &receiver{reqs: make(chan request, 100), codes: codes}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		i := int(r.n.Add(1)) - 1
		r.reqs <- request{path: req.URL.Path, header: req.Header.Clone(), body: b}
		if i < len(r.codes) {
			w.WriteHeader(r.codes[i])
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

// next waits for the next request, failing after a deadline.
func (r *receiver) next(t *testing.T) request {
	t.Helper()
	select {
	case req := <-r.reqs:
		return req
	case <-time.After(10 * time.Second):
		t.Fatal("receiver got no request within 10s")
		return request{}
	}
}

// none checks that no further request arrived.
func (r *receiver) none(t *testing.T) {
	t.Helper()
	select {
	case req := <-r.reqs:
		t.Fatalf("unexpected extra request: %s", req.body)
	default:
	}
}

func webhook(t *testing.T, url, format string) *Webhook {
	t.Helper()
	c := ChannelConfig{Name: "hook", Type: TypeWebhook, URL: url + "/services/" + pathToken, Format: format,
		Headers: map[string]string{"Authorization": headerToken}}
	var cfg Config
	cfg.Channels = []ChannelConfig{c}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	w, err := NewWebhook(cfg.Channels[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

var stalledAlert = Alert{Key: "stalled/job=42", Rule: RuleStalled, Severity: SeverityCritical, Status: StatusFiring,
	Summary: "job 42 (resnet) stalled on attempt 2: no training progress for health.stall (10m) — see `trainyard why 42`",
	Labels:  Labels{Job: 42, JobName: "resnet", Attempt: 2, Project: "vision", Pool: "standard", Owner: "alice"},
	FiredAt: t0}

func TestWebhookGenericJSON(t *testing.T) {
	r := newReceiver(t)
	w := webhook(t, r.URL, FormatJSON)
	if err := w.Send(context.Background(), Notification{stalledAlert}); err != nil {
		t.Fatal(err)
	}
	req := r.next(t)
	if req.path != "/services/"+pathToken || req.header.Get("Authorization") != headerToken || req.header.Get("Content-Type") != "application/json" {
		t.Errorf("request path %q headers %v", req.path, req.header)
	}
	var raw map[string]any
	if err := json.Unmarshal(req.body, &raw); err != nil {
		t.Fatalf("body %s: %v", req.body, err)
	}
	for k, want := range map[string]any{"version": 1.0, "status": "firing", "key": "stalled/job=42", "rule": "stalled",
		"severity": "critical", "summary": stalledAlert.Summary, "fired_at": "2025-03-01T12:00:00Z"} {
		if raw[k] != want {
			t.Errorf("body[%q] = %v, want %v (body %s)", k, raw[k], want, req.body)
		}
	}
	if _, ok := raw["resolved_at"]; ok {
		t.Errorf("firing body has resolved_at: %s", req.body)
	}
	var p Payload
	if err := json.Unmarshal(req.body, &p); err != nil || p.Labels != stalledAlert.Labels {
		t.Errorf("labels = %+v (%v), want %+v", p.Labels, err, stalledAlert.Labels)
	}

	res := stalledAlert
	res.Status, res.ResolvedAt, res.Resolution = StatusResolved, t0.Add(time.Hour), "job 42 (resnet) is running again (attempt 3)"
	if err := w.Send(context.Background(), Notification{res}); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(r.next(t).body, &p); err != nil || p.Status != StatusResolved || !p.ResolvedAt.Equal(res.ResolvedAt) || p.Resolution != res.Resolution {
		t.Errorf("resolved payload = %+v (%v)", p, err)
	}
}

func TestWebhookSlack(t *testing.T) {
	r := newReceiver(t)
	w := webhook(t, r.URL, FormatSlack)
	if err := w.Send(context.Background(), Notification{stalledAlert}); err != nil {
		t.Fatal(err)
	}
	var body map[string]string
	if err := json.Unmarshal(r.next(t).body, &body); err != nil || len(body) != 1 {
		t.Fatalf("slack body %v: %v", body, err)
	}
	want := ":red_circle: *CRITICAL* " + stalledAlert.Summary + " (`stalled/job=42`)"
	if body["text"] != want {
		t.Errorf("text = %q, want %q", body["text"], want)
	}
	res := stalledAlert
	res.Status, res.Resolution = StatusResolved, "job 42 (resnet) succeeded"
	if got := SlackText(Notification{res}); !strings.HasPrefix(got, ":white_check_mark: *RESOLVED* job 42") || !strings.Contains(got, "— resolved: job 42 (resnet) succeeded") {
		t.Errorf("resolved text = %q", got)
	}
}

func assertNoSecrets(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("Send succeeded; want an error")
	}
	for _, s := range []string{"SECRET", "services", "/T0AAA"} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error %q contains %q", err, s)
		}
	}
}

func TestWebhookErrorsHideSecrets(t *testing.T) {
	t.Run("status", func(t *testing.T) {
		r := newReceiver(t, http.StatusForbidden)
		err := webhook(t, r.URL, FormatJSON).Send(context.Background(), Notification{stalledAlert})
		assertNoSecrets(t, err)
		if !strings.Contains(err.Error(), "receiver answered 403 Forbidden") || !strings.Contains(err.Error(), `webhook channel "hook" (http://127.0.0.1:`) {
			t.Errorf("error = %q", err)
		}
	})
	t.Run("redirect", func(t *testing.T) {
		srv := httptest.NewServer(http.RedirectHandler("http://elsewhere.invalid/", http.StatusFound))
		defer srv.Close()
		err := webhook(t, srv.URL, FormatJSON).Send(context.Background(), Notification{stalledAlert})
		assertNoSecrets(t, err)
		if !strings.Contains(err.Error(), "302") {
			t.Errorf("error = %q", err)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		r := newReceiver(t)
		url := r.URL
		r.Close()
		err := webhook(t, url, FormatJSON).Send(context.Background(), Notification{stalledAlert})
		assertNoSecrets(t, err)
		if !strings.Contains(err.Error(), "POST failed") {
			t.Errorf("error = %q", err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}))
		defer srv.Close()
		defer close(release)
		c := ChannelConfig{Name: "slow", Type: TypeWebhook, URL: srv.URL + "/" + pathToken, Timeout: domain.Duration(50 * time.Millisecond),
			Headers: map[string]string{"X-Token": headerToken}}
		w, err := NewWebhook(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = w.Send(context.Background(), Notification{stalledAlert})
		assertNoSecrets(t, err)
	})
}

// fakeTime is a clock whose After returns at once, having moved the time on
// by the wait; it records every wait.
type fakeTime struct {
	mu    sync.Mutex
	now   time.Time
	waits []time.Duration
}

func (f *fakeTime) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeTime) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.waits = append(f.waits, d)
	ch := make(chan time.Time, 1)
	ch <- f.now
	return ch
}

func (f *fakeTime) Waits() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.waits...)
}

type outcome struct {
	key, channel string
	status       Status
	err          error
}

// startDispatcher runs a dispatcher over routes with a fakeTime and returns
// the channel of its OnDelivered / OnGaveUp reports.
func startDispatcher(t *testing.T, routes []Route, del DeliveryConfig) (*Dispatcher, *fakeTime, chan outcome) {
	t.Helper()
	ft := &fakeTime{now: t0}
	out := make(chan outcome, 100)
	d := NewDispatcher(routes, DispatcherOptions{
		Delivery:    del,
		Now:         ft.Now,
		After:       ft.After,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnDelivered: func(k, ch string, s Status) { out <- outcome{k, ch, s, nil} },
		OnGaveUp:    func(k, ch string, s Status, err error) { out <- outcome{k, ch, s, err} },
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	})
	return d, ft, out
}

func nextOutcome(t *testing.T, out chan outcome) outcome {
	t.Helper()
	select {
	case o := <-out:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery report within 10s")
		return outcome{}
	}
}

func TestDispatcherRetriesAfter500(t *testing.T) {
	r := newReceiver(t, http.StatusInternalServerError, http.StatusBadGateway)
	d, ft, out := startDispatcher(t, []Route{{Channel: webhook(t, r.URL, FormatJSON), MinSeverity: SeverityInfo}}, DeliveryConfig{})
	d.Submit(Transition{stalledAlert})
	for i := 0; i < 3; i++ {
		var p Payload
		if err := json.Unmarshal(r.next(t).body, &p); err != nil || p.Key != "stalled/job=42" {
			t.Fatalf("try %d: payload %+v (%v)", i+1, p, err)
		}
	}
	if o := nextOutcome(t, out); o != (outcome{"stalled/job=42", "hook", StatusFiring, nil}) {
		t.Errorf("outcome = %+v", o)
	}
	r.none(t)
	if w := ft.Waits(); len(w) != 2 || w[0] != time.Second || w[1] != 2*time.Second {
		t.Errorf("backoff waits = %v, want [1s 2s]", w)
	}
	if d.Pending() != 0 {
		t.Errorf("Pending = %d, want 0", d.Pending())
	}
}

func TestDispatcherGivesUp(t *testing.T) {
	t.Run("max tries", func(t *testing.T) {
		r := newReceiver(t, 500, 500, 500, 500, 500)
		d, ft, out := startDispatcher(t, []Route{{Channel: webhook(t, r.URL, FormatJSON), MinSeverity: SeverityInfo}},
			DeliveryConfig{MaxTries: 3})
		d.Submit(Transition{stalledAlert})
		o := nextOutcome(t, out)
		if o.err == nil || o.key != "stalled/job=42" || o.status != StatusFiring {
			t.Fatalf("outcome = %+v, want a give-up", o)
		}
		if !strings.Contains(o.err.Error(), `gave up on firing notification of stalled/job=42 to channel "hook" after 3 tries over 3s`) ||
			!strings.Contains(o.err.Error(), "500") {
			t.Errorf("give-up error = %q", o.err)
		}
		assertNoSecrets(t, o.err)
		for i := 0; i < 3; i++ {
			r.next(t)
		}
		r.none(t)
		if w := ft.Waits(); len(w) != 2 {
			t.Errorf("waits = %v, want 2", w)
		}
	})
	t.Run("max age", func(t *testing.T) {
		r := newReceiver(t, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500)
		d, _, out := startDispatcher(t, []Route{{Channel: webhook(t, r.URL, FormatJSON), MinSeverity: SeverityInfo}},
			DeliveryConfig{MaxTries: 100, MaxAge: domain.Duration(10 * time.Second)})
		d.Submit(Transition{stalledAlert})
		// Tries at 0s, 1s, 3s, 7s; the next would be at 15s > 10s.
		if o := nextOutcome(t, out); o.err == nil || !strings.Contains(o.err.Error(), "after 4 tries over 7s") {
			t.Errorf("outcome = %+v", o)
		}
	})
}

func TestDispatcherKeepsOrderPerKey(t *testing.T) {
	r := newReceiver(t, 503)
	d, _, out := startDispatcher(t, []Route{{Channel: webhook(t, r.URL, FormatJSON), MinSeverity: SeverityInfo}}, DeliveryConfig{})
	other := stalledAlert
	other.Key, other.Labels.Job = "stalled/job=43", 43
	res := stalledAlert
	res.Status = StatusResolved
	d.Submit(Transition{stalledAlert}, Transition{other}, Transition{res})
	var got []string
	for i := 0; i < 4; i++ {
		var p Payload
		json.Unmarshal(r.next(t).body, &p)
		got = append(got, string(p.Status)+" "+p.Key)
	}
	// The failed firing of job 42 holds back its resolution, not job 43.
	want := "firing stalled/job=42, firing stalled/job=43, firing stalled/job=42, resolved stalled/job=42"
	if strings.Join(got, ", ") != want {
		t.Errorf("order = %v, want %s", got, want)
	}
	for i := 0; i < 3; i++ {
		nextOutcome(t, out)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestEndToEnd runs the engine and the dispatcher against a real receiver
// and the log: each alert arrives exactly once firing and once resolved.
func TestEndToEnd(t *testing.T) {
	hook := newReceiver(t)
	var logBuf syncBuffer
	logger := slog.New(slog.NewJSONHandler(&logBuf, nil))
	cfg := Config{Channels: []ChannelConfig{
		{Name: "hook", Type: TypeWebhook, URL: hook.URL + "/services/" + pathToken, Headers: map[string]string{"Authorization": headerToken}},
		{Name: "ops-log", Type: TypeLog, MinSeverity: SeverityCritical},
	}}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	eng, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	routes, err := NewRoutes(cfg, logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, _, out := startDispatcher(t, routes, cfg.Delivery)

	stall := EndedAttempt{Job: job(42), Attempt: 2, State: domain.AttemptFailed, Reason: domain.ReasonStalled,
		Message: "no training progress for health.stall (10m)", EndedAt: t0, JobState: domain.JobQueued}
	queued := []QueuedJob{{Job: job(50), QueuedSince: t0.Add(-2 * time.Hour)}}
	steps := []Observation{
		{Now: t0, Ended: []EndedAttempt{stall}, Queued: queued},
		{Now: t0.Add(time.Minute), Queued: queued},
		{Now: t0.Add(2 * time.Minute), Ended: []EndedAttempt{stall}, Queued: queued},
		{Now: t0.Add(3 * time.Minute), Running: []RunningAttempt{{Job: job(42), Attempt: 3}, {Job: job(50), Attempt: 1}}},
		{Now: t0.Add(4 * time.Minute), Running: []RunningAttempt{{Job: job(42), Attempt: 3}, {Job: job(50), Attempt: 1}}},
	}
	for _, obs := range steps {
		d.Submit(eng.Evaluate(obs)...)
	}
	// hook: 4 deliveries; ops-log: the critical stall, firing and resolved.
	counts := map[string]int{}
	for i := 0; i < 6; i++ {
		o := nextOutcome(t, out)
		if o.err != nil {
			t.Fatalf("delivery failed: %v", o.err)
		}
		counts[o.channel+" "+string(o.status)+" "+o.key]++
	}
	want := map[string]int{
		"hook firing stalled/job=42": 1, "hook resolved stalled/job=42": 1,
		"hook firing queued_too_long/job=50": 1, "hook resolved queued_too_long/job=50": 1,
		"ops-log firing stalled/job=42": 1, "ops-log resolved stalled/job=42": 1,
	}
	for k, n := range want {
		if counts[k] != n {
			t.Errorf("%s delivered %d times, want %d (all: %v)", k, counts[k], n, counts)
		}
	}
	got := map[string]int{}
	for i := 0; i < 4; i++ {
		var p Payload
		if err := json.Unmarshal(hook.next(t).body, &p); err != nil {
			t.Fatal(err)
		}
		got[string(p.Status)+" "+p.Key]++
	}
	hook.none(t)
	if len(got) != 4 {
		t.Errorf("receiver got %v, want each of 4 notifications once", got)
	}
	logs := logBuf.String()
	if strings.Count(logs, `"msg":"alert firing"`) != 1 || strings.Count(logs, `"msg":"alert resolved"`) != 1 ||
		!strings.Contains(logs, `"level":"ERROR"`) || strings.Contains(logs, "queued_too_long") {
		t.Errorf("log channel wrote:\n%s", logs)
	}
	if strings.Contains(logs, "SECRET") {
		t.Errorf("log reveals a secret:\n%s", logs)
	}
}

func TestDispatcherTest(t *testing.T) {
	r := newReceiver(t, 200, 401)
	var logBuf syncBuffer
	d := NewDispatcher([]Route{
		{Channel: webhook(t, r.URL, FormatSlack), MinSeverity: SeverityCritical},
		{Channel: NewLog("server-log", slog.New(slog.NewTextHandler(&logBuf, nil))), MinSeverity: SeverityCritical},
	}, DispatcherOptions{Now: func() time.Time { return t0 }})
	if err := d.Test(context.Background(), "hook"); err != nil {
		t.Fatalf("Test(hook): %v", err)
	}
	var body SlackPayload
	json.Unmarshal(r.next(t).body, &body)
	if !strings.HasPrefix(body.Text, ":test_tube: *TEST* test notification from trainyard to channel \"hook\"") {
		t.Errorf("test text = %q", body.Text)
	}
	err := d.Test(context.Background(), "hook")
	assertNoSecrets(t, err)
	if !strings.Contains(err.Error(), "401") {
		t.Errorf("Test error = %v", err)
	}
	if err := d.Test(context.Background(), "server-log"); err != nil || !strings.Contains(logBuf.String(), "msg=\"alert test\"") {
		t.Errorf("Test(server-log) = %v, log %q", err, logBuf.String())
	}
	err = d.Test(context.Background(), "pager")
	if err == nil || err.Error() != `no alert channel named "pager"; known channels: hook, server-log` {
		t.Errorf("Test(pager) = %v", err)
	}
	if err := NewDispatcher(nil, DispatcherOptions{Now: time.Now}).Test(context.Background(), "x"); err == nil || !strings.Contains(err.Error(), "none is configured") {
		t.Errorf("Test without channels = %v", err)
	}
}

func TestBackoff(t *testing.T) {
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 9: 256 * time.Second, 10: 5 * time.Minute, 60: 5 * time.Minute} {
		if got := Backoff(n, time.Second, 5*time.Minute); got != want {
			t.Errorf("Backoff(%d) = %v, want %v", n, got, want)
		}
	}
}

// Drop removes the queued firing notifications of one key (an
// acknowledged alert) from every channel, and nothing else.
func TestDispatcherDropsAcknowledgedFirings(t *testing.T) {
	r := newReceiver(t)
	routes := []Route{{Channel: webhook(t, r.URL, FormatJSON), MinSeverity: SeverityInfo},
		{Channel: webhook(t, r.URL, FormatSlack), MinSeverity: SeverityInfo}}
	d := NewDispatcher(routes, DispatcherOptions{Now: time.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	other := stalledAlert
	other.Key = "stalled/job=43"
	resolvedAlert := stalledAlert
	resolvedAlert.Status = StatusResolved
	d.Submit(Transition{stalledAlert}, Transition{other})
	if n := d.Pending(); n != 4 {
		t.Fatalf("Pending = %d, want 4 (two alerts, two channels)", n)
	}
	d.Drop(stalledAlert.Key)
	if n := d.Pending(); n != 2 {
		t.Fatalf("Pending after Drop = %d, want the other alert's 2", n)
	}
	d.Submit(Transition{resolvedAlert})
	d.Drop(stalledAlert.Key) // a resolution is still sent
	if n := d.Pending(); n != 4 {
		t.Fatalf("Pending after the resolution = %d, want 4", n)
	}
}

// ctxChannel fails every send once ctx is done, as a webhook does when
// its request is cancelled; before then it blocks.
type ctxChannel struct{ sends atomic.Int64 }

func (c *ctxChannel) Name() string { return "slow" }

func (c *ctxChannel) Send(ctx context.Context, _ Notification) error {
	c.sends.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

// Run returns when its context ends even while a notification is due:
// the send cancelled by the shutdown is not retried in a loop.
func TestDispatcherStopsWithADueNotification(t *testing.T) {
	ch := &ctxChannel{}
	d := NewDispatcher([]Route{{Channel: ch, MinSeverity: SeverityInfo}}, DispatcherOptions{
		Now: time.Now, After: time.After, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	d.Submit(Transition{stalledAlert})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for ch.sends.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the notification was never sent")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Run did not return within 10s of its context ending (%d sends)", ch.sends.Load())
	}
	if d.Pending() != 1 {
		t.Errorf("Pending = %d, want the unsent notification kept", d.Pending())
	}
}
