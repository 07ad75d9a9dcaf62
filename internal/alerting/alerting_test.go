package alerting_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"trainyard/internal/alerting"
	"trainyard/internal/alerts"
	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
)

// observe tells the alerter the whole queue and the active attempts, as
// the control loop's first View does: jobs holds the attempts' jobs and
// the queued ones.
func observe(a *alerting.Alerter, jobs map[int64]domain.Job, atts []domain.Attempt) {
	var queued []alerts.QueuedJob
	for _, j := range jobs {
		if j.State == domain.JobQueued {
			queued = append(queued, alerts.QueuedJob{Job: alerts.RefOf(j), QueuedSince: j.UpdatedAt})
		}
	}
	a.Queue(queued, nil, true)
	a.Active(func(yield func(domain.Job, domain.Attempt) bool) {
		for _, at := range atts {
			if j, ok := jobs[at.JobID]; ok && !yield(j, at) {
				return
			}
		}
	})
}

// hook is a real HTTP receiver that can be told to fail.
type hook struct {
	mu     sync.Mutex
	got    []string // "status key"
	fail   atomic.Bool
	failed atomic.Int64 // requests answered with an error
}

func (h *hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.fail.Load() {
		h.failed.Add(1)
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	b, _ := io.ReadAll(r.Body)
	var m struct{ Status, Key string }
	_ = json.Unmarshal(b, &m)
	h.mu.Lock()
	h.got = append(h.got, m.Status+" "+m.Key)
	h.mu.Unlock()
}

func (h *hook) list() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.got...)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newAlerter(t *testing.T, st store.Store, url string) (*alerting.Alerter, context.CancelFunc, chan struct{}) {
	t.Helper()
	return newAlerterWith(t, st, url, nil)
}

func TestStalledAlertFiresOnceAndSurvivesRestart(t *testing.T) {
	st := openStore(t)
	h := &hook{}
	srv := httptest.NewServer(h)
	defer srv.Close()

	job := domain.Job{ID: 7, Name: "resnet", Project: "vision", Pool: "standard", Submitter: "alice", State: domain.JobFailed, Attempts: 1}
	a, stop, done := newAlerter(t, st, srv.URL)
	observe(a, map[int64]domain.Job{}, nil)
	a.AttemptEnded(job, domain.Attempt{JobID: 7, Number: 1, State: domain.AttemptFailed, Reason: domain.ReasonStalled,
		Message: "no progress for 2s", FinishedAt: time.Now()})
	waitFor(t, "the firing notification", func() bool { return len(h.list()) == 1 })
	if got := h.list()[0]; got != "firing stalled/job=7" {
		t.Fatalf("receiver got %q", got)
	}
	waitFor(t, "the delivery to be recorded", func() bool {
		p, err := st.PendingNotifications(context.Background(), 10)
		return err == nil && len(p) == 0
	})
	stop()
	<-done

	// The receiver goes down; the job is retried and runs: the resolution
	// cannot be delivered and stays in the outbox.
	h.fail.Store(true)
	job.State, job.Attempts = domain.JobRunning, 2
	a, stop, done = newAlerter(t, st, srv.URL)
	observe(a, map[int64]domain.Job{7: job}, []domain.Attempt{{JobID: 7, Number: 2}})
	waitFor(t, "the resolution to be stored", func() bool {
		l, err := st.ListAlerts(context.Background(), store.AlertFilter{State: domain.AlertResolved})
		return err == nil && len(l) == 1
	})
	waitFor(t, "the failed delivery to be recorded", func() bool {
		p, err := st.PendingNotifications(context.Background(), 10)
		return err == nil && len(p) == 0 // MaxTries 1: given up
	})
	stop()
	<-done
	if got := h.list(); len(got) != 1 {
		t.Fatalf("receiver got %v while down", got)
	}

	// A notification still owed at restart is sent then, once; the firing
	// alert restored from the store does not fire again.
	if _, err := st.RecordAlerts(context.Background(), []store.AlertTransition{{Alert: domain.Alert{Key: "stalled/job=9", Rule: "stalled",
		Severity: "critical", State: domain.AlertFiring, Summary: "job 9 stalled", JobID: 9, FiredAt: time.Now()}, Notify: []string{"hook"}}}); err != nil {
		t.Fatal(err)
	}
	h.fail.Store(false)
	a, stop, done = newAlerter(t, st, srv.URL)
	defer func() { stop(); <-done }()
	observe(a, map[int64]domain.Job{9: {ID: 9, State: domain.JobFailed}}, nil)
	waitFor(t, "the owed notification", func() bool { return len(h.list()) == 2 })
	waitFor(t, "its delivery to be recorded", func() bool {
		p, err := st.PendingNotifications(context.Background(), 10)
		return err == nil && len(p) == 0
	})
	if got := h.list(); got[1] != "firing stalled/job=9" {
		t.Fatalf("receiver got %v", got)
	}
}

