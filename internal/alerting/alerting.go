// Package alerting runs the alert rules against what the control loop sees
// and delivers the alerts: it feeds package alerts' pure Engine with
// observations, stores every transition together with the notifications it
// owes (an outbox in the store), and hands them to the Dispatcher, which
// marks each delivery in the store. After a restart the firing alerts are
// restored (nothing fires twice) and the undelivered notifications are sent
// again.
//
// An Alerter is a control.Observer: the control loop tells it what entered
// and left the queue, the active attempts whenever they change, and every
// attempt that ends; it evaluates the rules every Interval on its own
// goroutine, at a cost that follows what changed and what runs, not the
// queue. The budgets and
// their spend, for budget_threshold, it reads from the store itself, at
// most every BudgetRefresh.
package alerting

import (
	"context"
	"iter"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"trainyard/internal/alerts"
	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// DefaultInterval is how often the rules are evaluated.
const DefaultInterval = 5 * time.Second

// Config wires an Alerter.
type Config struct {
	Store  Store
	Alerts alerts.Config // the server config's alerts section
	Logger *slog.Logger
	Clock  clock.Clock
	// Interval between evaluations (default DefaultInterval).
	Interval time.Duration
	// Samples returns the latest resource sample of each running attempt;
	// nil: no samples, so idle_gpu and memory_near_limit never fire.
	Samples func() []Sample
	// LogDropped says how many bytes of an attempt's log were dropped to
	// keep it under its limit (logs.Layout.LogLimited); asked once per
	// attempt whose log reached its limit, before its log_truncated alert
	// fires. Nil: not known, and the alert does not say.
	LogDropped func(jobID int64, attempt int) (dropped int64, ok bool)
	// Currency names the server's currency in budget alerts ("USD"); empty:
	// amounts are shown without one.
	Currency string
	// Review writes the summary of the review of [since, until) grouped by
	// by, for weekly_report; nil: the weekly report is never sent.
	Review func(ctx context.Context, since, until time.Time, by string) (string, error)
	// HTTPClient sends webhooks (default: a client without redirects).
	HTTPClient *http.Client
	// After is time.After, replaceable in tests of delivery retries.
	After func(time.Duration) <-chan time.Time
}

// Sample is the latest resource reading of one running attempt.
type Sample struct {
	JobID   int64
	Attempt int
	alerts.Sample
}

// Alerter evaluates alert rules and delivers alerts. Create one with New.
type Alerter struct {
	cfg    Config
	log    *slog.Logger
	engine *alerts.Engine
	disp   *alerts.Dispatcher
	routes []alerts.Route

	mu   sync.Mutex
	seen bool // the control loop told the queue and the active attempts
	// What entered and left the queue since the last evaluation (an id
	// is in one of the two at most); queueReset: entered is the whole
	// queue.
	entered    map[int64]alerts.QueuedJob
	left       map[int64]bool
	queueReset bool
	running    []alerts.RunningAttempt
	ended      []alerts.EndedAttempt
	held       map[int64]alerts.HeldJob // jobs held from preemption, as the control loop said
	// expiring are the running attempts an ending grant will preempt, as
	// the control loop last said; expiringSeen, whether it said yet.
	expiring     []alerts.ExpiringGrant
	expiringSeen bool
	limited      map[attemptKey]*limitedLog // active attempts whose log reached its limit
	ids          map[string]int64           // alert key → id of its latest stored alert
	kick         chan struct{}
	// The last read of the budgets (budgetUses), touched by Run's
	// goroutine only.
	budgets     []alerts.BudgetUse
	budgetsAt   time.Time
	budgetsRead bool
	// The weekly report last written (weeklyReport), touched by Run's
	// goroutine only.
	report weeklyReport
	// expected caches, by submitter and job name, how long their runs are
	// expected to take (runaway.go); touched by Run's goroutine only.
	expected map[runKey]expectation
	// runawayAt is when runawayFacts last judged running attempts.
	runawayAt time.Time
	// marks carries what Run's context carries to the deliveries'
	// records (the leader's fence), without its cancellation: a delivery
	// made as the loop stops is still recorded. Set by Run before the
	// dispatcher starts.
	marks context.Context
}

// attemptKey names one attempt of a job.
type attemptKey struct {
	job     int64
	attempt int
}

// limitedLog is an attempt whose log reached its limit; asked says
// whether Config.LogDropped was asked about it.
type limitedLog struct {
	alerts.LimitedLog
	asked bool
}

// New validates the alerts configuration and returns an Alerter.
func New(cfg Config) (*Alerter, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	cfg.Alerts.Defaults()
	if err := cfg.Alerts.Validate(); err != nil {
		return nil, err
	}
	eng, err := alerts.NewEngine(cfg.Alerts)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "alerts")
	routes, err := alerts.NewRoutes(cfg.Alerts, log, cfg.HTTPClient)
	if err != nil {
		return nil, err
	}
	a := &Alerter{cfg: cfg, log: log, engine: eng, routes: routes, ids: map[string]int64{}, expected: map[runKey]expectation{}, held: map[int64]alerts.HeldJob{},
		limited: map[attemptKey]*limitedLog{}, kick: make(chan struct{}, 1), marks: context.Background(),
		entered: map[int64]alerts.QueuedJob{}, left: map[int64]bool{}}
	a.disp = alerts.NewDispatcher(routes, alerts.DispatcherOptions{
		Delivery: cfg.Alerts.Delivery, Logger: log, Now: cfg.Clock.Now, After: cfg.After,
		OnDelivered: func(key, channel string, s alerts.Status) {
			a.mark(key, channel, s, store.NotificationResult{At: a.cfg.Clock.Now(), Sent: true})
		},
		OnGaveUp: func(key, channel string, s alerts.Status, err error) {
			a.mark(key, channel, s, store.NotificationResult{At: a.cfg.Clock.Now(), Error: err.Error(), GiveUp: true})
		},
		Skip: a.acknowledged,
	})
	return a, nil
}

