package alerting

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"trainyard/internal/alerts"
	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// DefaultNotifyInterval is how often the notifier looks for job ends and
// notifications to send.
const DefaultNotifyInterval = 2 * time.Second

// NotifyStore is what the job-end notifier reads and writes: the outbox of
// job ends and their notifications (store.Notifications), the jobs, and
// users' defaults.
type NotifyStore interface {
	GetJob(ctx context.Context, id int64) (domain.Job, error)
	GetNotifyPref(ctx context.Context, user string) (domain.NotifyPref, error)
	PendingJobEnds(ctx context.Context, limit int) ([]domain.JobEnd, error)
	ResolveJobEnd(ctx context.Context, jobID int64, notes []domain.JobNotification) error
	ResolveJobEnds(ctx context.Context, rs []domain.JobEndResolution) ([]error, error)
	PendingJobNotifications(ctx context.Context, limit int) ([]domain.JobNotification, error)
	MarkJobNotification(ctx context.Context, id int64, r store.NotificationResult) error
}

var _ NotifyStore = store.Store(nil)

// NotifierConfig wires a Notifier.
type NotifierConfig struct {
	Store NotifyStore
	// Alerts is the server config's alerts section: its channels,
	// delivery bounds and smtp relay.
	Alerts alerts.Config
	// Mailer sends e-mail (NewMailer of Alerts.SMTP); nil: no relay, and
	// notifications to addresses are given up.
	Mailer *Mailer
	// PublicURL is the server's address as users reach it
	// ("https://trainyard.example"); a job's link is PublicURL/jobs/ID.
	// Empty: messages carry no link.
	PublicURL string
	// Cost, when set, formats what a job cost ("12.40 USD"); "" for none.
	Cost   func(ctx context.Context, j domain.Job) string
	Logger *slog.Logger
	Clock  clock.Clock
	// Interval between passes (default DefaultNotifyInterval).
	Interval time.Duration
	// HTTPClient sends webhooks (default: a client without redirects).
	HTTPClient *http.Client
}

// Notifier tells of job ends: it works out whom each job end recorded by
// the store notifies (the job's notify section, else its submitter's
// default), queues one notification per target in the store, and delivers
// them through the configured channels and the SMTP relay, retrying with
// backoff. A notification is sent at least once and, unless a receiver
// took it but answered with an error, once: the store keeps one per job
// and target, and marks each delivery.
type Notifier struct {
	cfg     NotifierConfig
	log     *slog.Logger
	senders map[string]alerts.JobEndSender
	kick    chan struct{}

	mu  sync.Mutex
	due map[int64]time.Time // when a notification that failed may be tried again
}

// NewNotifier validates the alerts configuration and returns a Notifier.
func NewNotifier(cfg NotifierConfig) (*Notifier, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultNotifyInterval
	}
	cfg.Alerts.Defaults()
	if err := cfg.Alerts.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "notify")
	routes, err := alerts.NewRoutes(cfg.Alerts, log, cfg.HTTPClient)
	if err != nil {
		return nil, err
	}
	n := &Notifier{cfg: cfg, log: log, senders: map[string]alerts.JobEndSender{}, kick: make(chan struct{}, 1), due: map[int64]time.Time{}}
	for _, r := range routes {
		if s, ok := r.Channel.(alerts.JobEndSender); ok {
			n.senders[r.Channel.Name()] = s
		}
	}
	return n, nil
}

