package sqlstore

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

var (
	qEnvLatestVersion = Q(`SELECT COALESCE(MAX(version), 0) FROM envs WHERE name = ?`)
	qEnvInsert        = Q(`INSERT INTO envs (name, version, image, path_prefix, vars, check_argv, description, digest, created_by, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	qEnvGet = Q(`SELECT ` + envColumns + ` FROM envs
		WHERE name = ? AND (? = 0 OR version = ?) ORDER BY version DESC LIMIT 1`)
	qEnvList = Q(`SELECT ` + envColumns + ` FROM envs
		WHERE (? = '' OR name = ?) ORDER BY name{C}, version`)
	qEnvCount     = Q(`SELECT COUNT(*) FROM envs WHERE name = ? AND (? = 0 OR version = ?)`)
	qEnvDeprecate = Q(`UPDATE envs SET deprecated = 1, deprecated_reason = ?, deprecated_at = ?
		WHERE name = ? AND (? = 0 OR version = ?) AND deprecated = 0 RETURNING version`)
)

// PutEnv stores e as the next version of its environment; a version that is
// not exactly one more than the latest is store.ErrConflict (also when
// another replica stores the same version at the same moment).
func (s Shared) PutEnv(ctx context.Context, e domain.Environment, audit domain.AuditRecord) error {
	action := "put " + envLabel(e.Name, e.Version)
	if e.Name == "" || e.Version < 1 || e.Digest == "" {
		return fmt.Errorf("%s: name, a version from 1 and digest are required: %w", action, store.ErrInvalid)
	}
	prefix, vars, check, err := column.EnvColumns(e)
	if err != nil {
		return fmt.Errorf("%s: encode: %w", action, err)
	}
	return s.b.Write(ctx, func(x Exec) error {
		var latest int
		if err := x.QueryRow(qEnvLatestVersion, e.Name).Scan(&latest); err != nil {
			return s.err(action, err)
		}
		if e.Version != latest+1 {
			return fmt.Errorf("%s: version %d is not the next one (latest is %d): %w", action, e.Version, latest, store.ErrConflict)
		}
		return x.Queue(action, qEnvInsert, e.Name, e.Version, e.Image, prefix, vars, check, e.Description, e.Digest,
			e.CreatedBy, TimeArg(e.CreatedAt))
	}, audit)
}

// GetEnv returns one version of an environment (the latest for version 0)
// or store.ErrNotFound.
func (s Shared) GetEnv(ctx context.Context, name string, version int) (domain.Environment, error) {
	action := "get " + envLabel(name, version)
	r, err := s.b.Reader()
	if err != nil {
		return domain.Environment{}, err
	}
	e, err := scanEnv(r.QueryRow(ctx, qEnvGet, name, version, version))
	if err != nil {
		return domain.Environment{}, s.err(action, err)
	}
	return e, nil
}

// ListEnvs returns every version of name ("" for all), ordered by name and
// version.
func (s Shared) ListEnvs(ctx context.Context, name string) ([]domain.Environment, error) {
	return queryAll(ctx, s, "list environments", scanEnv, qEnvList, name, name)
}

// DeprecateEnv marks one version (or, for 0, every version) deprecated;
// versions deprecated already are left as they are.
func (s Shared) DeprecateEnv(ctx context.Context, name string, version int, reason string, at time.Time, audit domain.AuditRecord) ([]int, error) {
	action := "deprecate " + envLabel(name, version)
	var marked []int
	err := s.b.Write(ctx, func(x Exec) error {
		marked = marked[:0]
		var n int64
		if err := x.QueryRow(qEnvCount, name, version, version).Scan(&n); err != nil {
			return s.err(action, err)
		}
		if n == 0 {
			return fmt.Errorf("%s: %w", action, store.ErrNotFound)
		}
		return s.err(action, x.Query(func(row Row) error {
			var v int
			err := row.Scan(&v)
			marked = append(marked, v)
			return err
		}, qEnvDeprecate, reason, TimeArg(at), name, version, version))
	}, audit)
	if err != nil {
		return nil, err
	}
	// RETURNING rows come in no promised order.
	slices.Sort(marked)
	return marked, nil
}

// scanEnv reads one envs row in envColumns order.
func scanEnv(row Row) (domain.Environment, error) {
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
	e.DeprecatedAt = TimeOf(deprecatedAt)
	e.CreatedAt = TimeOf(created)
	return e, nil
}
