package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"trainyard/internal/store"
)

var (
	_ store.Leases  = (*Store)(nil)
	_ store.Signals = (*Store)(nil)
)

// signalChannel is the LISTEN/NOTIFY channel of store.Signals.
const signalChannel = "trainyard_signals"

// leaderTableLockSQL serializes the replicas creating or widening the
// leader table (1952540017: migrations; 1952540018: the audit chain).
const leaderTableLockSQL = `SELECT pg_advisory_xact_lock(1952540020, hashtext(COALESCE(current_schema(), '')))`

// ensureLeaderTable creates the table that records terms and their lease,
// once per Store. expires_at is timed by the database's clock; NULL (a row
// written before leases) counts as expired.
func (s *Store) ensureLeaderTable(ctx context.Context) error {
	if s.leaderTable.Load() {
		return nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, leaderTableLockSQL); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS leader (
			id INTEGER PRIMARY KEY CHECK (id = 1),
			replica TEXT NOT NULL,
			epoch BIGINT NOT NULL,
			since BIGINT NOT NULL,
			expires_at TIMESTAMPTZ)`); err != nil {
			return err
		}
		var has bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name = 'leader' AND column_name = 'expires_at')`).Scan(&has); err != nil {
			return err
		}
		if !has {
			_, err := tx.Exec(ctx, `ALTER TABLE leader ADD COLUMN expires_at TIMESTAMPTZ`)
			return err
		}
		return nil
	})
	if err != nil {
		return interpretError("create the leader table", err)
	}
	s.leaderTable.Store(true)
	return nil
}

// micros is d in whole microseconds, PostgreSQL's interval resolution.
func micros(d time.Duration) int64 { return d.Microseconds() }

// AcquireLease starts a new term when the lease is free: the row's lease
// expired (by the database's clock) or was released. Two replicas trying at
// once serialize on the row; the second sees the first's lease and fails.
func (s *Store) AcquireLease(ctx context.Context, replica string, ttl time.Duration) (int64, bool, error) {
	if err := s.ensureLeaderTable(ctx); err != nil {
		return 0, false, err
	}
	var epoch int64
	err := s.pool.QueryRow(ctx, `INSERT INTO leader (id, replica, epoch, since, expires_at)
		VALUES (1, $1, 1, $2, clock_timestamp() + $3 * interval '1 microsecond')
		ON CONFLICT (id) DO UPDATE SET replica = excluded.replica, epoch = leader.epoch + 1, since = excluded.since,
			expires_at = clock_timestamp() + $3 * interval '1 microsecond'
		WHERE leader.expires_at IS NULL OR leader.expires_at <= clock_timestamp()
		RETURNING epoch`, replica, time.Now().UnixNano(), micros(ttl)).Scan(&epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil // another term's lease is live
	}
	if err != nil {
		return 0, false, interpretError("acquire the leader lease", err)
	}
	return epoch, true, nil
}

// RenewLease extends the term's lease, while it is still live.
func (s *Store) RenewLease(ctx context.Context, replica string, epoch int64, ttl time.Duration) error {
	var renewed, cur int64
	var holder string
	err := s.pool.QueryRow(ctx, `WITH renewed AS (
			UPDATE leader SET expires_at = clock_timestamp() + $3 * interval '1 microsecond'
			WHERE id = 1 AND epoch = $1 AND replica = $2 AND expires_at > clock_timestamp()
			RETURNING epoch)
		SELECT COALESCE((SELECT epoch FROM renewed), 0), l.epoch, l.replica FROM leader l WHERE l.id = 1`,
		epoch, replica, micros(ttl)).Scan(&renewed, &cur, &holder)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("renew leader term %d: the leader table is empty: %w", epoch, store.ErrConflict)
	}
	if err != nil {
		return interpretError("renew the leader lease", err)
	}
	if renewed == 0 {
		if cur != epoch {
			return fmt.Errorf("renew leader term %d: term %d (replica %s) has begun: %w", epoch, cur, holder, store.ErrConflict)
		}
		return fmt.Errorf("renew leader term %d: its lease expired or was released before this renewal: %w", epoch, store.ErrConflict)
	}
	return nil
}

