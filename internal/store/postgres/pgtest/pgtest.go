// Package pgtest gives tests a PostgreSQL database of their own: a fresh
// schema in the database TRAINYARD_TEST_POSTGRES names, dropped when the
// test ends, so parallel tests and packages never share tables. Without
// the variable a test is skipped, except under CI (CI=true), where it
// fails: CI must run the PostgreSQL tests.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Example is a value for TRAINYARD_TEST_POSTGRES on a machine with a local
// server that trusts local connections.
const Example = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// DSN returns TRAINYARD_TEST_POSTGRES, skipping the test without it (and
// failing it under CI).
func DSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("TRAINYARD_TEST_POSTGRES")
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("TRAINYARD_TEST_POSTGRES is not set: CI must run the PostgreSQL tests; set it to a database the tests may create schemas in, e.g. " + Example)
		}
		t.Skip("TRAINYARD_TEST_POSTGRES is not set; set it to a PostgreSQL URL (e.g. " + Example + ") to run these tests")
	}
	return dsn
}

// Schema creates an empty schema with a random name, dropped with
// everything in it when the test ends, and returns a DSN that uses it.
func Schema(t testing.TB) string {
	t.Helper()
	dsn := DSN(t)
	ctx := context.Background()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	schema := "test_" + hex.EncodeToString(b[:])
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to TRAINYARD_TEST_POSTGRES: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("connect to drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return WithSearchPath(dsn, schema)
}

// WithSearchPath returns dsn with its search_path set to schema.
func WithSearchPath(dsn, schema string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return dsn + " search_path=" + schema
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