// A hold from preemption, as the control loop reports it, fires
// preemption_thrash once with the hold's facts; its release resolves it.
func TestPreemptionThrashFollowsTheHold(t *testing.T) {
	st := openStore(t)
	h := &hook{}
	srv := httptest.NewServer(h)
	defer srv.Close()
	a, stop, done := newAlerter(t, st, srv.URL)
	defer func() { stop(); <-done }()

	job := domain.Job{ID: 7, Name: "sweep", Project: "vision", Pool: "standard", Submitter: "alice", State: domain.JobRunning, Attempts: 5}
	observe(a, map[int64]domain.Job{7: job}, []domain.Attempt{{JobID: 7, Number: 5}})
	until := time.Date(2026, 3, 1, 13, 0, 0, 0, time.UTC)
	a.PreemptionHeld(job, domain.PreemptionHold{JobID: 7, Count: 4, Window: 30 * time.Minute, Until: until, For: []int64{3, 5}})
	waitFor(t, "the firing notification", func() bool { return len(h.list()) == 1 })
	firing, err := st.ListAlerts(context.Background(), store.AlertFilter{State: domain.AlertFiring, JobID: 7})
	if err != nil || len(firing) != 1 {
		t.Fatalf("firing alerts of job 7: %+v, %v", firing, err)
	}
	if f := firing[0]; f.Rule != "preemption_thrash" || f.Severity != "warning" || f.Owner != "alice" ||
		!strings.Contains(f.Summary, "job 7 (sweep) was preempted 4 times in 30m, for jobs 3, 5; it is held from preemption until 2026-03-01 13:00:00 UTC") {
		t.Fatalf("stored alert = %+v", f)
	}
	a.PreemptionReleased(7)
	waitFor(t, "the resolution", func() bool { return len(h.list()) == 2 })
	if got := h.list(); got[0] != "firing preemption_thrash/job=7" || got[1] != "resolved preemption_thrash/job=7" {
		t.Fatalf("receiver got %v", got)
	}
}

