package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"trainyard/internal/store/postgres/pgtest"

	"github.com/jackc/pgx/v5"

	"trainyard/internal/api/apitypes"
)

// runBinary runs trainyard without a server environment.
func runBinary(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(binary, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("trainyard %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// An embedded installation moved to PostgreSQL keeps its row counts, ids
// and a verifying audit chain, and the copied installation keeps serving.
func TestStoreCopySQLiteToPostgres(t *testing.T) {
	dsn := pgtest.Schema(t)
	s := startServer(t, serverOpts{})
	ok := s.submit("name: ok\nentrypoint: [\"true\"]\n")
	bad := s.submit("name: bad\nentrypoint: [\"false\"]\n")
	s.waitState(ok.ID, 30*time.Second, "succeeded")
	s.waitState(bad.ID, 30*time.Second, "failed")
	s.mustCLI("user", "create", "alice")
	jobsNow := func() string {
		var list apitypes.JobList
		s.api("GET", "/api/v1/jobs?limit=100", nil, &list)
		var b strings.Builder
		for _, j := range list.Jobs {
			fmt.Fprintf(&b, "%d %s %s %s %s\n", j.ID, j.Name, j.State, j.Reason, j.Submitter)
		}
		return b.String()
	}
	before := jobsNow()
	s.shutdown()

	out := runBinary(t, "store", "copy", "--from", "sqlite:"+filepath.Join(s.data, "trainyard.db"), "--to", dsn)
	if !strings.Contains(out, "audit chain intact") || !strings.Contains(out, "jobs ") {
		t.Fatalf("store copy:\n%s", out)
	}
	// The same data directory, now on PostgreSQL.
	cfg, _ := os.ReadFile(s.config)
	os.WriteFile(s.config, append(cfg, []byte(fmt.Sprintf("store: %q\n", dsn))...), 0o644)
	s.start()
	if v := s.mustCLI("audit", "verify"); !strings.Contains(v, "audit log intact") {
		t.Errorf("audit verify after the copy: %s", v)
	}
	if after := jobsNow(); after != before {
		t.Errorf("jobs after the copy:\n%s\nbefore:\n%s", after, before)
	}
	j := s.job(bad.ID)
	if j.State != "failed" || len(j.Attempts) != 1 {
		t.Errorf("copied job %d: %s with %d attempts", bad.ID, j.State, len(j.Attempts))
	}
	next := s.submit("name: after\nentrypoint: [\"true\"]\n")
	if next.ID != bad.ID+1 {
		t.Errorf("the next job got id %d, want %d (ids continue)", next.ID, bad.ID+1)
	}
	if final := s.waitState(next.ID, 30*time.Second, "succeeded", "failed"); final.State != "succeeded" {
		t.Errorf("a job on the copied store: %s (%s)", final.State, final.Message)
	}
}

// An SQLite backup taken while the server runs restores with a verifying
// audit chain; a pg_dump of the PostgreSQL store restores into a new
// database and verifies too.
func TestBackupAndRestore(t *testing.T) {
	s := startServer(t, serverOpts{})
	j := s.submit("name: kept\nentrypoint: [\"true\"]\n")
	s.waitState(j.ID, 30*time.Second, "succeeded")
	backup := filepath.Join(t.TempDir(), "backup.db")
	out := runBinary(t, "store", "backup", "--from", filepath.Join(s.data, "trainyard.db"), "--to", backup)
	if !strings.Contains(out, "audit chain intact") {
		t.Fatalf("store backup: %s", out)
	}
	s.shutdown()
	if err := os.Rename(backup, filepath.Join(s.data, "trainyard.db")); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(s.data, "trainyard.db-wal"))
	os.Remove(filepath.Join(s.data, "trainyard.db-shm"))
	s.start()
	if got := s.job(j.ID); got.State != "succeeded" {
		t.Errorf("restored job: %s", got.State)
	}
	if v := s.mustCLI("audit", "verify"); !strings.Contains(v, "audit log intact") {
		t.Errorf("audit verify after restore: %s", v)
	}

	// PostgreSQL: pg_dump, restore into a fresh database, verify.
	dsn := pgtest.Schema(t)
	runBinary(t, "store", "copy", "--from", filepath.Join(s.data, "trainyard.db"), "--to", dsn)
	du, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema := du.Query().Get("search_path")
	dump := filepath.Join(t.TempDir(), "dump.sql")
	base := os.Getenv("TRAINYARD_TEST_POSTGRES")
	if out, err := exec.Command("pg_dump", "--no-owner", "-n", schema, "-f", dump, base).CombinedOutput(); err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	b := make([]byte, 4)
	rand.Read(b)
	dbName := "trainyard_restore_" + hex.EncodeToString(b)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+dbName); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.Exec(context.Background(), "DROP DATABASE "+dbName+" WITH (FORCE)")
		admin.Close(context.Background())
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("TRAINYARD_TEST_POSTGRES is not a URL: %v", err)
	}
	u.Path = "/" + dbName // whatever database the URL names
	restoreDSN := u.String()
	if out, err := exec.Command("psql", "-v", "ON_ERROR_STOP=1", "-q", "-f", dump, restoreDSN).CombinedOutput(); err != nil {
		t.Fatalf("restore the dump: %v\n%s", err, out)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	out = runBinary(t, "store", "verify", "--store", u.String())
	if !strings.Contains(out, "audit chain intact") {
		t.Errorf("store verify after pg restore: %s", out)
	}
}
