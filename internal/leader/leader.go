// Package leader runs leadership terms over a store's leases
// (store.Leases): a replica campaigns until it acquires the lease, renews it
// about every second, and stops acting — Term.Lost closes — before the lease
// can expire in the store, so a replica that froze, lost the database or
// was deposed has stopped before another takes over.
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"trainyard/internal/store"
)

// Defaults of Config.
const (
	DefaultTTL        = 10 * time.Second
	DefaultRenewEvery = time.Second
)

// Clock is the local time source of the terms: its Now must be monotonic
// (time.Now's reading is), so a changed wall clock moves no deadline.
type Clock interface {
	Now() time.Time
	// After sends on the returned channel once d has passed.
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Config configures Lead.
type Config struct {
	Leases  store.Leases
	Replica string
	// TTL is how long a lease lasts after each renewal, by the store's
	// clock: a frozen or cut-off leader is replaced within about TTL.
	// Default DefaultTTL.
	TTL time.Duration
	// RenewEvery is how often the leader renews, and how often a follower
	// tries to acquire. Default DefaultRenewEvery, at most TTL/4.
	RenewEvery time.Duration
	// Margin is how long before its lease could expire in the store that a
	// leader that has not renewed stops acting, measured on its own clock
	// from the moment it sent its last successful renewal. Default TTL/5,
	// at least RenewEvery.
	Margin time.Duration
	Clock  Clock        // default: the system's monotonic clock
	Logger *slog.Logger // default: slog.Default()
}

func (c *Config) defaults() error {
	if c.Leases == nil || c.Replica == "" {
		return errors.New("leader: Config needs Leases and Replica")
	}
	if c.TTL <= 0 {
		c.TTL = DefaultTTL
	}
	if c.RenewEvery <= 0 {
		c.RenewEvery = DefaultRenewEvery
	}
	c.RenewEvery = min(c.RenewEvery, c.TTL/4)
	if c.Margin <= 0 {
		c.Margin = max(c.TTL/5, c.RenewEvery)
	}
	if c.Margin >= c.TTL-c.RenewEvery {
		return fmt.Errorf("leader lease: a margin of %s leaves no time to renew within a TTL of %s; lengthen the TTL", c.Margin, c.TTL)
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Term is one leader's time in office.
type Term struct {
	// Epoch increases with every new term: the fencing token that
	// store.WithFence attaches to the leader's writes.
	Epoch int64
	// Lost is closed when the term is over: its lease could not be renewed
	// in time, another term started, or End was called.
	Lost <-chan struct{}

	cfg  Config
	lost chan struct{}
	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex
	deadline time.Time // stop acting at this local instant unless renewed
	ended    bool
	why      error
}

// Lead campaigns for replica until it holds the lease, or ctx ends. The
// term it returns lasts until Lost closes; End gives it up. ctx bounds the
// campaign only.
func Lead(ctx context.Context, cfg Config) (*Term, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		sent := cfg.Clock.Now()
		epoch, ok, err := cfg.Leases.AcquireLease(ctx, cfg.Replica, cfg.TTL)
		if err != nil && ctx.Err() == nil {
			cfg.Logger.Warn("campaign for leadership: acquire the lease; trying again", "err", err)
		}
		if err == nil && ok {
			t := &Term{Epoch: epoch, cfg: cfg, lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
				deadline: sent.Add(cfg.TTL - cfg.Margin)}
			t.Lost = t.lost
			go t.run()
			return t, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-cfg.Clock.After(cfg.RenewEvery):
		}
	}
}

// Check reports nil while the term may act: its lease was renewed recently
// enough, by this replica's clock, that it cannot have expired in the
// store. Otherwise an error wrapping store.ErrConflict says why not.
func (t *Term) Check() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.why == nil && !t.cfg.Clock.Now().Before(t.deadline) {
		t.lose(fmt.Errorf("leader term %d: its lease was last renewed more than %s ago (the store was unreachable or this process was paused); another replica may lead now: %w",
			t.Epoch, t.cfg.TTL-t.cfg.Margin, store.ErrConflict))
	}
	return t.why
}

// End gives the term up: it stops renewing, closes Lost and releases the
// lease, so another replica can take over at once. Call it once the
// leader's loops have stopped writing.
func (t *Term) End(ctx context.Context) {
	t.mu.Lock()
	if !t.ended {
		t.ended = true
		close(t.stop)
	}
	t.mu.Unlock()
	<-t.done
	if err := t.cfg.Leases.ReleaseLease(ctx, t.cfg.Replica, t.Epoch); err != nil {
		t.cfg.Logger.Warn("release the leader lease; another replica takes over when it expires", "term", t.Epoch, "err", err)
	}
}

// Err says why the term is over; nil while it lasts.
func (t *Term) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.why
}

// lose ends the term with why; t.mu is held.
func (t *Term) lose(why error) {
	if t.why == nil {
		t.why = why
		close(t.lost)
	}
}

// run renews the lease every RenewEvery until the term is over.
func (t *Term) run() {
	defer close(t.done)
	c := t.cfg
	for {
		t.mu.Lock()
		left := t.deadline.Sub(c.Clock.Now())
		over := t.why != nil
		t.mu.Unlock()
		if over || t.Check() != nil {
			return
		}
		select {
		case <-t.stop:
			t.mu.Lock()
			t.lose(fmt.Errorf("leader term %d ended: this replica gave it up: %w", t.Epoch, store.ErrConflict))
			t.mu.Unlock()
			return
		case <-c.Clock.After(min(c.RenewEvery, left)):
		}
		if t.Check() != nil {
			return
		}
		t.renew()
	}
}

// renew renews the lease once, giving up by the term's deadline.
func (t *Term) renew() {
	c := t.cfg
	sent := c.Clock.Now()
	t.mu.Lock()
	left := t.deadline.Sub(sent)
	t.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), left)
	defer cancel()
	go func() { // End interrupts a renewal that hangs
		select {
		case <-t.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := c.Leases.RenewLease(ctx, c.Replica, t.Epoch, c.TTL)
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case err == nil:
		// The store's expiry is at least TTL after sent; stop acting
		// Margin before that, by this clock.
		if d := sent.Add(c.TTL - c.Margin); d.After(t.deadline) {
			t.deadline = d
		}
	case errors.Is(err, store.ErrConflict):
		t.lose(fmt.Errorf("leader term %d is over: %w", t.Epoch, err))
	default:
		c.Logger.Warn("renew the leader lease; trying again", "term", t.Epoch, "err", err,
			"acting_for_at_most", t.deadline.Sub(c.Clock.Now()).Round(time.Millisecond))
	}
}