// A firing notification being retried is not sent once its alert is
// acknowledged, even by a server part that did not tell this Alerter.
func TestAcknowledgedAlertIsNotRetried(t *testing.T) {
	st := openStore(t)
	h := &hook{}
	h.fail.Store(true)
	srv := httptest.NewServer(h)
	defer srv.Close()
	a, err := alerting.New(alerting.Config{Store: st, Interval: 10 * time.Millisecond, Alerts: alerts.Config{
		Channels: []alerts.ChannelConfig{{Name: "hook", Type: alerts.TypeWebhook, URL: srv.URL}},
		Delivery: alerts.DeliveryConfig{MaxTries: 100, Backoff: domain.Duration(20 * time.Millisecond), MaxBackoff: domain.Duration(50 * time.Millisecond),
			MaxAge: domain.Duration(time.Hour)}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	defer func() { cancel(); <-done }()

	job := domain.Job{ID: 7, Name: "typo", Project: "vision", Submitter: "alice", State: domain.JobFailed, Attempts: 1}
	observe(a, map[int64]domain.Job{}, nil)
	a.AttemptEnded(job, domain.Attempt{JobID: 7, Number: 1, State: domain.AttemptFailed, Reason: domain.ReasonEntrypointNotFound,
		FinishedAt: time.Now()})
	var firing []domain.Alert
	waitFor(t, "the alert and a failed delivery", func() bool {
		firing, _ = st.ListAlerts(context.Background(), store.AlertFilter{State: domain.AlertFiring})
		return len(firing) == 1 && h.failed.Load() > 0
	})
	if _, err := st.AckAlert(context.Background(), firing[0].ID, "user:alice", "", time.Now(), domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); err != nil {
		t.Fatal(err)
	}
	h.fail.Store(false)
	waitFor(t, "the retry to be dropped", func() bool { return a.Pending() == 0 })
	if got := h.list(); len(got) != 0 {
		t.Fatalf("the receiver got %v after the acknowledgement", got)
	}
}

// newAlerterWith is newAlerter with tune applied to its config.
func newAlerterWith(t *testing.T, st store.Store, url string, tune func(*alerting.Config)) (*alerting.Alerter, context.CancelFunc, chan struct{}) {
	t.Helper()
	cfg := alerting.Config{Store: st, Interval: 10 * time.Millisecond, Alerts: alerts.Config{
		Channels: []alerts.ChannelConfig{{Name: "hook", Type: alerts.TypeWebhook, URL: url}},
		Delivery: alerts.DeliveryConfig{MaxTries: 1}}}
	if tune != nil {
		tune(&cfg)
	}
	a, err := alerting.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	return a, cancel, done
}

// An attempt whose log reached its limit, as the control loop reports it,
// fires log_truncated once, naming the limit and (asked once) what was
// dropped; the attempt's end resolves it.
func TestLogTruncatedFiresOncePerAttempt(t *testing.T) {
	st := openStore(t)
	h := &hook{}
	srv := httptest.NewServer(h)
	defer srv.Close()
	var asked atomic.Int32
	a, stop, done := newAlerterWith(t, st, srv.URL, func(c *alerting.Config) {
		c.LogDropped = func(job int64, attempt int) (int64, bool) {
			asked.Add(1)
			return 300 << 20, job == 7 && attempt == 2
		}
	})
	defer func() { stop(); <-done }()

	job := domain.Job{ID: 7, Name: "chatty", Project: "vision", Pool: "standard", Submitter: "alice", State: domain.JobRunning, Attempts: 2}
	observe(a, map[int64]domain.Job{7: job}, []domain.Attempt{{JobID: 7, Number: 2}})
	a.LogLimited(job, 2, 1<<30, time.Now())
	waitFor(t, "the firing notification", func() bool { return len(h.list()) == 1 })
	firing, err := st.ListAlerts(context.Background(), store.AlertFilter{State: domain.AlertFiring, JobID: 7})
	if err != nil || len(firing) != 1 {
		t.Fatalf("firing alerts of job 7: %+v, %v", firing, err)
	}
	if f := firing[0]; f.Key != "log_truncated/job=7/attempt=2" || f.Severity != "warning" || f.Attempt != 2 ||
		!strings.Contains(f.Summary, "job 7 (chatty) attempt 2: the log reached its limit of 1GiB; only its first 512MiB and the newest lines are kept, 300MiB dropped so far") ||
		!strings.Contains(f.Summary, "raise policy.log_limit") {
		t.Fatalf("stored alert = %+v", f)
	}
	a.LogLimited(job, 2, 1<<30, time.Now()) // reported again: a reattach
	job.State = domain.JobSucceeded
	a.AttemptEnded(job, domain.Attempt{JobID: 7, Number: 2, State: domain.AttemptSucceeded, Reason: domain.ReasonCompleted, FinishedAt: time.Now()})
	// The loop passes on; one of its passes (at most one per Interval is
	// read) no longer lists the attempt as running.
	waitFor(t, "the resolution", func() bool {
		observe(a, map[int64]domain.Job{}, nil)
		return len(h.list()) == 2
	})
	if got := h.list(); got[0] != "firing log_truncated/job=7/attempt=2" || got[1] != "resolved log_truncated/job=7/attempt=2" {
		t.Fatalf("receiver got %v", got)
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("LogDropped asked %d times, want once", n)
	}
}

// openStore opens a fresh SQLite store, closed when the test ends.
func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// fenceSpy records the leader fence each delivery record was written with.
type fenceSpy struct {
	*sqlite.Store
	mu     sync.Mutex
	fences []int64
}

func (f *fenceSpy) MarkNotification(ctx context.Context, alertID int64, channel string, status domain.AlertState, r store.NotificationResult) error {
	epoch, ok := store.FenceFrom(ctx)
	if !ok {
		epoch = -1
	}
	f.mu.Lock()
	f.fences = append(f.fences, epoch)
	f.mu.Unlock()
	return f.Store.MarkNotification(ctx, alertID, channel, status, r)
}

// A leader's Alerter records deliveries within its term, like every other
// write of the leader's loops: a deposed leader's record is refused.
func TestDeliveryRecordsCarryTheLeadersFence(t *testing.T) {
	st := &fenceSpy{Store: openStore(t)}
	h := &hook{}
	srv := httptest.NewServer(h)
	defer srv.Close()
	a, err := alerting.New(alerting.Config{Store: st, Interval: 10 * time.Millisecond, Alerts: alerts.Config{
		Channels: []alerts.ChannelConfig{{Name: "hook", Type: alerts.TypeWebhook, URL: srv.URL}},
		Delivery: alerts.DeliveryConfig{MaxTries: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(store.WithFence(context.Background(), 42))
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	defer func() { cancel(); <-done }()

	job := domain.Job{ID: 7, Name: "typo", Project: "vision", Submitter: "alice", State: domain.JobFailed, Attempts: 1}
	observe(a, map[int64]domain.Job{}, nil)
	a.AttemptEnded(job, domain.Attempt{JobID: 7, Number: 1, State: domain.AttemptFailed, Reason: domain.ReasonEntrypointNotFound,
		FinishedAt: time.Now()})
	waitFor(t, "the delivery to be recorded", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return len(st.fences) > 0
	})
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, f := range st.fences {
		if f != 42 {
			t.Fatalf("delivery recorded with fence %d, want the term's 42 (fences %v)", f, st.fences)
		}
	}
}
