package main

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/control"
	"trainyard/internal/leader"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/postgres"
	"trainyard/internal/store/sqlite"
)

// openStore opens the metadata store a DSN names: postgres://… or
// postgresql://… for PostgreSQL, else an SQLite file (sqlite:// optional).
func openStore(ctx context.Context, dsn string) (store.Store, error) {
	return openStoreWith(ctx, dsn, sqlite.Options{})
}

// openStoreWith is openStore with the options of an SQLite store.
func openStoreWith(ctx context.Context, dsn string, opts sqlite.Options) (store.Store, error) {
	if isPostgres(dsn) {
		return postgres.Open(ctx, dsn)
	}
	return sqlite.OpenWith(ctx, strings.TrimPrefix(dsn, "sqlite://"), opts)
}

// leaderLoops runs the loops only the leader runs — the control loop, the
// alert rules and log retention — for as long as this replica leads, and
// campaigns again when it loses the lead. A store without elections
// (SQLite, one process) leads from the start; on one with leases
// (PostgreSQL) the loops write fenced by their term (store.WithFence).
type leaderLoops struct {
	st      store.Store
	replica string
	log     *slog.Logger
	// leaseTTL is the leader lease's TTL (server config leader_lease).
	leaseTTL time.Duration
	// term starts the leader's loops with the term's fence check and
	// returns its controller and a function that blocks until they stop.
	term func(ctx context.Context, fence func(context.Context) error) (*control.Controller, func())
	// preview is a controller that never runs: a follower plans the queue
	// with it on demand, at most every previewEvery.
	preview func() *control.Controller

	cur atomic.Pointer[control.Controller]

	previewMu  sync.Mutex
	previewCtl *control.Controller
	previewAt  time.Time

	signalsOnce sync.Once
	signals     *signaler // Broadcast's
}

// previewEvery is how long a follower reuses its last queue preview.
const previewEvery = 2 * time.Second

// Wake nudges the leader's control loop: this replica's, if it leads, and
// every replica's through the store's wake-ups.
func (l *leaderLoops) Wake() {
	if c := l.cur.Load(); c != nil {
		c.Wake()
	}
	l.Broadcast("wake")
}

// Broadcast signals topic to every replica sharing the store (none on
// SQLite). It does not wait.
func (l *leaderLoops) Broadcast(topic string) {
	if sg, ok := l.st.(store.Signals); ok {
		l.signalsOnce.Do(func() { l.signals = &signaler{send: sg.Signal, log: l.log} })
		l.signals.signal(topic)
	}
}

// Queue is the leader's queue view. A follower plans a pass over the
// store's state (without acting on it) and answers from that, so every
// replica answers queue questions alike.
func (l *leaderLoops) Queue(ctx context.Context, pool string) ([]service.QueueEntry, error) {
	if c := l.cur.Load(); c != nil {
		return c.Queue(ctx, pool)
	}
	if l.preview == nil {
		return nil, nil
	}
	l.previewMu.Lock()
	defer l.previewMu.Unlock()
	if l.previewCtl == nil {
		l.previewCtl = l.preview()
	}
	if time.Since(l.previewAt) >= previewEvery {
		if err := l.previewCtl.PreviewQueue(ctx); err != nil {
			return nil, err
		}
		l.previewAt = time.Now()
	}
	return l.previewCtl.Queue(ctx, pool)
}

// Status describes this replica and the leader, for /readyz.
func (l *leaderLoops) Status(ctx context.Context) apitypes.Status {
	st := apitypes.Status{Replica: l.replica, Store: l.st.Kind()}
	if ls, ok := l.st.(store.Leases); ok {
		st.Leader, st.Epoch, _ = ls.Leader(ctx)
	} else if l.cur.Load() != nil {
		st.Leader, st.Epoch = l.replica, 1
	}
	st.Leading = l.cur.Load() != nil && st.Leader == l.replica
	return st
}

// Run leads whenever it can until ctx ends.
func (l *leaderLoops) Run(ctx context.Context) {
	ls, elect := l.st.(store.Leases)
	if !elect {
		ctl, wait := l.term(ctx, nil)
		l.cur.Store(ctl)
		wait()
		return
	}
	for ctx.Err() == nil {
		term, err := leader.Lead(ctx, leader.Config{Leases: ls, Replica: l.replica, TTL: l.leaseTTL, Logger: l.log})
		if err != nil {
			if ctx.Err() == nil {
				l.log.Error("campaign for leadership", "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
			continue
		}
		l.log.Info("leading: this replica runs the scheduler, alerts and retention", "replica", l.replica, "term", term.Epoch, "lease", l.leaseTTL)
		// Every write of the leader's loops commits only within this term.
		termCtx, end := context.WithCancel(store.WithFence(ctx, term.Epoch))
		go func() {
			select {
			case <-term.Lost:
				if termCtx.Err() == nil {
					l.log.Error("lost leadership; stopping the leader's loops (another replica takes over)", "term", term.Epoch, "err", term.Err())
				}
			case <-termCtx.Done():
			}
			end()
		}()
		// Launches follow a fenced commit and this local check: a term
		// whose lease may have expired launches nothing.
		fence := func(context.Context) error { return term.Check() }
		ctl, wait := l.term(termCtx, fence)
		l.cur.Store(ctl)
		wait()
		l.cur.Store(nil)
		end()
		// The loops have stopped writing: give the lease up, so that on a
		// shutdown another replica takes over at once.
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		term.End(rctx)
		cancel()
	}
}

// Listen handles the signals of other replicas until ctx ends: "wake"
// wakes this replica's control loop when it leads; the others invalidate
// the service's caches. It listens again after a failure (the control loop
// polls meanwhile, and the caches expire).
func (l *leaderLoops) Listen(ctx context.Context, invalidate func(topic string)) {
	sg, ok := l.st.(store.Signals)
	if !ok {
		return
	}
	handle := func(topic string) {
		if topic == "wake" {
			if c := l.cur.Load(); c != nil {
				c.Wake()
			}
			return
		}
		invalidate(topic)
	}
	for ctx.Err() == nil {
		if err := sg.ListenSignals(ctx, handle); err != nil && ctx.Err() == nil {
			l.log.Warn("listen for the other replicas' signals; polling until it works again", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Second):
			}
		}
	}
}

// portOf is the port of a host:port address.
func portOf(addr string) string {
	if i := strings.LastIndexByte(addr, ':'); i >= 0 {
		return addr[i+1:]
	}
	return addr
}

// cacheTTL bounds the service's caches when replicas share the store, in
// case a signal is lost; a lone server trusts them until it changes them.
func cacheTTL(st store.Store) time.Duration {
	if _, ok := st.(store.Signals); ok {
		return 5 * time.Second
	}
	return 0
}
