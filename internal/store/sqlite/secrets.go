package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

var _ store.Secrets = (*Store)(nil)

// secretLabel names a secret in error messages.
func secretLabel(project, name string) string {
	if project == "" {
		return fmt.Sprintf("global secret %q", name)
	}
	return fmt.Sprintf("secret %q of project %q", name, project)
}

// PutSecret stores s as the next version of its secret; a version that is
// not exactly one more than the latest is store.ErrConflict.
func (s *Store) PutSecret(ctx context.Context, sec store.Secret, audit domain.AuditRecord) error {
	action := "put " + secretLabel(sec.Project, sec.Name)
	if sec.Name == "" || sec.KeyID == "" || len(sec.Nonce) == 0 || len(sec.Ciphertext) == 0 {
		return fmt.Errorf("%s: name, key id, nonce and ciphertext are required: %w", action, store.ErrInvalid)
	}
	return s.write(ctx, func(w *writer) error {
		var latest int
		if err := w.queryRow(`SELECT COALESCE(MAX(version), 0) FROM secrets WHERE project = ? AND name = ?`,
			sec.Project, sec.Name).Scan(&latest); err != nil {
			return interpretError(action, err)
		}
		if sec.Version != latest+1 {
			return fmt.Errorf("%s: version %d is not the next one (latest is %d): %w", action, sec.Version, latest, store.ErrConflict)
		}
		_, err := w.exec(`INSERT INTO secrets (project, name, version, key_id, nonce, ciphertext, created_by, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			sec.Project, sec.Name, sec.Version, sec.KeyID, sec.Nonce, sec.Ciphertext, sec.CreatedBy, timeArg(sec.CreatedAt))
		return interpretError(action, err)
	}, withAudit(audit))
}

// LatestSecret returns the newest version of (project, name) with its sealed
// value, or store.ErrNotFound.
func (s *Store) LatestSecret(ctx context.Context, project, name string) (store.Secret, error) {
	action := "get " + secretLabel(project, name)
	if err := s.checkOpen(); err != nil {
		return store.Secret{}, err
	}
	st, err := s.readStmt(ctx, `SELECT project, name, version, key_id, nonce, ciphertext, created_by, created_at
		FROM secrets WHERE project = ? AND name = ? ORDER BY version DESC LIMIT 1`)
	if err != nil {
		return store.Secret{}, interpretError(action, err)
	}
	var (
		sec     store.Secret
		created sql.NullInt64
	)
	if err := st.QueryRowContext(ctx, project, name).Scan(&sec.Project, &sec.Name, &sec.Version, &sec.KeyID,
		&sec.Nonce, &sec.Ciphertext, &sec.CreatedBy, &created); err != nil {
		return store.Secret{}, interpretError(action, err)
	}
	sec.CreatedAt = timeOf(created)
	return sec, nil
}

// ListSecrets returns the newest version of every secret without its sealed
// value, ordered by project then name.
func (s *Store) ListSecrets(ctx context.Context) ([]store.Secret, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := s.readDB.QueryContext(ctx, `SELECT project, name, version, key_id, created_by, created_at
		FROM secrets AS s
		WHERE version = (SELECT MAX(version) FROM secrets AS t WHERE t.project = s.project AND t.name = s.name)
		ORDER BY project, name`)
	if err != nil {
		return nil, interpretError("list secrets", err)
	}
	defer rows.Close()
	var out []store.Secret
	for rows.Next() {
		var (
			sec     store.Secret
			created sql.NullInt64
		)
		if err := rows.Scan(&sec.Project, &sec.Name, &sec.Version, &sec.KeyID, &sec.CreatedBy, &created); err != nil {
			return nil, interpretError("list secrets", err)
		}
		sec.CreatedAt = timeOf(created)
		out = append(out, sec)
	}
	return out, interpretError("list secrets", rows.Err())
}

// DeleteSecret removes every version of (project, name); store.ErrNotFound
// when there is none.
func (s *Store) DeleteSecret(ctx context.Context, project, name string, audit domain.AuditRecord) error {
	action := "delete " + secretLabel(project, name)
	return s.write(ctx, func(w *writer) error {
		res, err := w.exec(`DELETE FROM secrets WHERE project = ? AND name = ?`, project, name)
		if err != nil {
			return interpretError(action, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return interpretError(action, err)
		}
		if n == 0 {
			return fmt.Errorf("%s: %w", action, store.ErrNotFound)
		}
		return nil
	}, withAudit(audit))
}

// RekeySecrets reseals every stored version in one write request: the
// writer runs it inside its own savepoint, so either every version changes
// or none does, and no other write interleaves.
func (s *Store) RekeySecrets(ctx context.Context, reseal func(store.Secret) (store.Secret, error), audit domain.AuditRecord) (int, error) {
	var n int
	err := s.write(ctx, func(w *writer) error {
		n = 0
		rows, err := w.query(`SELECT project, name, version, key_id, nonce, ciphertext, created_by, created_at
			FROM secrets ORDER BY project, name, version`)
		if err != nil {
			return interpretError("rekey secrets: read", err)
		}
		var all []store.Secret
		for rows.Next() {
			var (
				sec     store.Secret
				created sql.NullInt64
			)
			if err := rows.Scan(&sec.Project, &sec.Name, &sec.Version, &sec.KeyID, &sec.Nonce, &sec.Ciphertext,
				&sec.CreatedBy, &created); err != nil {
				rows.Close()
				return interpretError("rekey secrets: read", err)
			}
			sec.CreatedAt = timeOf(created)
			all = append(all, sec)
		}
		if err := rows.Close(); err != nil {
			return interpretError("rekey secrets: read", err)
		}
		if err := rows.Err(); err != nil {
			return interpretError("rekey secrets: read", err)
		}
		for _, old := range all {
			nw, err := reseal(old)
			if err != nil {
				return err
			}
			if nw.KeyID == "" || len(nw.Nonce) == 0 || len(nw.Ciphertext) == 0 {
				return fmt.Errorf("rekey %s version %d: the resealed value is empty: %w", secretLabel(old.Project, old.Name), old.Version, store.ErrInvalid)
			}
			if _, err := w.exec(`UPDATE secrets SET key_id = ?, nonce = ?, ciphertext = ?
				WHERE project = ? AND name = ? AND version = ?`,
				nw.KeyID, nw.Nonce, nw.Ciphertext, old.Project, old.Name, old.Version); err != nil {
				return interpretError(fmt.Sprintf("rekey %s version %d", secretLabel(old.Project, old.Name), old.Version), err)
			}
		}
		n = len(all)
		return nil
	}, withAudit(audit))
	if err != nil {
		return 0, err
	}
	return n, nil
}
