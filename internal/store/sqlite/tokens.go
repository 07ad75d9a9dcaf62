package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// CreateToken stores t with a new ID and returns it; a Hash already stored is
// store.ErrConflict.
func (s *Store) CreateToken(ctx context.Context, t store.Token, audit domain.AuditRecord) (store.Token, error) {
	if t.Hash == "" {
		return store.Token{}, fmt.Errorf("create token %q: the hash is empty; store the SHA-256 of the secret", t.Name)
	}
	var id int64
	err := s.write(ctx, func(w *writer) error {
		res, err := w.exec(`INSERT INTO tokens (name, subject, role, hash, created_at, expires_at, revoked_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`,
			t.Name, t.Subject, t.Role, t.Hash, timeArg(t.CreatedAt), timeArg(t.ExpiresAt), timeArg(t.RevokedAt))
		if err != nil {
			if isUniqueViolation(err) {
				return fmt.Errorf("create token %q: a token with the same hash already exists: %w", t.Name, store.ErrConflict)
			}
			return interpretError(fmt.Sprintf("create token %q", t.Name), err)
		}
		id, err = res.LastInsertId()
		return interpretError(fmt.Sprintf("create token %q: read new id", t.Name), err)
	}, withAudit(audit))
	if err != nil {
		return store.Token{}, err
	}
	t.ID = id
	t.CreatedAt, t.ExpiresAt, t.RevokedAt = normTime(t.CreatedAt), normTime(t.ExpiresAt), normTime(t.RevokedAt)
	return t, nil
}

// TokenByHash returns the token with that hash, or store.ErrNotFound.
func (s *Store) TokenByHash(ctx context.Context, hash string) (store.Token, error) {
	if err := s.checkOpen(); err != nil {
		return store.Token{}, err
	}
	st, err := s.readStmt(ctx, `SELECT id, name, subject, role, hash, created_at, expires_at, revoked_at
		FROM tokens WHERE hash = ?`)
	if err != nil {
		return store.Token{}, interpretError("look up token", err)
	}
	var (
		t                         store.Token
		created, expires, revoked sql.NullInt64
	)
	if err := st.QueryRowContext(ctx, hash).Scan(&t.ID, &t.Name, &t.Subject, &t.Role, &t.Hash,
		&created, &expires, &revoked); err != nil {
		return store.Token{}, interpretError("look up token", err)
	}
	t.CreatedAt, t.ExpiresAt, t.RevokedAt = timeOf(created), timeOf(expires), timeOf(revoked)
	return t, nil
}

// CountTokens returns how many tokens are stored, revoked and expired ones
// included.
func (s *Store) CountTokens(ctx context.Context) (int, error) {
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	var n int
	if err := s.readDB.QueryRowContext(ctx, `SELECT COUNT(*) FROM tokens`).Scan(&n); err != nil {
		return 0, interpretError("count tokens", err)
	}
	return n, nil
}
