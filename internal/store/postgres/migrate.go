package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"trainyard/internal/store/sqlstore"

	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrations returns the embedded migrations in version order.
func migrations() ([]sqlstore.Migration, error) {
	return sqlstore.Migrations(migrationFS, "migrations")
}

// migrationLockSQL takes a session-level advisory lock on a fixed key per
// schema, so replicas starting at once apply each migration exactly once.
const (
	migrationLockSQL   = `SELECT pg_advisory_lock(1952540017, hashtext(COALESCE(current_schema(), '')))`
	migrationUnlockSQL = `SELECT pg_advisory_unlock(1952540017, hashtext(COALESCE(current_schema(), '')))`
)

// migrate applies, in order and each in its own transaction, every embedded
// migration not yet recorded in schema_migrations, holding the migration
// lock throughout. Opening an up-to-date database changes nothing.
func migrate(ctx context.Context, pool *pgxpool.Pool) (err error) {
	ms, err := migrations()
	if err != nil {
		return err
	}
	c, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer c.Release()
	conn := c.Conn()
	var schema *string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return interpretError("read the current schema", err)
	}
	if schema == nil {
		return errors.New("no schema of the connection's search_path exists; create it, or set search_path to an existing schema (e.g. public)")
	}
	if _, err := conn.Exec(ctx, migrationLockSQL); err != nil {
		return interpretError("take the migration lock", err)
	}
	defer func() {
		if _, uerr := conn.Exec(context.Background(), migrationUnlockSQL); uerr != nil && err == nil {
			err = interpretError("release the migration lock", uerr)
		}
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at BIGINT  NOT NULL
	)`); err != nil {
		return interpretError("create schema_migrations table in schema "+*schema, err)
	}
	applied := map[int]bool{}
	rows, err := conn.Query(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return interpretError("read schema versions", err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return interpretError("read schema versions", err)
		}
		applied[v] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return interpretError("read schema versions", err)
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
		tx, err := conn.Begin(ctx)
		if err != nil {
			return interpretError("begin migration "+m.Name, err)
		}
		// The simple protocol runs the file's several statements at once.
		if _, err := tx.Conn().PgConn().Exec(ctx, m.SQL).ReadAll(); err != nil {
			_ = tx.Rollback(context.Background())
			return interpretError("apply migration "+m.Name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
			m.Version, m.Name, time.Now().UTC().UnixNano()); err != nil {
			_ = tx.Rollback(context.Background())
			return interpretError("record migration "+m.Name, err)
		}
		if err := tx.Commit(ctx); err != nil {
			return interpretError("commit migration "+m.Name, err)
		}
	}
	return nil
}
