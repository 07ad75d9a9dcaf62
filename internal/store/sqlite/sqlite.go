// Package sqlite is the embedded SQLite backend of the metadata store, built
// on the pure-Go driver modernc.org/sqlite. It implements store.Store and
// passes storetest.Exercise.
//
// The database runs in WAL mode with synchronous=NORMAL: a commit survives a
// process crash, and an operating-system crash can lose at most the last few
// commits, never corrupt the file.
//
// Writes go through one dedicated connection owned by one goroutine (the
// writer), so writers never fight over SQLITE_BUSY. The writer practices group
// commit: CreateJob, Apply and CreateToken calls that wait at the same time
// share one transaction, each inside its own SAVEPOINT, so a failing call
// rolls back only its own work and every call still gets its own result.
// Reads use a separate pool of query-only connections and never wait for the
// writer.
//
// Unlike PostgreSQL, SQLite allows one writer per database file: open a file
// from one process only.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"trainyard/internal/store"
	"trainyard/internal/store/sqlstore"
)

// busyTimeoutMS bounds how long a connection waits for a lock held by another
// connection (checkpoints, or a second process that opened the file) before
// failing with SQLITE_BUSY.
const busyTimeoutMS = 10000

// walCheckpointPages is how long the WAL grows, in pages, before the
// writer copies it back into the database file (SQLite's default is
// 1000). That checkpoint runs on the writer, right after the commit that
// crossed the mark, and syncs the WAL and the database file: every write
// waiting behind it waits for two fsyncs (milliseconds on a disk), and
// at a few jobs per commit, 1000 pages come every hundred or so submits.
// A longer WAL checkpoints as many times less often, and each copies
// little more: most pages a commit writes are the same hot leaves of the
// jobs table and its indexes, copied once per checkpoint however many
// times they were rewritten. The WAL is written and synced as before
// (synchronous=NORMAL): a commit is exactly as durable; it costs up to
// 32 MiB of disk (4 KiB pages) and a longer replay after a crash.
const walCheckpointPages = 8000

// errClosed is returned by every method called after Close.
var errClosed = errors.New("sqlite store is closed")

// Store is the SQLite metadata store. It is safe for concurrent use. Create
// one with Open and release it with Close.
type Store struct {
	path string

	writeDB *sql.DB // exactly one connection, owned by the writer goroutine
	readDB  *sql.DB // query-only connections

	w *writer

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

	readStmts sync.Map // SQL text → *sql.Stmt prepared on readDB

	details *detailCache // JobDetail's answers: detailcache.go
	rates   rateCache    // RateHistory's: listcache.go
	// afterBatch, when set (by tests, before the first write), runs on the
	// writer goroutine after every batch.
	afterBatch func()

	// Shared holds the methods whose SQL both engines share. It comes
	// last, so the fields the writer and its callers touch keep their
	// layout.
	sqlstore.Shared
}

var _ store.Store = (*Store)(nil)

// Options tune a Store beyond its defaults.
type Options struct {
	// DetailCacheBytes bounds the memory of the cache of job details
	// (detailcache.go): 0 means DefaultDetailCacheBytes, a negative
	// number turns the cache off.
	DetailCacheBytes int64
}

// Open opens the database file at path, creating it and its parent directory
// when missing, and applies any migrations it lacks.
func Open(ctx context.Context, path string) (*Store, error) {
	return OpenWith(ctx, path, Options{})
}