// Channels names the configured channels.
func (a *Alerter) Channels() []string { return a.disp.Channels() }

// Test sends a test notification to one channel and returns its error.
func (a *Alerter) Test(ctx context.Context, channel string) error { return a.disp.Test(ctx, channel) }

// Acknowledged drops the queued firing notifications of the alert key,
// acknowledged in the store (service.AlertAcknowledger): it is not
// notified again. An Alerter not told (another leadership term's) finds
// out before its next send (acknowledged).
func (a *Alerter) Acknowledged(key string) { a.disp.Drop(key) }

// Pending is how many notifications wait to be sent or retried.
func (a *Alerter) Pending() int { return a.disp.Pending() }

// acknowledged reports whether the firing notification of key is no
// longer wanted: its alert was acknowledged (store.AckAlert).
func (a *Alerter) acknowledged(key string, s alerts.Status) bool {
	if s != alerts.StatusFiring {
		return false
	}
	a.mu.Lock()
	id := a.ids[key]
	a.mu.Unlock()
	if id == 0 {
		return false
	}
	al, err := a.cfg.Store.GetAlert(context.Background(), id)
	return err == nil && !al.AckedAt.IsZero()
}

// Queue records what changed in the queue since the last call
// (control.Observer's View): the jobs that entered it or whose entry
// changed, and the ids of those that left it; with reset, entered is the
// whole queue. The rules see it at the next evaluation.
func (a *Alerter) Queue(entered []alerts.QueuedJob, left []int64, reset bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if reset {
		clear(a.entered)
		clear(a.left)
		a.queueReset = true
	}
	for _, id := range left {
		delete(a.entered, id)
		a.left[id] = true
	}
	for _, q := range entered {
		delete(a.left, q.Job.ID)
		a.entered[q.Job.ID] = q
	}
}

// Active records the active (starting or running) attempts with their
// jobs, as the control loop last saw them (control.Observer's View).
func (a *Alerter) Active(active iter.Seq2[domain.Job, domain.Attempt]) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen = true
	a.running = a.running[:0]
	live := make(map[attemptKey]bool, len(a.limited))
	for j, at := range active {
		if j.State == domain.JobRunning && at.Number == j.Attempts {
			a.running = append(a.running, alerts.RunningAttempt{Job: alerts.RefOf(j), Attempt: at.Number})
		}
		if len(a.limited) > 0 && at.Number == j.Attempts {
			live[attemptKey{j.ID, at.Number}] = true
		}
	}
	for k := range a.limited {
		if !live[k] {
			delete(a.limited, k) // ended without AttemptEnded (a restart)
		}
	}
}

// LogLimited records that an active attempt's log reached its limit
// (control.Observer): log_truncated fires for it once.
func (a *Alerter) LogLimited(job domain.Job, attempt int, limit int64, at time.Time) {
	k := attemptKey{job.ID, attempt}
	a.mu.Lock()
	if _, ok := a.limited[k]; !ok {
		a.limited[k] = &limitedLog{LimitedLog: alerts.LimitedLog{Job: alerts.RefOf(job), Attempt: attempt, Limit: limit, At: at}}
	}
	a.mu.Unlock()
	a.wake()
}

// Placed is part of control.Observer; placements raise no alert.
func (a *Alerter) Placed(string, string, int, time.Duration) {}