// ReleaseLease expires the term's lease now.
func (s *Store) ReleaseLease(ctx context.Context, replica string, epoch int64) error {
	_, err := s.pool.Exec(ctx, `UPDATE leader SET expires_at = clock_timestamp()
		WHERE id = 1 AND epoch = $1 AND replica = $2 AND expires_at > clock_timestamp()`, epoch, replica)
	return interpretError("release the leader lease", err)
}

// Leader names the replica whose lease is live now.
func (s *Store) Leader(ctx context.Context) (string, int64, error) {
	if err := s.ensureLeaderTable(ctx); err != nil {
		return "", 0, err
	}
	var replica string
	var epoch int64
	err := s.pool.QueryRow(ctx, `SELECT replica, epoch FROM leader WHERE id = 1 AND expires_at > clock_timestamp()`).Scan(&replica, &epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, interpretError("read the leader", err)
	}
	return replica, epoch, nil
}

// fenceSQL reads the current term, locking its row FOR SHARE until the
// write transaction ends: a new term cannot start (its UPDATE waits) between
// this read and the commit, so every fenced write of the transaction commits
// within the term it checked or not at all. So that a leader paused inside
// such a transaction cannot hold the takeover off, the database ends the
// transaction once it idles for fenceIdleTimeout.
const fenceSQL = `SELECT epoch, replica, expires_at IS NOT NULL AND expires_at > clock_timestamp(),
	set_config('idle_in_transaction_session_timeout', $1, true) FROM leader WHERE id = 1 FOR SHARE`

// fenceIdleTimeout is how long a fenced write transaction may wait for its
// client (milliseconds); the writer never pauses that long between its
// round trips.
const fenceIdleTimeout = "2000"

// fenceState is the leader term a write transaction read and locked.
type fenceState struct {
	read    bool
	missing bool // no term recorded
	epoch   int64
	holder  string
	live    bool
}

// readFence reads and locks the leader row for the transaction, once:
// outside any request's savepoint, so the lock lasts until the commit.
func (w *writer) readFence() error {
	f := fenceState{read: true}
	err := w.queryRow(fenceSQL, fenceIdleTimeout).Scan(&f.epoch, &f.holder, &f.live, new(string))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		f.missing = true
	case err != nil:
		return interpretError("check the leader term", err)
	}
	w.fence = f
	return nil
}

// checkFence fails unless epoch is the current term with a live lease, as
// the transaction read it.
func (w *writer) checkFence(epoch int64) error {
	if !w.fence.read {
		if err := w.readFence(); err != nil {
			return err
		}
	}
	f := w.fence
	switch {
	case f.missing:
		return fmt.Errorf("write refused: leader term %d is not recorded (no replica has led this store); nothing was changed: %w", epoch, store.ErrConflict)
	case f.epoch != epoch:
		return fmt.Errorf("write refused: leader term %d is over and term %d (replica %s) has begun; this replica no longer leads, and nothing was changed: %w",
			epoch, f.epoch, f.holder, store.ErrConflict)
	case !f.live:
		return fmt.Errorf("write refused: the lease of leader term %d expired (it was not renewed in time); this replica no longer leads, and nothing was changed: %w",
			epoch, store.ErrConflict)
	}
	return nil
}

// Signal notifies every replica listening (NOTIFY; delivered when the
// sending transaction commits, here at once).
func (s *Store) Signal(ctx context.Context, topic string) error {
	_, err := s.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, signalChannel, topic)
	return interpretError("send a signal", err)
}

// ListenSignals calls fn for each signal until ctx ends or the listening
// connection fails.
func (s *Store) ListenSignals(ctx context.Context, fn func(topic string)) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return interpretError("listen for signals", err)
	}
	raw := conn.Hijack()
	defer raw.Close(context.Background())
	if _, err := raw.Exec(ctx, "LISTEN "+signalChannel); err != nil {
		return interpretError("listen for signals", err)
	}
	for {
		n, err := raw.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return interpretError("listen for signals", err)
		}
		fn(n.Payload)
	}
}