// OpenWith is Open with options.
func OpenWith(ctx context.Context, path string, opts Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("open sqlite store: the database path is empty; pass a file path such as /var/lib/trainyard/trainyard.db")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open sqlite store: resolve path %q: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o750); err != nil {
		return nil, fmt.Errorf("open sqlite store: create directory for %s: %w", abs, err)
	}

	writeDB, err := sql.Open("sqlite", dsn(abs, false))
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w", abs, err)
	}
	writeDB.SetMaxOpenConns(1)
	writeDB.SetMaxIdleConns(1)
	writeDB.SetConnMaxLifetime(0)
	writeDB.SetConnMaxIdleTime(0)

	conn, err := writeDB.Conn(ctx)
	if err != nil {
		writeDB.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", abs, err)
	}
	w := newWriter(conn)
	if err := migrate(ctx, w); err != nil {
		w.close()
		writeDB.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", abs, err)
	}
	var rev sql.NullInt64
	if err := w.conn.QueryRowContext(ctx, `SELECT MAX(rev) FROM jobs`).Scan(&rev); err != nil {
		w.close()
		writeDB.Close()
		return nil, fmt.Errorf("open sqlite store %s: read the newest job revision: %w", abs, err)
	}
	w.rev = rev.Int64
	if err := w.conn.QueryRowContext(ctx, "PRAGMA data_version").Scan(&w.dataVersion); err != nil {
		w.close()
		writeDB.Close()
		return nil, fmt.Errorf("open sqlite store %s: read the data version: %w", abs, err)
	}
	if err := w.hookWrites(ctx); err != nil {
		w.close()
		writeDB.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", abs, err)
	}

	readDB, err := sql.Open("sqlite", dsn(abs, true))
	if err != nil {
		w.close()
		writeDB.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", abs, err)
	}
	readers := max(4, runtime.GOMAXPROCS(0))
	readDB.SetMaxOpenConns(readers)
	readDB.SetMaxIdleConns(readers)
	readDB.SetConnMaxLifetime(0)
	readDB.SetConnMaxIdleTime(0)
	if err := readDB.PingContext(ctx); err != nil {
		readDB.Close()
		w.close()
		writeDB.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", abs, err)
	}

	s := &Store{
		path:       abs,
		writeDB:    writeDB,
		readDB:     readDB,
		w:          w,
		reqs:       make(chan *writeReq, 1024),
		closing:    make(chan struct{}),
		writerDone: make(chan struct{}),
	}
	cacheBytes := opts.DetailCacheBytes
	if cacheBytes == 0 {
		cacheBytes = DefaultDetailCacheBytes
	}
	s.details = newDetailCache(cacheBytes)
	s.Shared = sqlstore.New(sqlstore.SQLite, backend{s})
	go s.runWriter()
	return s, nil
}

// dsn builds the connection string. The path is sent as a file: URI so that
// any character in it survives; the PRAGMAs run on every new connection.
func dsn(abs string, readOnly bool) string {
	pragmas := []string{
		fmt.Sprintf("busy_timeout(%d)", busyTimeoutMS),
		"foreign_keys(ON)",
		"synchronous(NORMAL)",
		"cache_size(-16384)", // 16 MiB of page cache per connection (default 2 MiB)
		// Savepoint (statement) journals in memory, not in temporary files:
		// every write request runs in a savepoint.
		"temp_store(MEMORY)",
	}
	if readOnly {
		// Reads do not map the file (mmap_size 0): SQLite unmaps a
		// connection's whole mapping at the start of any read after a
		// write, so on a server that writes all the time every read paid
		// munmap (with its TLB shootdowns) and a page fault per page it
		// touched, more than the read calls and copies it spared.
		pragmas = append(pragmas, "query_only(ON)", "mmap_size(0)")
	} else {
		pragmas = append([]string{"journal_mode(WAL)", fmt.Sprintf("wal_autocheckpoint(%d)", walCheckpointPages)}, pragmas...)
	}
	q := make([]string, len(pragmas))
	for i, p := range pragmas {
		q[i] = "_pragma=" + p
	}
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(abs), RawQuery: strings.Join(q, "&")}
	return u.String()
}

// Kind returns "sqlite".
func (s *Store) Kind() string { return "sqlite" }

// Path returns the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// Ping checks that the store is open and the database file answers a query.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return errClosed
	}
	var one int
	if err := s.readDB.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		return interpretError("ping sqlite store", err)
	}
	return nil
}

// Close stops the writer (calls already queued fail with a "store is
// closed" error), then closes every connection. It is safe to call more than
// once; later calls return the first call's result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.closing)
		<-s.writerDone
		var errs []error
		s.readStmts.Range(func(_, v any) bool {
			errs = append(errs, v.(*sql.Stmt).Close())
			return true
		})
		errs = append(errs, s.readDB.Close(), s.w.close(), s.writeDB.Close())
		if err := errors.Join(errs...); err != nil {
			s.closeErr = fmt.Errorf("close sqlite store %s: %w", s.path, err)
		}
	})
	return s.closeErr
}

// readStmt returns a statement prepared on the read pool, preparing it on
// first use. database/sql re-prepares it on each pooled connection as needed.
func (s *Store) readStmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if v, ok := s.readStmts.Load(query); ok {
		return v.(*sql.Stmt), nil
	}
	st, err := s.readDB.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if v, loaded := s.readStmts.LoadOrStore(query, st); loaded {
		st.Close()
		return v.(*sql.Stmt), nil
	}
	return st, nil
}

// checkOpen fails fast after Close, so reads report errClosed rather than a
// driver message.
func (s *Store) checkOpen() error {
	if s.closed.Load() {
		return errClosed
	}
	return nil
}