// AttemptEnded records an attempt's end (control.Observer); job is the job
// after the end was recorded.
func (a *Alerter) AttemptEnded(job domain.Job, at domain.Attempt) {
	a.mu.Lock()
	a.ended = append(a.ended, alerts.EndedOf(job, at))
	delete(a.limited, attemptKey{job.ID, at.Number})
	a.mu.Unlock()
	a.wake()
}

// PreemptionHeld records a job held from preemption (control.Observer):
// preemption_thrash fires for it.
func (a *Alerter) PreemptionHeld(job domain.Job, h domain.PreemptionHold) {
	h.For = slices.Clone(h.For)
	a.mu.Lock()
	a.held[job.ID] = alerts.HeldJob{Job: alerts.RefOf(job), Hold: h}
	a.mu.Unlock()
	a.wake()
}

// PreemptionReleased records that a job's hold ended (control.Observer):
// its preemption_thrash alert resolves.
func (a *Alerter) PreemptionReleased(jobID int64) {
	a.mu.Lock()
	delete(a.held, jobID)
	a.mu.Unlock()
	a.wake()
}

// GrantsExpiring records the running attempts whose compute grant ends
// soon and will preempt them (control.Observer): grant_expiring fires for
// each, and resolves for those no longer listed.
func (a *Alerter) GrantsExpiring(notices []domain.GrantNotice) {
	exp := make([]alerts.ExpiringGrant, len(notices))
	for i, n := range notices {
		exp[i] = alerts.ExpiringGrant{Job: alerts.RefOf(n.Job), Attempt: n.Attempt, Grant: n.Grant.ID, Extra: n.Grant.Extra, Until: n.Grant.Until}
	}
	a.mu.Lock()
	a.expiring, a.expiringSeen = exp, true
	a.mu.Unlock()
	a.wake()
}

// wake asks Run to evaluate soon.
func (a *Alerter) wake() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// Run restores the firing alerts and the undelivered notifications, then
// evaluates the rules every Interval (and soon after an attempt ends) until
// ctx ends.
func (a *Alerter) Run(ctx context.Context) error {
	if err := a.restore(ctx); err != nil {
		a.log.Error("restore alerts", "err", err)
	}
	a.marks = context.WithoutCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = a.disp.Run(ctx) }()
	defer func() { <-done }()
	t := time.NewTicker(a.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-a.kick:
		}
		a.evaluate(ctx)
	}
}

// restore reloads firing alerts into the engine and queues the
// notifications a previous run did not deliver.
func (a *Alerter) restore(ctx context.Context) error {
	firing, err := a.cfg.Store.ListAlerts(ctx, store.AlertFilter{State: domain.AlertFiring, Limit: 100000})
	if err != nil {
		return err
	}
	active := make([]alerts.Alert, 0, len(firing))
	a.mu.Lock()
	for _, f := range firing {
		active = append(active, fromDomain(f))
		a.ids[f.Key] = f.ID
	}
	a.mu.Unlock()
	a.engine.Restore(active)
	// Owed notifications are few (a restart cut their delivery short);
	// a backlog beyond one page waits for the next restart.
	pend, err := a.cfg.Store.PendingNotifications(ctx, 10000)
	if err != nil {
		return err
	}
	for _, n := range pend {
		al := fromDomain(n.Alert)
		al.Status = alerts.Status(n.Status)
		a.disp.SubmitTo(n.Channel, alerts.Transition{Alert: al})
	}
	return nil
}

