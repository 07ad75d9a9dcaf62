package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"trainyard/internal/domain"
)

// TestJobStateCheckBuildsNoTable: jobs.state's CHECK is a chain of
// comparisons, which SQLite evaluates without the temporary table a list of
// seven values costs on every insert and state update; it still refuses an
// unknown state, and a database migrated from the old text gets the new one.
func TestJobStateCheckBuildsNoTable(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "t.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	j, _, err := s.CreateJob(ctx, testNewJob(t, "a"), domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	const oldCheck = "CHECK (state IN ('queued', 'held', 'starting', 'running', 'succeeded', 'failed', 'canceled'))"
	check := func(when string) {
		t.Helper()
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var text string
		if err := db.QueryRow(`SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'jobs'`).Scan(&text); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(text, oldCheck) || !strings.Contains(text, "CHECK (state = 'queued' OR state = 'held'") {
			t.Fatalf("%s: jobs is %s", when, text)
		}
		for _, stmt := range []string{
			`UPDATE jobs SET state = 'running' WHERE id = 1`,
			`INSERT INTO jobs (name, project, pool, state, priority, submitter, spec_hash, submitted_at, updated_at) VALUES ('', '', '', 'queued', '', '', '', 0, 0)`,
		} {
			rows, err := db.Query("EXPLAIN " + stmt)
			if err != nil {
				t.Fatal(err)
			}
			ops := 0
			for rows.Next() {
				var addr, p1, p2, p3, p5 int64
				var op string
				var p4, comment any
				if err := rows.Scan(&addr, &op, &p1, &p2, &p3, &p4, &p5, &comment); err != nil {
					t.Fatal(err)
				}
				if op == "OpenEphemeral" {
					ops++
				}
			}
			rows.Close()
			if ops != 0 {
				t.Errorf("%s: %s opens %d temporary tables", when, stmt, ops)
			}
		}
		if _, err := db.Exec(`UPDATE jobs SET state = 'bogus' WHERE id = ?`, j.ID); err == nil || !strings.Contains(err.Error(), "CHECK constraint failed") {
			t.Errorf("%s: an unknown state was stored (err %v)", when, err)
		}
		var ok string
		if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
			t.Errorf("%s: integrity_check = %q, %v", when, ok, err)
		}
	}
	check("new database")

	// Put the old text back, as a database made before the migration has
	// it, and open it again: the migration rewrites it.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`PRAGMA writable_schema = ON`,
		`UPDATE sqlite_schema SET sql = replace(sql, 'CHECK (state = ''queued'' OR state = ''held'' OR state = ''starting'' OR state = ''running'' OR state = ''succeeded'' OR state = ''failed'' OR state = ''canceled'')', '` + strings.ReplaceAll(oldCheck, "'", "''") + `') WHERE name = 'jobs'`,
		`PRAGMA writable_schema = OFF`,
		`DELETE FROM schema_migrations WHERE name LIKE '%jobs_state_check%'`,
	} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	db.Close()
	s, err = Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetJob(ctx, j.ID); err != nil || got.Name != "a" {
		t.Fatalf("job after the migration: %v, %v", got.Name, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check("migrated database")
}