// Channels names the channels a job may notify, sorted.
func (n *Notifier) Channels() []string {
	out := make([]string, 0, len(n.senders))
	for name := range n.senders {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// Email reports whether an SMTP relay is configured.
func (n *Notifier) Email() bool { return n.cfg.Mailer != nil }

// Wake asks Run for a pass soon.
func (n *Notifier) Wake() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// Run makes a pass every Interval (and soon after Wake) until ctx ends.
func (n *Notifier) Run(ctx context.Context) error {
	t := time.NewTicker(n.cfg.Interval)
	defer t.Stop()
	for {
		n.Pass(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-n.kick:
		}
	}
}

// Pass resolves the pending job ends into notifications, then sends those
// due. It logs what fails and leaves it for the next pass.
func (n *Notifier) Pass(ctx context.Context) {
	if err := n.resolve(ctx); err != nil && ctx.Err() == nil {
		n.log.Error("work out job-end notifications", "err", err)
	}
	if err := n.deliver(ctx); err != nil && ctx.Err() == nil {
		n.log.Error("send job-end notifications", "err", err)
	}
}

// batch bounds the rows one pass reads of each kind.
const batch = 200

// resolve queues the notifications each pending job end owes, all of a
// pass's ends in one write, reading each submitter's default once.
func (n *Notifier) resolve(ctx context.Context) error {
	ends, err := n.cfg.Store.PendingJobEnds(ctx, batch)
	if err != nil || len(ends) == 0 {
		return err
	}
	prefs := map[string]*domain.Notify{} // a submitter's default; nil: none
	rs := make([]domain.JobEndResolution, 0, len(ends))
	for _, e := range ends {
		notes, err := n.notesFor(ctx, e, prefs)
		if err != nil {
			n.log.Warn("work out job-end notifications", "job", e.JobID, "err", err)
			continue
		}
		rs = append(rs, domain.JobEndResolution{JobID: e.JobID, Notes: notes})
	}
	errs, err := n.cfg.Store.ResolveJobEnds(ctx, rs)
	if err != nil {
		return fmt.Errorf("resolve %d job ends: %w", len(rs), err)
	}
	for i, err := range errs {
		if err == nil {
			continue
		}
		id := rs[i].JobID
		if !errors.Is(err, domain.ErrInvalid) {
			return fmt.Errorf("job %d: %w", id, err)
		}
		// A target the store refuses would hold the end forever: drop
		// it, loudly, and let the others through.
		n.log.Error("job-end notifications refused by the store; none is sent for this end", "job", id, "err", err)
		if err := n.cfg.Store.ResolveJobEnd(ctx, id, nil); err != nil {
			return fmt.Errorf("job %d: %w", id, err)
		}
	}
	return nil
}

// notesFor returns the notifications a job end owes: per the job's notify
// section, else its submitter's default (read once a pass into prefs).
func (n *Notifier) notesFor(ctx context.Context, e domain.JobEnd, prefs map[string]*domain.Notify) ([]domain.JobNotification, error) {
	want := e.Notify
	if want == nil && e.Sweep {
		return nil, nil // a sweep's members would flood the default's targets
	}
	if want == nil {
		pref, ok := prefs[e.Submitter]
		if !ok {
			p, err := n.cfg.Store.GetNotifyPref(ctx, e.Submitter)
			switch {
			case errors.Is(err, domain.ErrNotFound):
			case err != nil:
				return nil, err
			default:
				pref = &p.Notify
			}
			prefs[e.Submitter] = pref
		}
		if want = pref; want == nil {
			return nil, nil
		}
	}
	if !want.Wants(e.State) {
		return nil, nil
	}
	now := n.cfg.Clock.Now()
	var notes []domain.JobNotification
	for _, t := range want.Targets() {
		notes = append(notes, domain.JobNotification{JobID: e.JobID, State: e.State, Target: t, CreatedAt: now})
	}
	return notes, nil
}

// deliver sends the pending notifications that are due, each target's in
// its own goroutine, so that a slow channel delays no other.
func (n *Notifier) deliver(ctx context.Context) error {
	pend, err := n.cfg.Store.PendingJobNotifications(ctx, batch)
	if err != nil {
		return err
	}
	now := n.cfg.Clock.Now()
	byTarget := map[string][]domain.JobNotification{}
	var order []string
	n.mu.Lock()
	for _, p := range pend {
		if d, ok := n.due[p.ID]; ok && d.After(now) {
			continue
		}
		key := p.Target
		if strings.HasPrefix(key, domain.NotifyEmailPrefix) {
			key = domain.NotifyEmailPrefix // one relay
		}
		if _, ok := byTarget[key]; !ok {
			order = append(order, key)
		}
		byTarget[key] = append(byTarget[key], p)
	}
	n.mu.Unlock()
	jobs := &jobCache{st: n.cfg.Store, jobs: map[int64]domain.Job{}}
	var wg sync.WaitGroup
	for _, key := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, p := range byTarget[key] {
				if ctx.Err() != nil {
					return
				}
				n.send(ctx, jobs, p)
			}
		}()
	}
	wg.Wait()
	return nil
}