// evaluate runs the rules once over the latest observations.
func (a *Alerter) evaluate(ctx context.Context) {
	a.mu.Lock()
	if !a.seen {
		a.mu.Unlock()
		return // no pass yet: nothing is known about queued and running jobs
	}
	obs := alerts.Observation{Now: a.cfg.Clock.Now(), QueueKept: true, Running: slices.Clone(a.running), Ended: a.ended,
		Expiring: slices.Clone(a.expiring), ExpiringSeen: a.expiringSeen}
	a.ended = nil
	entered := make([]alerts.QueuedJob, 0, len(a.entered))
	for _, q := range a.entered {
		entered = append(entered, q)
	}
	var left []int64
	for id := range a.left {
		left = append(left, id)
	}
	reset := a.queueReset
	clear(a.entered)
	clear(a.left)
	a.queueReset = false
	for _, h := range a.held {
		obs.Held = append(obs.Held, h)
	}
	var ask []*limitedLog
	for _, g := range a.limited {
		if !g.asked && a.cfg.LogDropped != nil {
			g.asked = true
			ask = append(ask, g)
		}
	}
	a.mu.Unlock()
	// Once per attempt, off the lock: it reads the log's directory.
	for _, g := range ask {
		if d, ok := a.cfg.LogDropped(g.Job.ID, g.Attempt); ok {
			a.mu.Lock()
			g.Dropped = d
			a.mu.Unlock()
		}
	}
	a.mu.Lock()
	for _, g := range a.limited {
		obs.LogLimited = append(obs.LogLimited, g.LimitedLog)
	}
	a.mu.Unlock()
	if reset {
		a.engine.SetQueue(entered)
	} else {
		a.engine.QueueChanged(entered, left)
	}

	if a.cfg.Samples != nil {
		byRef := map[[2]int64]*alerts.Sample{}
		for _, s := range a.cfg.Samples() {
			byRef[[2]int64{s.JobID, int64(s.Attempt)}] = &s.Sample
		}
		for i := range obs.Running {
			r := &obs.Running[i]
			r.Sample = byRef[[2]int64{r.Job.ID, int64(r.Attempt)}]
		}
	}
	running := make(map[int64]bool, len(obs.Running))
	for _, r := range obs.Running {
		running[r.Job.ID] = true
	}
	for _, id := range a.engine.EventJobs() {
		if running[id] || a.engine.Queued(id) {
			continue
		}
		j, err := a.cfg.Store.GetJob(ctx, id)
		if err != nil {
			continue
		}
		switch j.State {
		case domain.JobSucceeded:
			obs.Succeeded = append(obs.Succeeded, id)
		case domain.JobCanceled:
			obs.Canceled = append(obs.Canceled, id)
		}
	}
	obs.Budgets, obs.BudgetsSeen = a.budgetUses(ctx, obs.Now)
	obs.Reports, obs.ReportsSeen = a.weeklyReport(ctx, obs.Now)
	a.runawayFacts(ctx, obs.Now, obs.Running) // runaway.go
	ts := a.engine.Evaluate(obs)
	if len(ts) == 0 {
		return
	}
	records := make([]store.AlertTransition, len(ts))
	loud := ts[:0:0]
	for i, t := range ts {
		records[i] = store.AlertTransition{Alert: toDomain(t.Alert)}
		if !t.Quiet() {
			records[i].Notify = a.channelsFor(t.Severity)
			loud = append(loud, t)
		}
	}
	ts = loud
	stored, err := a.cfg.Store.RecordAlerts(ctx, records)
	if err != nil {
		a.log.Error("store alerts", "err", err)
	}
	a.mu.Lock()
	for _, s := range stored {
		a.ids[s.Key] = s.ID
	}
	a.mu.Unlock()
	a.disp.Submit(ts...)
}

// channelsFor names the channels whose minimum severity admits sev.
func (a *Alerter) channelsFor(sev alerts.Severity) []string {
	var names []string
	for _, r := range a.routes {
		if sev.AtLeast(r.MinSeverity) {
			names = append(names, r.Channel.Name())
		}
	}
	return names
}

// mark records a delivery outcome in the store.
func (a *Alerter) mark(key, channel string, s alerts.Status, r store.NotificationResult) {
	if s == alerts.StatusTest {
		return
	}
	a.mu.Lock()
	id := a.ids[key]
	a.mu.Unlock()
	if id == 0 {
		return
	}
	if err := a.cfg.Store.MarkNotification(a.marks, id, channel, domain.AlertState(s), r); err != nil {
		a.log.Warn("record alert delivery", "alert", key, "channel", channel, "err", err)
	}
}

func toDomain(a alerts.Alert) domain.Alert {
	return domain.Alert{Key: a.Key, Rule: string(a.Rule), Severity: string(a.Severity), State: domain.AlertState(a.Status),
		Summary: a.Summary, Resolution: a.Resolution, JobID: a.Labels.Job, JobName: a.Labels.JobName, Attempt: a.Labels.Attempt,
		Project: a.Labels.Project, Pool: a.Labels.Pool, Owner: a.Labels.Owner, FiredAt: a.FiredAt, ResolvedAt: a.ResolvedAt}
}

func fromDomain(d domain.Alert) alerts.Alert {
	return alerts.Alert{Key: d.Key, Rule: alerts.Rule(d.Rule), Severity: alerts.Severity(d.Severity), Status: alerts.Status(d.State),
		Summary: d.Summary, Resolution: d.Resolution, FiredAt: d.FiredAt, ResolvedAt: d.ResolvedAt,
		Labels: alerts.Labels{Job: d.JobID, JobName: d.JobName, Attempt: d.Attempt, Project: d.Project, Pool: d.Pool, Owner: d.Owner}}
}
