package sqlite

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migration is one embedded schema change, numbered by its file name prefix
// ("0001_init.sql" is version 1).
type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations in version order.
func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	var ms []migration
	for _, e := range entries {
		name := e.Name()
		prefix, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(prefix)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("embedded migration %q is not named NNNN_description.sql", name)
		}
		body, err := fs.ReadFile(migrationFS, path.Join("migrations", name))
		if err != nil {
			return nil, fmt.Errorf("read embedded migration %s: %w", name, err)
		}
		ms = append(ms, migration{version: v, name: name, sql: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("embedded migrations %s and %s share version %d", ms[i-1].name, ms[i].name, ms[i].version)
		}
	}
	return ms, nil
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
	known := ms[len(ms)-1].version
	for v := range applied {
		if v > known {
			return fmt.Errorf("database schema version %d is newer than this build supports (%d); run a newer trainyard release", v, known)
		}
	}
	for _, m := range ms {
		if applied[m.version] {
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

func applyMigration(ctx context.Context, w *writer, m migration) (err error) {
	if _, err := w.conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return interpretError("begin migration "+m.name, err)
	}
	defer func() {
		if err != nil {
			_, _ = w.conn.ExecContext(context.Background(), "ROLLBACK")
		}
	}()
	// Another process may have applied it while we waited for the lock.
	var n int
	if err := w.conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations WHERE version = ?", m.version).Scan(&n); err != nil {
		return interpretError("check migration "+m.name, err)
	}
	if n > 0 {
		_, err := w.conn.ExecContext(ctx, "COMMIT")
		return interpretError("finish migration "+m.name, err)
	}
	if _, err := w.conn.ExecContext(ctx, m.sql); err != nil {
		return interpretError("apply migration "+m.name, err)
	}
	if _, err := w.conn.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
		m.version, m.name, time.Now().UTC().UnixNano()); err != nil {
		return interpretError("record migration "+m.name, err)
	}
	if _, err := w.conn.ExecContext(ctx, "COMMIT"); err != nil {
		return interpretError("commit migration "+m.name, err)
	}
	return nil
}
