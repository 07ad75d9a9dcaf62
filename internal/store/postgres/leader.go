package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"trainyard/internal/store"
)

var (
	_ store.Leadership = (*Store)(nil)
	_ store.Signals    = (*Store)(nil)
)

// leaderLockClass is the first key of the session advisory lock that makes
// one replica the leader; the second is a hash of the schema, so that
// installations sharing a database in different schemas elect apart.
const leaderLockClass int32 = 1952540020 // 1952540017: migrations; 1952540018: the audit chain

const (
	leaderTryLockSQL = `SELECT pg_try_advisory_lock($1, hashtext(COALESCE(current_schema(), '')))`
	leaderUnlockSQL  = `SELECT pg_advisory_unlock($1, hashtext(COALESCE(current_schema(), '')))`
	leaderHeldSQL    = `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2
		AND classid = $1::oid AND objid = (hashtext(COALESCE(current_schema(), ''))::bigint & 4294967295)::oid
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`
)

// signalChannel is the LISTEN/NOTIFY channel of store.Signals.
const signalChannel = "trainyard_signals"

// leaderCheckEvery is how often a leader checks that the connection
// holding its lock is alive.
const leaderCheckEvery = time.Second

// ensureLeaderTable creates the table that records terms.
func (s *Store) ensureLeaderTable(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS leader (
		id INTEGER PRIMARY KEY CHECK (id = 1),
		replica TEXT NOT NULL,
		epoch BIGINT NOT NULL,
		since BIGINT NOT NULL)`)
	return interpretError("create the leader table", err)
}

// Lead takes the leader lock on a connection of its own and starts a new
// term. The lock is a session advisory lock, so PostgreSQL releases it the
// moment that connection ends — when this process dies, the next replica
// takes over.
func (s *Store) Lead(ctx context.Context, replica string) (store.Term, error) {
	if err := s.ensureLeaderTable(ctx); err != nil {
		return store.Term{}, err
	}
	var conn *pgxpool.Conn
	for {
		if err := ctx.Err(); err != nil {
			return store.Term{}, err
		}
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			return store.Term{}, interpretError("lead", err)
		}
		var got bool
		if err := c.QueryRow(ctx, leaderTryLockSQL, leaderLockClass).Scan(&got); err != nil {
			c.Release()
			return store.Term{}, interpretError("lead", err)
		}
		if got {
			conn = c
			break
		}
		c.Release()
		select {
		case <-ctx.Done():
			return store.Term{}, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	var epoch int64
	err := conn.QueryRow(ctx, `INSERT INTO leader (id, replica, epoch, since) VALUES (1, $1, 1, $2)
		ON CONFLICT (id) DO UPDATE SET replica = excluded.replica, epoch = leader.epoch + 1, since = excluded.since
		RETURNING epoch`, replica, time.Now().UnixNano()).Scan(&epoch)
	if err != nil {
		conn.Release()
		return store.Term{}, interpretError("start a leader term", err)
	}
	// The lock lives as long as this connection: take it out of the pool.
	raw := conn.Hijack()
	lost := make(chan struct{})
	go func() {
		defer close(lost)
		defer raw.Close(context.Background())
		t := time.NewTicker(leaderCheckEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, _ = raw.Exec(uctx, leaderUnlockSQL, leaderLockClass)
				cancel()
				return
			case <-t.C:
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := raw.Ping(pctx)
				cancel()
				if err != nil && ctx.Err() == nil {
					return // the lock went with the connection
				}
			}
		}
	}()
	return store.Term{Epoch: epoch, Lost: lost}, nil
}

// Leader names the current leader: the replica of the latest term, if a
// session still holds the leader lock.
func (s *Store) Leader(ctx context.Context) (string, int64, error) {
	if err := s.ensureLeaderTable(ctx); err != nil {
		return "", 0, err
	}
	var held bool
	if err := s.pool.QueryRow(ctx, leaderHeldSQL, leaderLockClass).Scan(&held); err != nil {
		return "", 0, interpretError("read the leader", err)
	}
	if !held {
		return "", 0, nil
	}
	var replica string
	var epoch int64
	err := s.pool.QueryRow(ctx, `SELECT replica, epoch FROM leader WHERE id = 1`).Scan(&replica, &epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, interpretError("read the leader", err)
	}
	return replica, epoch, nil
}

// Fence fails with ErrConflict once a newer term started.
func (s *Store) Fence(ctx context.Context, epoch int64) error {
	var cur int64
	if err := s.pool.QueryRow(ctx, `SELECT epoch FROM leader WHERE id = 1`).Scan(&cur); err != nil {
		return interpretError("check the leader term", err)
	}
	if cur != epoch {
		return fmt.Errorf("leader term %d ended: term %d started on another replica: %w", epoch, cur, store.ErrConflict)
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
