package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/column"
)

var _ store.Envs = (*Store)(nil)

// envLabel names an environment version in error messages.
func envLabel(name string, version int) string {
	if version == 0 {
		return fmt.Sprintf("environment %q", name)
	}
	return fmt.Sprintf("environment %s@%d", name, version)
}

// envColumns is the column list every environment query reads, in
// scanEnv's order.
const envColumns = `name, version, image, path_prefix, vars, check_argv, description, digest,
	deprecated, deprecated_reason, deprecated_at, created_by, created_at`

// PutEnv stores e as the next version of its environment; a version that is
// not exactly one more than the latest is store.ErrConflict.
func (s *Store) PutEnv(ctx context.Context, e domain.Environment, audit domain.AuditRecord) error {
	action := "put " + envLabel(e.Name, e.Version)
	if e.Name == "" || e.Version < 1 || e.Digest == "" {
		return fmt.Errorf("%s: name, a version from 1 and digest are required: %w", action, store.ErrInvalid)
	}
	prefix, vars, check, err := column.EnvColumns(e)
	if err != nil {
		return fmt.Errorf("%s: encode: %w", action, err)
	}
	return s.write(ctx, func(w *writer) error {
		var latest int
		if err := w.queryRow(`SELECT COALESCE(MAX(version), 0) FROM envs WHERE name = ?`, e.Name).Scan(&latest); err != nil {
			return interpretError(action, err)
		}
		if e.Version != latest+1 {
			return fmt.Errorf("%s: version %d is not the next one (latest is %d): %w", action, e.Version, latest, store.ErrConflict)
		}
		_, err := w.exec(`INSERT INTO envs (name, version, image, path_prefix, vars, check_argv, description, digest, created_by, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			e.Name, e.Version, e.Image, prefix, vars, check, e.Description, e.Digest,
			e.CreatedBy, timeArg(e.CreatedAt))
		return interpretError(action, err)
	}, withAudit(audit))
}

// GetEnv returns one version of an environment (the latest for version 0)
// or store.ErrNotFound.
func (s *Store) GetEnv(ctx context.Context, name string, version int) (domain.Environment, error) {
	action := "get " + envLabel(name, version)
	if err := s.checkOpen(); err != nil {
		return domain.Environment{}, err
	}
	st, err := s.readStmt(ctx, `SELECT `+envColumns+` FROM envs
		WHERE name = ? AND (? = 0 OR version = ?) ORDER BY version DESC LIMIT 1`)
	if err != nil {
		return domain.Environment{}, interpretError(action, err)
	}
	e, err := scanEnv(st.QueryRowContext(ctx, name, version, version))
	if err != nil {
		return domain.Environment{}, interpretError(action, err)
	}
	return e, nil
}

// ListEnvs returns every version of name ("" for all), ordered by name and
// version.
func (s *Store) ListEnvs(ctx context.Context, name string) ([]domain.Environment, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := s.readDB.QueryContext(ctx, `SELECT `+envColumns+` FROM envs
		WHERE (? = '' OR name = ?) ORDER BY name, version`, name, name)
	if err != nil {
		return nil, interpretError("list environments", err)
	}
	defer rows.Close()
	var out []domain.Environment
	for rows.Next() {
		e, err := scanEnv(rows)
		if err != nil {
			return nil, interpretError("list environments", err)
		}
		out = append(out, e)
	}
	return out, interpretError("list environments", rows.Err())
}

// DeprecateEnv marks one version (or, for 0, every version) deprecated;
// versions deprecated already are left as they are.
func (s *Store) DeprecateEnv(ctx context.Context, name string, version int, reason string, at time.Time, audit domain.AuditRecord) ([]int, error) {
	action := "deprecate " + envLabel(name, version)
	var marked []int
	err := s.write(ctx, func(w *writer) error {
		marked = marked[:0]
		var n int
		if err := w.queryRow(`SELECT COUNT(*) FROM envs WHERE name = ? AND (? = 0 OR version = ?)`,
			name, version, version).Scan(&n); err != nil {
			return interpretError(action, err)
		}
		if n == 0 {
			return fmt.Errorf("%s: %w", action, store.ErrNotFound)
		}
		rows, err := w.query(`UPDATE envs SET deprecated = 1, deprecated_reason = ?, deprecated_at = ?
			WHERE name = ? AND (? = 0 OR version = ?) AND deprecated = 0 RETURNING version`,
			reason, timeArg(at), name, version, version)
		if err != nil {
			return interpretError(action, err)
		}
		defer rows.Close()
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				return interpretError(action, err)
			}
			marked = append(marked, v)
		}
		return interpretError(action, rows.Err())
	}, withAudit(audit))
	if err != nil {
		return nil, err
	}
	// SQLite does not promise the order of RETURNING rows.
	slices.Sort(marked)
	return marked, nil
}

// scanEnv reads one envs row in envColumns order.
func scanEnv(row interface{ Scan(...any) error }) (domain.Environment, error) {
	var (
		e                     domain.Environment
		prefix, vars, check   string
		deprecated            int
		deprecatedAt, created sql.NullInt64
	)
	if err := row.Scan(&e.Name, &e.Version, &e.Image, &prefix, &vars, &check, &e.Description, &e.Digest,
		&deprecated, &e.DeprecatedReason, &deprecatedAt, &e.CreatedBy, &created); err != nil {
		return domain.Environment{}, err
	}
	if err := column.ParseEnvColumns(&e, prefix, vars, check); err != nil {
		return domain.Environment{}, err
	}
	e.Deprecated = deprecated != 0
	e.DeprecatedAt = timeOf(deprecatedAt)
	e.CreatedAt = timeOf(created)
	return e, nil
}
