package postgres

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/postgres/pgtest"
)

// Real driver errors of a database that is away are store.ErrUnavailable;
// the store's other outcomes keep their own class.
func TestInterpretErrorClassifiesOutages(t *testing.T) {
	dsn := testDSN(t)
	ctx := context.Background()

	// Nobody listens on a port just released: connection refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	u, _ := url.Parse(dsn)
	u.Host = closed
	_, refused := pgx.Connect(ctx, u.String())

	// A backend the server terminates (what a fast or immediate shutdown
	// does to every session): 57P01, then a closed connection.
	victim, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close(ctx)
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	pid := victim.PgConn().PID()
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	var terminated, closedConn error
	deadline := time.Now().Add(10 * time.Second)
	for terminated == nil && time.Now().Before(deadline) {
		_, terminated = victim.Exec(ctx, "SELECT 1")
	}
	_, closedConn = victim.Exec(ctx, "SELECT 1")

	// A query the caller cancels, a syntax error, no rows, a duplicate key.
	canceledCtx, cancel := context.WithCancel(ctx)
	cancel()
	_, canceled := admin.Exec(canceledCtx, "SELECT 1")
	_, syntax := admin.Exec(ctx, "SELEC 1")
	var one int
	noRows := admin.QueryRow(ctx, "SELECT 1 WHERE false").Scan(&one)
	if _, err := admin.Exec(ctx, "CREATE TEMP TABLE u (x int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	_, unique := admin.Exec(ctx, "INSERT INTO u VALUES (1), (1)")

	outage := map[string]error{
		"connection refused":       refused,
		"terminated by the server": terminated,
		"use after termination":    closedConn,
		"starting up":              &pgconn.PgError{Severity: "FATAL", Code: "57P03", Message: "the database system is starting up"},
		"shutting down":            &pgconn.PgError{Severity: "FATAL", Code: "57P03", Message: "the database system is shutting down"},
		"crash shutdown":           &pgconn.PgError{Severity: "FATAL", Code: "57P02", Message: "terminating connection because of crash of another server process"},
		"connection failure":       &pgconn.PgError{Severity: "FATAL", Code: "08006", Message: "connection failure"},
		"too many clients":         &pgconn.PgError{Severity: "FATAL", Code: "53300", Message: "sorry, too many clients already"},
		"write connection timeout": func() error { // the writer's acquire gave up
			ctx, cancel := context.WithTimeout(ctx, time.Nanosecond)
			defer cancel()
			<-ctx.Done()
			_, err := pgx.Connect(ctx, dsn)
			return err
		}(),
	}
	for name, err := range outage {
		if err == nil {
			t.Errorf("%s: the driver reported no error", name)
			continue
		}
		got := interpretError("get job 1", err)
		if !errors.Is(got, store.ErrUnavailable) {
			t.Errorf("%s: %v is not store.ErrUnavailable", name, got)
		}
		if !strings.HasPrefix(got.Error(), "get job 1: unavailable") {
			t.Errorf("%s: message %q does not name the action and the class first", name, got)
		}
	}
	others := map[string]struct {
		err  error
		want error // nil: no sentinel
	}{
		"canceled":  {canceled, context.Canceled},
		"syntax":    {syntax, nil},
		"no rows":   {noRows, store.ErrNotFound},
		"duplicate": {unique, store.ErrConflict},
	}
	for name, c := range others {
		if c.err == nil {
			t.Errorf("%s: the driver reported no error", name)
			continue
		}
		got := interpretError("act", c.err)
		if errors.Is(got, store.ErrUnavailable) {
			t.Errorf("%s: %v is store.ErrUnavailable", name, got)
		}
		if c.want != nil && !errors.Is(got, c.want) {
			t.Errorf("%s: %v is not %v", name, got, c.want)
		}
	}
}

// With the network to the database cut, reads, writes and Ping fail with
// store.ErrUnavailable; once it is back the same store serves again and
// what was written before is there.
func TestOutageIsUnavailableAndTheStoreRecovers(t *testing.T) {
	proxy, dsn := pgtest.NewProxy(t, newSchema(t))
	ctx := context.Background()
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	before, _, err := s.CreateJob(ctx, testNewJob(t, "before"), domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK})
	if err != nil {
		t.Fatal(err)
	}

	proxy.Cut()
	calls := map[string]func() error{
		"ping":    func() error { return s.Ping(ctx) },
		"get job": func() error { _, err := s.GetJob(ctx, before.ID); return err },
		"list":    func() error { _, err := s.ListJobs(ctx, store.JobFilter{}); return err },
		"create": func() error {
			_, _, err := s.CreateJob(ctx, testNewJob(t, "during"), domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK})
			return err
		},
		"token":     func() error { _, err := s.TokenByHash(ctx, "nope"); return err },
		"live jobs": func() error { _, _, err := s.LiveJobs(ctx); return err },
		"pools":     func() error { _, err := s.ListPools(ctx); return err },
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s during the outage: %v, want store.ErrUnavailable", name, err)
		}
	}

	proxy.Restore()
	var got error
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if _, _, got = s.CreateJob(ctx, testNewJob(t, "after"), domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); got == nil {
			break
		}
		if !errors.Is(got, store.ErrUnavailable) {
			t.Fatalf("create after the outage: %v", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got != nil {
		t.Fatalf("the store did not recover: %v", got)
	}
	j, err := s.GetJob(ctx, before.ID)
	if err != nil || j.Name != "before" {
		t.Fatalf("the job written before the outage: %+v, %v", j, err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Errorf("ping after the outage: %v", err)
	}
}
