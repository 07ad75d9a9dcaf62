package leader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"trainyard/internal/store"
)

// fakeClock is a manually advanced clock whose After channels fire when
// Advance passes their time.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeTimer
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, fakeTimer{at: c.now.Add(d), ch: ch})
	return ch
}

func (c *fakeClock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
		} else {
			w.ch <- c.now
		}
	}
	c.waiters = kept
}

// fakeLeases is a lease store whose clock is the fake clock. A replica
// marked down gets errors, as if its database connection were cut or the
// process paused.
type fakeLeases struct {
	clk *fakeClock

	mu      sync.Mutex
	replica string
	epoch   int64
	expires time.Time
	down    map[string]bool
	renews  int
	// onGrant runs (with mu held) when a lease is granted.
	onGrant func(replica string, epoch int64)
}

func (f *fakeLeases) AcquireLease(_ context.Context, replica string, ttl time.Duration) (int64, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down[replica] {
		return 0, false, errors.New("connection refused")
	}
	now := f.clk.Now()
	if f.replica != "" && now.Before(f.expires) {
		return 0, false, nil
	}
	f.epoch++
	f.replica, f.expires = replica, now.Add(ttl)
	if f.onGrant != nil {
		f.onGrant(replica, f.epoch)
	}
	return f.epoch, true, nil
}

func (f *fakeLeases) RenewLease(_ context.Context, replica string, epoch int64, ttl time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down[replica] {
		return errors.New("connection refused")
	}
	if f.replica != replica || f.epoch != epoch || !f.clk.Now().Before(f.expires) {
		return fmt.Errorf("term %d is over: %w", epoch, store.ErrConflict)
	}
	f.renews++
	f.expires = f.clk.Now().Add(ttl)
	return nil
}

func (f *fakeLeases) ReleaseLease(_ context.Context, replica string, epoch int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.replica == replica && f.epoch == epoch {
		f.expires = f.clk.Now()
	}
	return nil
}

func (f *fakeLeases) Leader(context.Context) (string, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.replica == "" || !f.clk.Now().Before(f.expires) {
		return "", 0, nil
	}
	return f.replica, f.epoch, nil
}

