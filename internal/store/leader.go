package store

import (
	"context"
	"time"
)

// Leases elect one leader among server replicas that share a store: the
// leader runs the control, alert and retention loops; every replica serves
// the API. Leadership is a lease with an epoch, timed by the store's own
// clock (so the replicas' clocks do not matter): the leader renews it, and
// when it stops renewing — it died, froze or lost the database — another
// replica takes over once the lease has expired. internal/leader runs the
// terms. A backend that only one process can open (SQLite) needs none: that
// process leads.
type Leases interface {
	// AcquireLease starts a new term for replica when no live lease is
	// held (none yet, expired or released): its epoch is one more than the
	// last term's and its lease lasts ttl from the store's now. ok is
	// false, with no error, while another term's lease is live.
	AcquireLease(ctx context.Context, replica string, ttl time.Duration) (epoch int64, ok bool, err error)
	// RenewLease extends term epoch's lease to ttl from the store's now.
	// It fails with ErrConflict when that term is over (its lease expired
	// and another term started, or it was released).
	RenewLease(ctx context.Context, replica string, epoch int64, ttl time.Duration) error
	// ReleaseLease ends term epoch's lease now, so another replica can take
	// over at once; a term already over is left alone.
	ReleaseLease(ctx context.Context, replica string, epoch int64) error
	// Leader names the replica whose lease is live now and its term's
	// epoch; an empty name when none is.
	Leader(ctx context.Context) (replica string, epoch int64, err error)
}

type fenceKey struct{}

// WithFence marks the writes made with the returned context as term epoch's:
// a store with Leases checks, in each write's own transaction, that epoch is
// the current term and its lease is live, and otherwise fails the write
// with an error wrapping ErrConflict, changing nothing. The leader's loops
// write with such a context, so a deposed leader cannot commit.
func WithFence(ctx context.Context, epoch int64) context.Context {
	return context.WithValue(ctx, fenceKey{}, epoch)
}

// FenceFrom returns the term epoch WithFence attached to ctx.
func FenceFrom(ctx context.Context) (epoch int64, ok bool) {
	epoch, ok = ctx.Value(fenceKey{}).(int64)
	return epoch, ok
}

// Signals carry "something changed" between replicas sharing a store: a
// submit on a follower wakes the leader's control loop at once ("wake"), a
// revoked token or a changed quota reaches every replica's caches ("auth",
// "sched").
type Signals interface {
	// Signal tells every replica listening (this one too) about topic.
	Signal(ctx context.Context, topic string) error
	// ListenSignals calls fn with each topic signalled until ctx ends; it
	// returns when the listening connection fails, so the caller can fall
	// back on polling and listen again.
	ListenSignals(ctx context.Context, fn func(topic string)) error
}
