// Package postgres is the PostgreSQL backend of the metadata store, built on
// pgx v5. It implements store.Store, passes storetest.Exercise, and lets
// several server replicas share one database.
//
// The schema mirrors the SQLite backend's table for table (embedded
// migrations with the same numbers and names, times as BIGINT Unix
// nanoseconds), applied at Open under an advisory lock so replicas starting
// together migrate exactly once.
//
// Writes go through one dedicated connection owned by one goroutine (the
// writer), which practices group commit: write calls that wait at the same
// time share one transaction, each inside its own SAVEPOINT, so a failing
// call rolls back only its own work and every call gets its own result. The
// statements of one call travel to the server as one pipeline where they do
// not depend on each other's results. Reads use the rest of a pgxpool.
//
// The audit log's hash chain spans replicas: a write transaction that
// appends audit records first takes a transaction-level advisory lock, then
// reads the chain's head, so Seq has no gaps and every record links to the
// one committed before it.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"trainyard/internal/store"
	"trainyard/internal/store/sqlstore"
)

// defaultConnectTimeout bounds one connection attempt unless the connection
// string sets connect_timeout.
const defaultConnectTimeout = 5 * time.Second

// errClosed is returned by every method called after Close.
var errClosed = errors.New("postgres store is closed")

// Store is the PostgreSQL metadata store. It is safe for concurrent use.
// Create one with Open and release it with Close.
type Store struct {
	pool *pgxpool.Pool
	w    *writer

	reqs       chan *writeReq
	closing    chan struct{} // closed by Close: the writer stops taking requests
	writerDone chan struct{} // closed when the writer goroutine has exited
	closed     atomic.Bool
	closeOnce  sync.Once
	closeErr   error

	// batches and batched count committed write batches and the requests in
	// them (for tests and benchmarks).
	batches atomic.Int64
	batched atomic.Int64

	// leaderTable records that the leader table has its lease column.
	leaderTable atomic.Bool

	// Shared holds the methods whose SQL both engines share. It comes
	// last, so the fields the writer and its callers touch keep their
	// layout.
	sqlstore.Shared
}

var _ store.Store = (*Store)(nil)

// Open connects to the PostgreSQL database named by dsn, applies any
// migrations it lacks and starts the writer.
//
// dsn is a libpq connection string or URL, for example
// "postgres://trainyard:secret@db.example:5432/trainyard?sslmode=require".
// Tables live in the first schema of the connection's search_path ("public"
// by default); add "&search_path=NAME" to the URL to use another (the schema
// must exist). pgxpool settings such as "pool_max_conns=16" are honoured; the
// default pool holds max(8, 2×GOMAXPROCS) connections, one of them kept by
// the writer; connect_timeout defaults to 5 seconds. A server wiring this
// backend behind a flag passes the flag's value (e.g. `--store
// postgres://…`) here unchanged.
func Open(ctx context.Context, dsn string) (*Store, error) {
	if dsn == "" {
		return nil, errors.New("open postgres store: the connection string is empty; pass a URL such as postgres://user@host:5432/trainyard")
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx error texts may quote the DSN, password included: keep only
		// what the caller needs to fix it.
		return nil, fmt.Errorf("open postgres store: the connection string is malformed (%s); check its syntax", redact(err, dsn))
	}
	if !hasParam(dsn, "pool_max_conns") {
		cfg.MaxConns = int32(max(8, 2*runtime.GOMAXPROCS(0)))
	}
	if !hasParam(dsn, "connect_timeout") {
		// A database host that does not answer fails a call in seconds
		// (store.ErrUnavailable) instead of holding it until the client
		// gives up.
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	where := fmt.Sprintf("%s@%s:%d/%s", cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres store %s: %w", where, err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres store %s: %w", where, err)
	}
	s := &Store{
		pool:       pool,
		w:          &writer{pool: pool, ctx: context.Background()},
		reqs:       make(chan *writeReq, 1024),
		closing:    make(chan struct{}),
		writerDone: make(chan struct{}),
	}
	if err := s.w.connect(); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres store %s: %w", where, err)
	}
	s.Shared = sqlstore.New(sqlstore.Postgres, backend{s})
	go s.runWriter()
	return s, nil
}

// Kind returns "postgres".
func (s *Store) Kind() string { return "postgres" }

// Ping checks that the store is open and the database answers a query.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return errClosed
	}
	var one int
	if err := s.pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		return interpretError("ping postgres store", err)
	}
	return nil
}

// Close stops the writer (calls already queued fail with a "store is
// closed" error), then closes every connection. It is safe to call more
// than once; later calls return nil.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.closing)
		<-s.writerDone
		s.w.release()
		s.pool.Close()
	})
	return s.closeErr
}

// checkOpen fails fast after Close, so reads report errClosed rather than a
// driver message.
func (s *Store) checkOpen() error {
	if s.closed.Load() {
		return errClosed
	}
	return nil
}