func (f *fakeLeases) setDown(replica string, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down == nil {
		f.down = map[string]bool{}
	}
	f.down[replica] = down
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// settle waits (really, with a deadline) until want() timers wait on the
// fake clock, so an Advance finds every goroutine asleep.
func settle(t *testing.T, clk *fakeClock, want func() int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for clk.pending() != want() {
		if time.Now().After(deadline) {
			t.Fatalf("%d timers wait on the fake clock, want %d", clk.pending(), want())
		}
		time.Sleep(time.Millisecond)
	}
}

func config(l store.Leases, clk *fakeClock, replica string) Config {
	return Config{Leases: l, Replica: replica, TTL: 10 * time.Second, RenewEvery: time.Second, Margin: 2 * time.Second,
		Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// lead campaigns in the background; the term arrives on the channel.
func lead(ctx context.Context, cfg Config) <-chan *Term {
	got := make(chan *Term, 1)
	go func() {
		term, err := Lead(ctx, cfg)
		if err != nil {
			close(got)
			return
		}
		got <- term
	}()
	return got
}

// A leader that renews keeps its term however long it lasts; a follower
// campaigning meanwhile never gets the lease.
func TestLeaseRenewedKeepsTerm(t *testing.T) {
	clk := newFakeClock()
	leases := &fakeLeases{clk: clk}
	ctx := context.Background()
	a, err := Lead(ctx, config(leases, clk, "a"))
	if err != nil || a.Epoch != 1 {
		t.Fatalf("Lead = %+v, %v; want term 1", a, err)
	}
	bctx, stopB := context.WithCancel(ctx)
	defer stopB()
	bTerm := lead(bctx, config(leases, clk, "b"))
	for range 300 { // 30 s: three TTLs
		settle(t, clk, func() int { return 2 })
		clk.Advance(100 * time.Millisecond)
	}
	if closed(a.Lost) || a.Check() != nil {
		t.Fatalf("a lost its renewed term: %v", a.Err())
	}
	if leases.renews < 25 {
		t.Errorf("%d renewals in 30 s, want about one a second", leases.renews)
	}
	if name, epoch, _ := leases.Leader(ctx); name != "a" || epoch != 1 {
		t.Errorf("Leader = %s %d; want a, term 1", name, epoch)
	}
	select {
	case b := <-bTerm:
		t.Fatalf("b led (term %+v) while a renewed", b)
	default:
	}
}

// A leader that cannot renew stops acting (Check fails, Lost closes)
// before its lease expires in the store; the follower takes over within
// the TTL of the last renewal, with a higher epoch.
func TestLeaseExpiryStopsLeaderBeforeTakeover(t *testing.T) {
	clk := newFakeClock()
	leases := &fakeLeases{clk: clk}
	ctx := context.Background()
	a, err := Lead(ctx, config(leases, clk, "a"))
	if err != nil {
		t.Fatal(err)
	}
	var grantedAt time.Time
	var aLostAtGrant bool
	leases.onGrant = func(replica string, epoch int64) {
		grantedAt, aLostAtGrant = clk.Now(), closed(a.Lost) && a.Check() != nil
	}
	bctx, stopB := context.WithCancel(ctx)
	defer stopB()
	bTerm := lead(bctx, config(leases, clk, "b"))
	for range 30 {
		settle(t, clk, func() int { return 2 })
		clk.Advance(100 * time.Millisecond)
	}
	settle(t, clk, func() int { return 2 })
	leases.setDown("a", true) // a's renewals fail from now on
	leases.mu.Lock()
	lastRenewal := leases.expires.Add(-10 * time.Second)
	leases.mu.Unlock()

	var aLostAt time.Time
	var b *Term
	for b == nil {
		if clk.Now().Sub(lastRenewal) > 15*time.Second {
			t.Fatalf("b did not lead within 15 s of a's last renewal")
		}
		aAlive := !closed(a.Lost)
		settle(t, clk, func() int {
			if aAlive = !closed(a.Lost); aAlive {
				return 2
			}
			return 1
		})
		if !aAlive && aLostAt.IsZero() {
			aLostAt = clk.Now()
		}
		clk.Advance(100 * time.Millisecond)
		select {
		case b = <-bTerm:
		case <-time.After(20 * time.Millisecond): // b may still be campaigning
		}
	}
	if !aLostAtGrant {
		t.Fatal("b was granted the lease while a still acted")
	}
	if aLostAt.IsZero() || !aLostAt.Before(grantedAt) {
		t.Fatalf("a stopped at %v, b took over at %v; want a to stop first", aLostAt, grantedAt)
	}
	if stopped := aLostAt.Sub(lastRenewal); stopped > 8*time.Second+100*time.Millisecond {
		t.Errorf("a stopped %v after its last renewal; want by TTL minus margin (8 s)", stopped)
	}
	if took := grantedAt.Sub(lastRenewal); took > 11*time.Second {
		t.Errorf("b took over %v after a's last renewal; want within the TTL and a campaign interval", took)
	}
	if b.Epoch <= a.Epoch {
		t.Errorf("b's epoch %d after a's %d; want it higher", b.Epoch, a.Epoch)
	}
	if err := a.Check(); !errors.Is(err, store.ErrConflict) {
		t.Errorf("a.Check() = %v; want ErrConflict", err)
	}
	// Back online, a's renewals are refused: its term stays over.
	leases.setDown("a", false)
	if err := leases.RenewLease(ctx, "a", a.Epoch, 10*time.Second); !errors.Is(err, store.ErrConflict) {
		t.Errorf("renewing a's old term: %v; want ErrConflict", err)
	}
	if name, epoch, _ := leases.Leader(ctx); name != "b" || epoch != b.Epoch {
		t.Errorf("Leader = %s %d; want b, term %d", name, epoch, b.Epoch)
	}
}

// A leader whose term another took over (its renewal refused) stops at
// once; Check says so.
func TestLeaseDeposedStopsAtOnce(t *testing.T) {
	clk := newFakeClock()
	leases := &fakeLeases{clk: clk}
	a, err := Lead(context.Background(), config(leases, clk, "a"))
	if err != nil {
		t.Fatal(err)
	}
	settle(t, clk, func() int { return 1 })
	leases.mu.Lock()
	leases.replica, leases.epoch = "b", leases.epoch+1 // b took over
	leases.mu.Unlock()
	clk.Advance(time.Second)
	select {
	case <-a.Lost:
	case <-time.After(5 * time.Second):
		t.Fatal("a's Lost stayed open after its renewal was refused")
	}
	if err := a.Check(); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a.Check() = %v; want ErrConflict", err)
	}
}

// Ending a term releases the lease: the next replica leads at once, with
// the next epoch.
func TestLeaseEndHandsOverAtOnce(t *testing.T) {
	clk := newFakeClock()
	leases := &fakeLeases{clk: clk}
	ctx := context.Background()
	a, err := Lead(ctx, config(leases, clk, "a"))
	if err != nil {
		t.Fatal(err)
	}
	a.End(ctx)
	if !closed(a.Lost) || a.Check() == nil {
		t.Fatal("an ended term still acts")
	}
	b, err := Lead(ctx, config(leases, clk, "b")) // no clock advance: no wait
	if err != nil || b.Epoch != a.Epoch+1 {
		t.Fatalf("Lead after End = %+v, %v; want term %d at once", b, err, a.Epoch+1)
	}
	b.End(ctx)
}

// A margin that leaves no time to renew is refused with advice.
func TestLeaseConfigRejectsNoRoomToRenew(t *testing.T) {
	cfg := config(&fakeLeases{clk: newFakeClock()}, newFakeClock(), "a")
	cfg.TTL, cfg.Margin = 4*time.Second, 3500*time.Millisecond
	if _, err := Lead(context.Background(), cfg); err == nil {
		t.Fatal("Lead accepted a margin that leaves no time to renew")
	}
}
