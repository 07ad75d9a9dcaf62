package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// lockDatabase takes the write lock of the database file at path from
// another connection, as a second process would, until the test ends or
// the returned function runs.
func lockDatabase(t *testing.T, path string) (unlock func()) {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatalf("take the write lock: %v", err)
	}
	done := false
	unlock = func() {
		if !done {
			done = true
			conn.ExecContext(ctx, "ROLLBACK")
			conn.Close()
			db.Close()
		}
	}
	t.Cleanup(unlock)
	return unlock
}

// A lock another connection holds surfaces as SQLITE_BUSY, which is
// store.ErrUnavailable; the store's other outcomes keep their own class.
func TestInterpretErrorClassifiesOutages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db.sqlite")
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE TABLE u (x INTEGER PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	lockDatabase(t, path)
	_, busy := db.ExecContext(ctx, "INSERT INTO u VALUES (1)")
	got := interpretError("create job", busy)
	if !errors.Is(got, store.ErrUnavailable) || !strings.HasPrefix(got.Error(), "create job: unavailable") {
		t.Errorf("a locked database: %v, want store.ErrUnavailable after the action", got)
	}

	for _, code := range []int{sqlite3.SQLITE_BUSY, sqlite3.SQLITE_BUSY_TIMEOUT, sqlite3.SQLITE_BUSY_SNAPSHOT,
		sqlite3.SQLITE_IOERR, sqlite3.SQLITE_IOERR_READ, sqlite3.SQLITE_IOERR_WRITE, sqlite3.SQLITE_IOERR_FSYNC} {
		if !unavailableCode(code) {
			t.Errorf("result code %d is not an outage", code)
		}
	}
	for _, code := range []int{sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_ERROR, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_LOCKED} {
		if unavailableCode(code) {
			t.Errorf("result code %d is an outage", code)
		}
	}

	var one int
	noRows := db.QueryRowContext(ctx, "SELECT 1 WHERE 0").Scan(&one)
	_, syntax := db.ExecContext(ctx, "SELEC 1")
	for name, c := range map[string]struct{ err, want error }{
		"no rows": {noRows, store.ErrNotFound},
		"syntax":  {syntax, nil},
	} {
		got := interpretError("act", c.err)
		if errors.Is(got, store.ErrUnavailable) || c.want != nil && !errors.Is(got, c.want) {
			t.Errorf("%s: %v", name, got)
		}
	}
}

// A write that waits out the busy timeout behind another process's lock
// fails with store.ErrUnavailable and writes nothing; once the lock is
// gone the store writes again.
func TestLockedBeyondTheBusyTimeoutIsUnavailable(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the 10 s busy timeout")
	}
	s := openTest(t)
	ctx := context.Background()
	unlock := lockDatabase(t, s.Path())
	start := time.Now()
	_, _, err := s.CreateJob(ctx, testNewJob(t, "locked"), domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("create behind the lock: %v, want store.ErrUnavailable", err)
	}
	if waited := time.Since(start); waited < busyTimeoutMS*time.Millisecond*9/10 {
		t.Errorf("gave up after %s, before the busy timeout", waited)
	}
	if err := s.Ping(ctx); err != nil { // readers are not blocked by a writer
		t.Errorf("ping behind the lock: %v", err)
	}
	unlock()
	j, _, err := s.CreateJob(ctx, testNewJob(t, "after"), domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK})
	if err != nil {
		t.Fatalf("create after the lock: %v", err)
	}
	list, err := s.ListJobs(ctx, store.JobFilter{})
	if err != nil || len(list) != 1 || list[0].ID != j.ID {
		t.Errorf("jobs after the lock: %+v, %v; want only job %d", list, err, j.ID)
	}
}
