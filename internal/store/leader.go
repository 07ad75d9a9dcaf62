package store

import "context"

// Leadership elects one leader among server replicas that share a store:
// the leader runs the control, alert and retention loops; every replica
// serves the API. A backend that only one process can open (SQLite) needs
// none: that process leads.
type Leadership interface {
	// Lead blocks until replica holds leadership, or ctx ends. The term
	// lasts until Term.Lost is closed (the database connection that holds
	// it broke) or ctx ends, which gives it up.
	Lead(ctx context.Context, replica string) (Term, error)
	// Leader names the replica that leads now and its term's epoch; an
	// empty name when none leads.
	Leader(ctx context.Context) (replica string, epoch int64, err error)
	// Fence reports ErrConflict unless epoch is still the current term:
	// a deposed leader checks it before acting on its plans.
	Fence(ctx context.Context, epoch int64) error
}

// Term is one leader's time in office.
type Term struct {
	// Epoch increases with every new term: a fencing token.
	Epoch int64
	// Lost is closed when leadership is lost.
	Lost <-chan struct{}
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
