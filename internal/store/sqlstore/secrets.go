package sqlstore

import (
	"context"
	"database/sql"
	"fmt"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// secretLabel names a secret in error messages.
func secretLabel(project, name string) string {
	if project == "" {
		return fmt.Sprintf("global secret %q", name)
	}
	return fmt.Sprintf("secret %q of project %q", name, project)
}

const secretCols = `project, name, version, key_id, nonce, ciphertext, created_by, created_at`

var (
	qSecretLatestVersion = Q(`SELECT COALESCE(MAX(version), 0) FROM secrets WHERE project = ? AND name = ?`)
	qSecretInsert        = Q(`INSERT INTO secrets (` + secretCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
	qSecretLatest        = Q(`SELECT ` + secretCols + `
		FROM secrets WHERE project = ? AND name = ? ORDER BY version DESC LIMIT 1`)
	qSecretList = Each(`SELECT project, name, version, key_id, created_by, created_at
		FROM secrets AS s
		WHERE version = (SELECT MAX(version) FROM secrets AS t WHERE t.project = s.project AND t.name = s.name)
		ORDER BY project, name`,
		`SELECT DISTINCT ON (project COLLATE "C", name COLLATE "C")
		project, name, version, key_id, created_by, created_at
		FROM secrets ORDER BY project COLLATE "C", name COLLATE "C", version DESC`)
	qSecretDelete = Q(`DELETE FROM secrets WHERE project = ? AND name = ?`)
	qSecretLock   = Q(`LOCK TABLE secrets IN EXCLUSIVE MODE`) // PostgreSQL only
	qSecretAll    = Q(`SELECT ` + secretCols + ` FROM secrets ORDER BY project, name, version`)
	qSecretReseal = Q(`UPDATE secrets SET key_id = ?, nonce = ?, ciphertext = ?
		WHERE project = ? AND name = ? AND version = ?`)
)

// PutSecret stores s as the next version of its secret; a version that is
// not exactly one more than the latest is store.ErrConflict (also when
// another replica stores the same version at the same moment).
func (s Shared) PutSecret(ctx context.Context, sec store.Secret, audit domain.AuditRecord) error {
	action := "put " + secretLabel(sec.Project, sec.Name)
	if sec.Name == "" || sec.KeyID == "" || len(sec.Nonce) == 0 || len(sec.Ciphertext) == 0 {
		return fmt.Errorf("%s: name, key id, nonce and ciphertext are required: %w", action, store.ErrInvalid)
	}
	return s.b.Write(ctx, func(x Exec) error {
		var latest int
		if err := x.QueryRow(qSecretLatestVersion, sec.Project, sec.Name).Scan(&latest); err != nil {
			return s.err(action, err)
		}
		if sec.Version != latest+1 {
			return fmt.Errorf("%s: version %d is not the next one (latest is %d): %w", action, sec.Version, latest, store.ErrConflict)
		}
		return x.Queue(action, qSecretInsert,
			sec.Project, sec.Name, sec.Version, sec.KeyID, sec.Nonce, sec.Ciphertext, sec.CreatedBy, TimeArg(sec.CreatedAt))
	}, audit)
}

// scanSecret reads one secrets row in secretCols order.
func scanSecret(row Row) (store.Secret, error) {
	var (
		sec     store.Secret
		created sql.NullInt64
	)
	if err := row.Scan(&sec.Project, &sec.Name, &sec.Version, &sec.KeyID, &sec.Nonce, &sec.Ciphertext, &sec.CreatedBy, &created); err != nil {
		return store.Secret{}, err
	}
	sec.CreatedAt = TimeOf(created)
	return sec, nil
}

// LatestSecret returns the newest version of (project, name) with its sealed
// value, or store.ErrNotFound.
func (s Shared) LatestSecret(ctx context.Context, project, name string) (store.Secret, error) {
	action := "get " + secretLabel(project, name)
	r, err := s.b.Reader()
	if err != nil {
		return store.Secret{}, err
	}
	sec, err := scanSecret(r.QueryRow(ctx, qSecretLatest, project, name))
	if err != nil {
		return store.Secret{}, s.err(action, err)
	}
	return sec, nil
}

// ListSecrets returns the newest version of every secret without its sealed
// value, ordered by project then name.
func (s Shared) ListSecrets(ctx context.Context) ([]store.Secret, error) {
	r, err := s.b.Reader()
	if err != nil {
		return nil, err
	}
	var out []store.Secret
	err = r.Query(ctx, func(row Row) error {
		var (
			sec     store.Secret
			created sql.NullInt64
		)
		if err := row.Scan(&sec.Project, &sec.Name, &sec.Version, &sec.KeyID, &sec.CreatedBy, &created); err != nil {
			return err
		}
		sec.CreatedAt = TimeOf(created)
		out = append(out, sec)
		return nil
	}, qSecretList)
	if err != nil {
		return nil, s.err("list secrets", err)
	}
	return out, nil
}

// DeleteSecret removes every version of (project, name); store.ErrNotFound
// when there is none.
func (s Shared) DeleteSecret(ctx context.Context, project, name string, audit domain.AuditRecord) error {
	action := "delete " + secretLabel(project, name)
	return s.b.Write(ctx, func(x Exec) error {
		n, err := x.Exec(qSecretDelete, project, name)
		if err != nil {
			return s.err(action, err)
		}
		if n == 0 {
			return fmt.Errorf("%s: %w", action, store.ErrNotFound)
		}
		return nil
	}, audit)
}

// RekeySecrets reseals every stored version in one write request, inside its
// own savepoint, so either every version changes or none does, and no other
// write interleaves: SQLite has one writer, and on PostgreSQL the request
// locks the secrets table against other writers (on any replica) until the
// transaction ends.
func (s Shared) RekeySecrets(ctx context.Context, reseal func(store.Secret) (store.Secret, error), audit domain.AuditRecord) (int, error) {
	var n int
	err := s.b.Write(ctx, func(x Exec) error {
		n = 0
		if s.e == Postgres {
			if err := x.Queue("rekey secrets: lock the secrets table", qSecretLock); err != nil {
				return err
			}
		}
		var all []store.Secret
		if err := x.Query(func(row Row) error {
			sec, err := scanSecret(row)
			all = append(all, sec)
			return err
		}, qSecretAll); err != nil {
			return s.err("rekey secrets: read", err)
		}
		for _, old := range all {
			nw, err := reseal(old)
			if err != nil {
				return err
			}
			if nw.KeyID == "" || len(nw.Nonce) == 0 || len(nw.Ciphertext) == 0 {
				return fmt.Errorf("rekey %s version %d: the resealed value is empty: %w", secretLabel(old.Project, old.Name), old.Version, store.ErrInvalid)
			}
			if err := x.Queue(fmt.Sprintf("rekey %s version %d", secretLabel(old.Project, old.Name), old.Version),
				qSecretReseal, nw.KeyID, nw.Nonce, nw.Ciphertext, old.Project, old.Name, old.Version); err != nil {
				return err
			}
		}
		n = len(all)
		return nil
	}, audit)
	if err != nil {
		return 0, err
	}
	return n, nil
}
