package sqlite

import (
	"context"
	"embed"
	"fmt"
	"strings"
	"time"

	"trainyard/internal/store/sqlstore"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrations returns the embedded migrations in version order.
func migrations() ([]sqlstore.Migration, error) {
	return sqlstore.Migrations(migrationFS, "migrations")
}

// migrate applies, in order and each in its own transaction, every embedded
// migration not yet recorded in schema_migrations. Reopening an up-to-date
// database changes nothing.
func migrate(ctx context.Context, w *writer) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	if _, err := w.conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL
	)`); err != nil {
		return interpretError("create schema_migrations table", err)
	}
	applied, err := appliedVersions(ctx, w)
	if err != nil {
		return err
	}
	known := ms[len(ms)-1].Version
	for v := range applied {
		if v > known {
			return fmt.Errorf("database schema version %d is newer than this build supports (%d); run a newer trainyard release", v, known)
		}
	}
	for _, m := range ms {
		if applied[m.Version] {
			continue
		}
		if err := applyMigration(ctx, w, m); err != nil {
			return err
		}
	}
	return nil
}

// appliedVersions returns the versions recorded in schema_migrations.
func appliedVersions(ctx context.Context, w *writer) (map[int]bool, error) {
	rows, err := w.conn.QueryContext(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return nil, interpretError("read schema versions", err)
	}
	defer rows.Close()
	applied := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, interpretError("read schema versions", err)
		}
		applied[v] = true
	}
	return applied, interpretError("read schema versions", rows.Err())
}

func applyMigration(ctx context.Context, w *writer, m sqlstore.Migration) (err error) {
	if _, err := w.conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return interpretError("begin migration "+m.Name, err)
	}
	defer func() {
		if err != nil {
			_, _ = w.conn.ExecContext(context.Background(), "ROLLBACK")
		}
	}()
	// Another process may have applied it while we waited for the lock.
	var n int
	if err := w.conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations WHERE version = ?", m.Version).Scan(&n); err != nil {
		return interpretError("check migration "+m.Name, err)
	}
	if n > 0 {
		_, err := w.conn.ExecContext(ctx, "COMMIT")
		return interpretError("finish migration "+m.Name, err)
	}
	if _, err := w.conn.ExecContext(ctx, m.SQL); err != nil {
		return interpretError("apply migration "+m.Name, err)
	}
	if strings.Contains(m.SQL, "sqlite_schema") {
		// A migration that rewrote the schema's text in place: a new
		// schema version makes every connection read it again.
		var v int64
		if err := w.conn.QueryRowContext(ctx, "PRAGMA schema_version").Scan(&v); err != nil {
			return interpretError("read schema version in migration "+m.Name, err)
		}
		if _, err := w.conn.ExecContext(ctx, fmt.Sprintf("PRAGMA schema_version = %d", v+1)); err != nil {
			return interpretError("bump schema version in migration "+m.Name, err)
		}
	}
	if _, err := w.conn.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
		m.Version, m.Name, time.Now().UTC().UnixNano()); err != nil {
		return interpretError("record migration "+m.Name, err)
	}
	if _, err := w.conn.ExecContext(ctx, "COMMIT"); err != nil {
		return interpretError("commit migration "+m.Name, err)
	}
	return nil
}