// send delivers one notification and records the outcome.
func (n *Notifier) send(ctx context.Context, jobs *jobCache, p domain.JobNotification) {
	job, err := jobs.get(ctx, p.JobID)
	switch {
	case err == nil:
		err = n.sendTo(ctx, p, n.jobEnd(ctx, job, p.State))
	case errors.Is(err, domain.ErrNotFound):
		err = &permanentError{fmt.Sprintf("job %d no longer exists", p.JobID)}
	default:
		// The store, not the receiver, failed: try again next pass.
		n.log.Warn("read the job of a notification", "job", p.JobID, "target", p.Target, "err", err)
		return
	}
	now := n.cfg.Clock.Now()
	res := store.NotificationResult{At: now, Sent: err == nil}
	var permanent *permanentError
	if err != nil {
		if ctx.Err() != nil {
			return // shutting down: not the receiver's fault
		}
		del := n.cfg.Alerts.Delivery
		tries := p.Tries + 1
		res.Error = err.Error()
		res.GiveUp = errors.As(err, &permanent) || tries >= del.MaxTries || now.Sub(p.CreatedAt) > del.MaxAge.D()
		if res.GiveUp {
			n.log.Error("job-end notification dropped", "job", p.JobID, "target", p.Target, "tries", tries, "err", err)
		} else {
			wait := alerts.Backoff(tries, del.Backoff.D(), del.MaxBackoff.D())
			n.mu.Lock()
			n.due[p.ID] = now.Add(wait)
			n.mu.Unlock()
			n.log.Warn("job-end notification failed; will retry", "job", p.JobID, "target", p.Target, "tries", tries, "retry_in", wait, "err", err)
		}
	}
	if res.Sent || res.GiveUp {
		n.mu.Lock()
		delete(n.due, p.ID)
		n.mu.Unlock()
	}
	// Recorded even while shutting down: a delivery not recorded is sent
	// again by the next pass.
	if err := n.cfg.Store.MarkJobNotification(context.WithoutCancel(ctx), p.ID, res); err != nil {
		n.log.Warn("record job-end notification", "id", p.ID, "job", p.JobID, "target", p.Target, "err", err)
	}
}

// permanentError marks a notification that no retry can deliver.
type permanentError struct{ msg string }

func (e *permanentError) Error() string { return e.msg }

// sendTo hands e to p's target.
func (n *Notifier) sendTo(ctx context.Context, p domain.JobNotification, e alerts.JobEnd) error {
	kind, name, ok := domain.SplitNotifyTarget(p.Target)
	switch {
	case !ok:
		return &permanentError{fmt.Sprintf("target %q is neither channel:NAME nor email:ADDRESS", p.Target)}
	case kind == "email":
		if n.cfg.Mailer == nil {
			return &permanentError{fmt.Sprintf("cannot e-mail %s: the server has no mail relay; an admin sets alerts.smtp in the server config", name)}
		}
		return n.cfg.Mailer.Send(ctx, Mail{To: name, Subject: e.Subject(), Body: e.Text(), ID: "notification." + strconv.FormatInt(p.ID, 10)})
	default:
		s, ok := n.senders[name]
		if !ok {
			return &permanentError{fmt.Sprintf("no channel named %q is configured (any more); configured channels: %s", name, strings.Join(n.Channels(), ", "))}
		}
		return s.SendJobEnd(ctx, e)
	}
}

// jobEnd describes the end of job in state.
func (n *Notifier) jobEnd(ctx context.Context, j domain.Job, state domain.JobState) alerts.JobEnd {
	e := alerts.JobEnd{Job: j.ID, Name: j.Name, Project: j.Project, Pool: j.Pool, Owner: j.Submitter, State: string(state),
		Reason: string(j.Reason), Message: j.Message, Attempts: j.Attempts, EndedAt: j.FinishedAt}
	if !j.StartedAt.IsZero() && j.FinishedAt.After(j.StartedAt) {
		e.RunTime = j.FinishedAt.Sub(j.StartedAt)
	}
	if n.cfg.PublicURL != "" {
		e.URL = strings.TrimRight(n.cfg.PublicURL, "/") + "/jobs/" + strconv.FormatInt(j.ID, 10)
	}
	if n.cfg.Cost != nil {
		e.Cost = n.cfg.Cost(ctx, j)
	}
	return e
}

// jobCache reads each job of a pass once.
type jobCache struct {
	st   NotifyStore
	mu   sync.Mutex
	jobs map[int64]domain.Job
}

func (c *jobCache) get(ctx context.Context, id int64) (domain.Job, error) {
	c.mu.Lock()
	j, ok := c.jobs[id]
	c.mu.Unlock()
	if ok {
		return j, nil
	}
	j, err := c.st.GetJob(ctx, id)
	if err != nil {
		return j, err
	}
	c.mu.Lock()
	c.jobs[id] = j
	c.mu.Unlock()
	return j, nil
}
