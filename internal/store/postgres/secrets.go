package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

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

// PutSecret stores s as the next version of its secret; a version that is
// not exactly one more than the latest is store.ErrConflict (also when
// another replica stores the same version at the same moment).
func (s *Store) PutSecret(ctx context.Context, sec store.Secret, audit domain.AuditRecord) error {
	action := "put " + secretLabel(sec.Project, sec.Name)
	if sec.Name == "" || sec.KeyID == "" || len(sec.Nonce) == 0 || len(sec.Ciphertext) == 0 {
		return fmt.Errorf("%s: name, key id, nonce and ciphertext are required: %w", action, store.ErrInvalid)
	}
	return s.write(ctx, func(w *writer) error {
		var latest int32
		if err := w.queryRow(`SELECT COALESCE(MAX(version), 0) FROM secrets WHERE project = $1 AND name = $2`,
			sec.Project, sec.Name).Scan(&latest); err != nil {
			return interpretError(action, err)
		}
		if sec.Version != int(latest)+1 {
			return fmt.Errorf("%s: version %d is not the next one (latest is %d): %w", action, sec.Version, latest, store.ErrConflict)
		}
		w.queue(action, `INSERT INTO secrets (project, name, version, key_id, nonce, ciphertext, created_by, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			sec.Project, sec.Name, sec.Version, sec.KeyID, sec.Nonce, sec.Ciphertext, sec.CreatedBy, timeArg(sec.CreatedAt))
		return nil
	}, withAudit(audit))
}

const secretCols = `project, name, version, key_id, nonce, ciphertext, created_by, created_at`

func scanSecret(sc rowScanner) (store.Secret, error) {
	var (
		sec     store.Secret
		version int32
		created pgtype.Int8
	)
	if err := sc.Scan(&sec.Project, &sec.Name, &version, &sec.KeyID, &sec.Nonce, &sec.Ciphertext, &sec.CreatedBy, &created); err != nil {
		return store.Secret{}, err
	}
	sec.Version, sec.CreatedAt = int(version), timeOf(created)
	return sec, nil
}

// LatestSecret returns the newest version of (project, name) with its sealed
// value, or store.ErrNotFound.
func (s *Store) LatestSecret(ctx context.Context, project, name string) (store.Secret, error) {
	action := "get " + secretLabel(project, name)
	if err := s.checkOpen(); err != nil {
		return store.Secret{}, err
	}
	sec, err := scanSecret(s.pool.QueryRow(ctx, `SELECT `+secretCols+`
		FROM secrets WHERE project = $1 AND name = $2 ORDER BY version DESC LIMIT 1`, project, name))
	if err != nil {
		return store.Secret{}, interpretError(action, err)
	}
	return sec, nil
}

// ListSecrets returns the newest version of every secret without its sealed
// value, ordered by project then name.
func (s *Store) ListSecrets(ctx context.Context) ([]store.Secret, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT ON (project COLLATE "C", name COLLATE "C")
		project, name, version, key_id, created_by, created_at
		FROM secrets ORDER BY project COLLATE "C", name COLLATE "C", version DESC`)
	if err != nil {
		return nil, interpretError("list secrets", err)
	}
	defer rows.Close()
	var out []store.Secret
	for rows.Next() {
		var (
			sec     store.Secret
			version int32
			created pgtype.Int8
		)
		if err := rows.Scan(&sec.Project, &sec.Name, &version, &sec.KeyID, &sec.CreatedBy, &created); err != nil {
			return nil, interpretError("list secrets", err)
		}
		sec.Version, sec.CreatedAt = int(version), timeOf(created)
		out = append(out, sec)
	}
	return out, interpretError("list secrets", rows.Err())
}

// DeleteSecret removes every version of (project, name); store.ErrNotFound
// when there is none.
func (s *Store) DeleteSecret(ctx context.Context, project, name string, audit domain.AuditRecord) error {
	action := "delete " + secretLabel(project, name)
	return s.write(ctx, func(w *writer) error {
		tag, err := w.exec(`DELETE FROM secrets WHERE project = $1 AND name = $2`, project, name)
		if err != nil {
			return interpretError(action, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%s: %w", action, store.ErrNotFound)
		}
		return nil
	}, withAudit(audit))
}

// RekeySecrets reseals every stored version in one write request, inside its
// own savepoint, so either every version changes or none does. It locks the
// secrets table against other writers (on any replica) until the
// transaction ends, so no write interleaves.
func (s *Store) RekeySecrets(ctx context.Context, reseal func(store.Secret) (store.Secret, error), audit domain.AuditRecord) (int, error) {
	var n int
	err := s.write(ctx, func(w *writer) error {
		n = 0
		w.queue("rekey secrets: lock the secrets table", `LOCK TABLE secrets IN EXCLUSIVE MODE`)
		var all []store.Secret
		if err := w.queryRows(func(rows pgx.Rows) error {
			sec, err := scanSecret(rows)
			all = append(all, sec)
			return err
		}, `SELECT `+secretCols+` FROM secrets ORDER BY project, name, version`); err != nil {
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
			w.queue(fmt.Sprintf("rekey %s version %d", secretLabel(old.Project, old.Name), old.Version),
				`UPDATE secrets SET key_id = $1, nonce = $2, ciphertext = $3 WHERE project = $4 AND name = $5 AND version = $6`,
				nw.KeyID, nw.Nonce, nw.Ciphertext, old.Project, old.Name, old.Version)
		}
		n = len(all)
		return nil
	}, withAudit(audit))
	if err != nil {
		return 0, err
	}
	return n, nil
}
