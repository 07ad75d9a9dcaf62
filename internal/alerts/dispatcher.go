package alerts

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// DispatcherOptions configures a Dispatcher: Now, Delivery and the
// callbacks; After exists for tests.
type DispatcherOptions struct {
	// Delivery bounds retries; zero fields take their defaults.
	Delivery DeliveryConfig
	// OnDelivered is called after a channel accepted a notification, with
	// the alert key, the channel name and the status sent (firing or
	// resolved). The caller persists it. Called from the Run goroutines, one
	// per channel, so it must be safe for concurrent use.
	OnDelivered func(alertKey, channel string, status Status)
	// OnGaveUp is called when a notification is dropped after
	// Delivery.MaxTries failed sends or Delivery.MaxAge; err is the last
	// error. The dispatcher also logs it at Error.
	OnGaveUp func(alertKey, channel string, status Status, err error)
	// Skip, when set, is asked before each send whether a notification is
	// no longer wanted (its alert was acknowledged); one it skips is
	// dropped without a report. Called from the Run goroutines.
	Skip func(alertKey string, status Status) bool
	// Logger receives retries (Warn) and give-ups (Error); nil: slog.Default().
	Logger *slog.Logger
	// Now reads the clock (required: the package reads none of its own;
	// the server passes its clock's Now).
	Now func() time.Time
	// After waits like time.After (the default).
	After func(time.Duration) <-chan time.Time
}

// Dispatcher sends transitions to every channel whose min_severity admits
// them, retrying failures with exponential backoff. Each channel has its own
// queue and goroutine (in Run), so a slow channel delays no other. Per channel
// and alert key, notifications go out in the order submitted: a resolution is
// never sent before its firing.
//
// Delivery is at least once: a notification whose send failed is sent again,
// so a receiver that got it but answered with an error sees it twice. Queued
// notifications live in memory only; after a restart, submit again the
// transitions whose delivery the caller has not recorded.
type Dispatcher struct {
	routes []*queue
	opts   DispatcherOptions
	log    *slog.Logger
}

type queue struct {
	route Route
	wake  chan struct{}
	mu    sync.Mutex
	items []*pending
}

type pending struct {
	n        Notification
	received time.Time
	due      time.Time
	tries    int
}

// NewDispatcher returns a dispatcher over routes. Nothing is sent until Run.
// It panics when opts.Now is nil.
func NewDispatcher(routes []Route, opts DispatcherOptions) *Dispatcher {
	if opts.Now == nil {
		panic("alerts: DispatcherOptions.Now is required")
	}
	d := &opts.Delivery
	if d.MaxTries <= 0 {
		d.MaxTries = DefaultMaxTries
	}
	setDur(&d.MaxAge, DefaultMaxAge)
	setDur(&d.Backoff, DefaultBackoff)
	setDur(&d.MaxBackoff, DefaultMaxBackoff)
	if opts.After == nil {
		opts.After = time.After
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	disp := &Dispatcher{opts: opts, log: log}
	for _, r := range routes {
		disp.routes = append(disp.routes, &queue{route: r, wake: make(chan struct{}, 1)})
	}
	return disp
}

// Channels returns the channel names in config order.
func (d *Dispatcher) Channels() []string {
	names := make([]string, len(d.routes))
	for i, q := range d.routes {
		names[i] = q.route.Channel.Name()
	}
	return names
}

// Submit queues transitions for every channel that admits their severity. It
// never blocks and may be called before Run and from any goroutine.
func (d *Dispatcher) Submit(ts ...Transition) { d.submit("", ts) }

// SubmitTo queues transitions for one channel only, whatever its minimum
// severity: a notification owed to that channel since before a restart.
// An unknown channel is ignored.
func (d *Dispatcher) SubmitTo(channel string, ts ...Transition) { d.submit(channel, ts) }

func (d *Dispatcher) submit(only string, ts []Transition) {
	now := d.opts.Now()
	for _, q := range d.routes {
		if only != "" && q.route.Channel.Name() != only {
			continue
		}
		added := false
		q.mu.Lock()
		for _, t := range ts {
			if only != "" || t.Severity.AtLeast(q.route.MinSeverity) {
				q.items = append(q.items, &pending{n: Notification(t), received: now, due: now})
				added = true
			}
		}
		q.mu.Unlock()
		if added {
			select {
			case q.wake <- struct{}{}:
			default:
			}
		}
	}
}

// Pending returns how many notifications wait to be sent, over all channels.
func (d *Dispatcher) Pending() int {
	n := 0
	for _, q := range d.routes {
		q.mu.Lock()
		n += len(q.items)
		q.mu.Unlock()
	}
	return n
}

// Run sends queued notifications until ctx is done, then returns ctx's error.
// Call it once, in its own goroutine.
func (d *Dispatcher) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, q := range d.routes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.work(ctx, q)
		}()
	}
	wg.Wait()
	return ctx.Err()
}

