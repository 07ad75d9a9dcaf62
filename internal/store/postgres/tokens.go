package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

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
		err := w.queryRow(`INSERT INTO tokens (name, subject, role, hash, created_at, expires_at, revoked_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id`,
			t.Name, t.Subject, t.Role, t.Hash, timeArg(t.CreatedAt), timeArg(t.ExpiresAt), timeArg(t.RevokedAt)).Scan(&id)
		if isUniqueViolation(err) {
			return fmt.Errorf("create token %q: a token with the same hash already exists: %w", t.Name, store.ErrConflict)
		}
		return interpretError(fmt.Sprintf("create token %q", t.Name), err)
	}, withAudit(audit))
	if err != nil {
		return store.Token{}, err
	}
	t.ID = id
	t.CreatedAt, t.ExpiresAt, t.RevokedAt = normTime(t.CreatedAt), normTime(t.ExpiresAt), normTime(t.RevokedAt)
	return t, nil
}

const tokenCols = `id, name, subject, role, hash, created_at, expires_at, revoked_at`

func scanToken(r rowScanner) (store.Token, error) {
	var (
		t                         store.Token
		created, expires, revoked pgtype.Int8
	)
	if err := r.Scan(&t.ID, &t.Name, &t.Subject, &t.Role, &t.Hash, &created, &expires, &revoked); err != nil {
		return store.Token{}, err
	}
	t.CreatedAt, t.ExpiresAt, t.RevokedAt = timeOf(created), timeOf(expires), timeOf(revoked)
	return t, nil
}

// TokenByHash returns the token with that hash, or store.ErrNotFound.
func (s *Store) TokenByHash(ctx context.Context, hash string) (store.Token, error) {
	if err := s.checkOpen(); err != nil {
		return store.Token{}, err
	}
	t, err := scanToken(s.pool.QueryRow(ctx, `SELECT `+tokenCols+` FROM tokens WHERE hash = $1`, hash))
	if err != nil {
		return store.Token{}, interpretError("look up token", err)
	}
	return t, nil
}

// CountTokens returns how many tokens are stored, revoked and expired ones
// included.
func (s *Store) CountTokens(ctx context.Context) (int, error) {
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT COUNT(*) FROM tokens`).Scan(&n); err != nil {
		return 0, interpretError("count tokens", err)
	}
	return int(n), nil
}