func (d *Dispatcher) work(ctx context.Context, q *queue) {
	for ctx.Err() == nil {
		p, wait := q.next(d.opts.Now())
		if p != nil {
			d.try(ctx, q, p)
			continue
		}
		var timer <-chan time.Time
		if wait > 0 {
			timer = d.opts.After(wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		case <-timer:
		}
	}
}

// next returns the first due notification whose key has no earlier one
// pending, or else how long until one may be due (0: none queued).
func (q *queue) next(now time.Time) (*pending, time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	blocked := map[string]bool{}
	var wait time.Duration
	for _, p := range q.items {
		if blocked[p.n.Key] {
			continue
		}
		blocked[p.n.Key] = true
		if !p.due.After(now) {
			return p, 0
		}
		if w := p.due.Sub(now); wait == 0 || w < wait {
			wait = w
		}
	}
	return nil, wait
}

// Drop removes the firing notifications of key still queued (retries
// included) from every channel: its alert was acknowledged, so nobody is
// to be told of it again. Its resolution, submitted later, is sent.
func (d *Dispatcher) Drop(key string) {
	for _, q := range d.routes {
		q.mu.Lock()
		q.items = slices.DeleteFunc(q.items, func(p *pending) bool { return p.n.Key == key && p.n.Status == StatusFiring })
		q.mu.Unlock()
	}
}

func (q *queue) remove(p *pending) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.items = slices.DeleteFunc(q.items, func(x *pending) bool { return x == p })
}

func (d *Dispatcher) try(ctx context.Context, q *queue, p *pending) {
	name := q.route.Channel.Name()
	if d.opts.Skip != nil && d.opts.Skip(p.n.Key, p.n.Status) {
		q.remove(p)
		d.log.Info("alert notification dropped: the alert was acknowledged", "channel", name, "key", p.n.Key, "status", p.n.Status)
		return
	}
	err := q.route.Channel.Send(ctx, p.n)
	if err == nil {
		// Recorded even while shutting down: a delivery that is not
		// recorded is sent again after the restart.
		q.remove(p)
		if d.opts.OnDelivered != nil {
			d.opts.OnDelivered(p.n.Key, name, p.n.Status)
		}
		return
	}
	if ctx.Err() != nil {
		return // shutting down: not the channel's fault
	}
	p.tries++
	now := d.opts.Now()
	del := d.opts.Delivery
	next := now.Add(Backoff(p.tries, del.Backoff.D(), del.MaxBackoff.D()))
	if p.tries >= del.MaxTries || next.Sub(p.received) > del.MaxAge.D() {
		q.remove(p)
		d.log.Error("alert notification dropped", "channel", name, "key", p.n.Key, "status", p.n.Status,
			"tries", p.tries, "err", err)
		if d.opts.OnGaveUp != nil {
			d.opts.OnGaveUp(p.n.Key, name, p.n.Status,
				fmt.Errorf("gave up on %s notification of %s to channel %q after %d tries over %s: %w",
					p.n.Status, p.n.Key, name, p.tries, fmtDur(now.Sub(p.received)), err))
		}
		return
	}
	q.mu.Lock()
	p.due = next
	q.mu.Unlock()
	d.log.Warn("alert notification failed; will retry", "channel", name, "key", p.n.Key, "status", p.n.Status,
		"tries", p.tries, "retry_in", fmtDur(next.Sub(now)), "err", err)
}

// Backoff is the wait after the n-th failed try (n ≥ 1): base·2^(n−1),
// at most max.
func Backoff(n int, base, max time.Duration) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// Test sends a test notification to the named channel once, ignoring its
// min_severity, and returns the channel's error. It needs no Run.
func (d *Dispatcher) Test(ctx context.Context, channel string) error {
	for _, q := range d.routes {
		if q.route.Channel.Name() == channel {
			return q.route.Channel.Send(ctx, testNotification(channel, d.opts.Now()))
		}
	}
	names := d.Channels()
	if len(names) == 0 {
		return fmt.Errorf("no alert channel named %q: none is configured; add one under alerts.channels in the server config", channel)
	}
	return fmt.Errorf("no alert channel named %q; known channels: %s", channel, strings.Join(names, ", "))
}
