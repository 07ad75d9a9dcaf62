package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

const tokenCols = `id, name, subject, role, hash, created_at, expires_at, revoked_at`

var (
	qUserInsert  = Q(`INSERT INTO users (name, created_at) VALUES (?, ?)`)
	qUserGet     = Q(`SELECT name, created_at FROM users WHERE name = ?`)
	qUserList    = Q(`SELECT name, created_at FROM users ORDER BY name{C}`)
	qUserCount   = Q(`SELECT COUNT(*) FROM users WHERE name = ?`)
	qRoles       = Q(`SELECT user_name, project, role FROM role_bindings WHERE (? = '' OR user_name = ?) ORDER BY user_name{C}, project{C}, role{C}`)
	qRoleGrant   = Q(`INSERT INTO role_bindings (user_name, project, role, created_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`)
	qRoleRevoke  = Q(`DELETE FROM role_bindings WHERE user_name = ? AND project = ? AND role = ?`)
	qTokenInsert = Q(`INSERT INTO tokens (name, subject, role, hash, created_at, expires_at, revoked_at)
		VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`)
	qTokenByHash       = Q(`SELECT ` + tokenCols + ` FROM tokens WHERE hash = ?`)
	qTokenByID         = Q(`SELECT ` + tokenCols + ` FROM tokens WHERE id = ?`)
	qTokenCount        = Q(`SELECT COUNT(*) FROM tokens`)
	qTokenList         = Q(`SELECT ` + tokenCols + ` FROM tokens WHERE (? = '' OR subject = ?) ORDER BY id`)
	qTokenRevoke       = Q(`UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`)
	qTokenDeleteOfSubj = Q(`DELETE FROM tokens WHERE subject = ?`)
	qTokenDelete       = Q(`DELETE FROM tokens WHERE id = ?`)
	qTokenInsertNoID   = Q(`INSERT INTO tokens (name, subject, role, hash, created_at, expires_at, revoked_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`)
)

// CreateUser stores u; an existing name is store.ErrConflict.
func (s Shared) CreateUser(ctx context.Context, u domain.User, audit domain.AuditRecord) (domain.User, error) {
	err := s.b.Write(ctx, func(x Exec) error {
		_, err := x.Exec(qUserInsert, u.Name, TimeArg(u.CreatedAt))
		if s.b.IsUniqueViolation(err) {
			return fmt.Errorf("create user %q: a user with that name exists: %w", u.Name, store.ErrConflict)
		}
		return s.err(fmt.Sprintf("create user %q", u.Name), err)
	}, audit)
	if err != nil {
		return domain.User{}, err
	}
	return domain.User{Name: u.Name, CreatedAt: NormTime(u.CreatedAt)}, nil
}

// GetUser returns the named user with its roles, or store.ErrNotFound.
func (s Shared) GetUser(ctx context.Context, name string) (domain.User, error) {
	r, err := s.b.Reader()
	if err != nil {
		return domain.User{}, err
	}
	var (
		u       domain.User
		created sql.NullInt64
	)
	if err := r.QueryRow(ctx, qUserGet, name).Scan(&u.Name, &created); err != nil {
		return domain.User{}, s.err(fmt.Sprintf("look up user %q", name), err)
	}
	u.CreatedAt = TimeOf(created)
	roles, err := s.roles(ctx, r, name)
	if err != nil {
		return domain.User{}, err
	}
	u.Roles = roles[name]
	return u, nil
}

// ListUsers returns every user with its roles, by name.
func (s Shared) ListUsers(ctx context.Context) ([]domain.User, error) {
	r, err := s.b.Reader()
	if err != nil {
		return nil, err
	}
	var users []domain.User
	if err := r.Query(ctx, func(row Row) error {
		var (
			u       domain.User
			created sql.NullInt64
		)
		if err := row.Scan(&u.Name, &created); err != nil {
			return err
		}
		u.CreatedAt = TimeOf(created)
		users = append(users, u)
		return nil
	}, qUserList); err != nil {
		return nil, s.err("list users", err)
	}
	roles, err := s.roles(ctx, r, "")
	if err != nil {
		return nil, err
	}
	for i := range users {
		users[i].Roles = roles[users[i].Name]
	}
	return users, nil
}

// roles returns the role bindings of user ("" for every user), global ones
// first, then by project and role.
func (s Shared) roles(ctx context.Context, r Reader, user string) (map[string][]domain.RoleBinding, error) {
	out := map[string][]domain.RoleBinding{}
	if err := r.Query(ctx, func(row Row) error {
		var name, project, role string
		if err := row.Scan(&name, &project, &role); err != nil {
			return err
		}
		out[name] = append(out[name], domain.RoleBinding{Project: project, Role: domain.Role(role)})
		return nil
	}, qRoles, user, user); err != nil {
		return nil, s.err("list roles", err)
	}
	return out, nil
}

// GrantRole gives user the binding; created is false when it was held.
func (s Shared) GrantRole(ctx context.Context, user string, b domain.RoleBinding, at time.Time, audit domain.AuditRecord) (created bool, err error) {
	err = s.b.Write(ctx, func(x Exec) error {
		var n int64
		if err := x.QueryRow(qUserCount, user).Scan(&n); err != nil {
			return s.err("grant role: look up user", err)
		}
		if n == 0 {
			return fmt.Errorf("grant role: user %q does not exist: %w", user, store.ErrNotFound)
		}
		rows, err := x.Exec(qRoleGrant, user, b.Project, string(b.Role), TimeArg(at))
		if err != nil {
			return s.err(fmt.Sprintf("grant role %s to %q", b, user), err)
		}
		created = rows > 0
		return nil
	}, audit)
	return created, err
}

// RevokeRole takes the binding away; store.ErrNotFound when it is not held.
func (s Shared) RevokeRole(ctx context.Context, user string, b domain.RoleBinding, audit domain.AuditRecord) error {
	return s.b.Write(ctx, func(x Exec) error {
		n, err := x.Exec(qRoleRevoke, user, b.Project, string(b.Role))
		if err != nil {
			return s.err(fmt.Sprintf("revoke role %s from %q", b, user), err)
		}
		if n == 0 {
			return fmt.Errorf("revoke role: user %q does not hold %s: %w", user, b, store.ErrNotFound)
		}
		return nil
	}, audit)
}

// CreateToken stores t with a new ID and returns it; a Hash already stored is
// store.ErrConflict.
func (s Shared) CreateToken(ctx context.Context, t store.Token, audit domain.AuditRecord) (store.Token, error) {
	if t.Hash == "" {
		return store.Token{}, fmt.Errorf("create token %q: the hash is empty; store the SHA-256 of the secret", t.Name)
	}
	var id int64
	err := s.b.Write(ctx, func(x Exec) error {
		err := x.QueryRow(qTokenInsert,
			t.Name, t.Subject, t.Role, t.Hash, TimeArg(t.CreatedAt), TimeArg(t.ExpiresAt), TimeArg(t.RevokedAt)).Scan(&id)
		if s.b.IsUniqueViolation(err) {
			return fmt.Errorf("create token %q: a token with the same hash already exists: %w", t.Name, store.ErrConflict)
		}
		return s.err(fmt.Sprintf("create token %q", t.Name), err)
	}, audit)
	if err != nil {
		return store.Token{}, err
	}
	t.ID = id
	t.CreatedAt, t.ExpiresAt, t.RevokedAt = NormTime(t.CreatedAt), NormTime(t.ExpiresAt), NormTime(t.RevokedAt)
	return t, nil
}

// CreateTokens stores ts in one transaction.
func (s Shared) CreateTokens(ctx context.Context, ts []store.Token, audit ...domain.AuditRecord) error {
	for _, t := range ts {
		if t.Hash == "" {
			return fmt.Errorf("create token %q: the hash is empty; store the SHA-256 of the secret", t.Name)
		}
	}
	return s.b.Write(ctx, func(x Exec) error {
		for _, t := range ts {
			err := x.QueueCheck(func(_ int64, err error) error {
				if s.b.IsUniqueViolation(err) {
					return fmt.Errorf("create token %q: a token with the same hash already exists: %w", t.Name, store.ErrConflict)
				}
				return s.err(fmt.Sprintf("create token %q", t.Name), err)
			}, qTokenInsertNoID, t.Name, t.Subject, t.Role, t.Hash, TimeArg(t.CreatedAt), TimeArg(t.ExpiresAt), TimeArg(t.RevokedAt))
			if err != nil {
				return err
			}
		}
		return nil
	}, audit...)
}

func scanToken(row Row) (store.Token, error) {
	var (
		t                         store.Token
		created, expires, revoked sql.NullInt64
	)
	if err := row.Scan(&t.ID, &t.Name, &t.Subject, &t.Role, &t.Hash, &created, &expires, &revoked); err != nil {
		return store.Token{}, err
	}
	t.CreatedAt, t.ExpiresAt, t.RevokedAt = TimeOf(created), TimeOf(expires), TimeOf(revoked)
	return t, nil
}

// TokenByHash returns the token with that hash, or store.ErrNotFound.
func (s Shared) TokenByHash(ctx context.Context, hash string) (store.Token, error) {
	r, err := s.b.Reader()
	if err != nil {
		return store.Token{}, err
	}
	t, err := scanToken(r.QueryRow(ctx, qTokenByHash, hash))
	if err != nil {
		return store.Token{}, s.err("look up token", err)
	}
	return t, nil
}

// CountTokens returns how many tokens are stored, revoked and expired ones
// included.
func (s Shared) CountTokens(ctx context.Context) (int, error) {
	r, err := s.b.Reader()
	if err != nil {
		return 0, err
	}
	var n int64
	if err := r.QueryRow(ctx, qTokenCount).Scan(&n); err != nil {
		return 0, s.err("count tokens", err)
	}
	return int(n), nil
}

// GetToken returns the token with that id, or store.ErrNotFound.
func (s Shared) GetToken(ctx context.Context, id int64) (store.Token, error) {
	r, err := s.b.Reader()
	if err != nil {
		return store.Token{}, err
	}
	t, err := scanToken(r.QueryRow(ctx, qTokenByID, id))
	if err != nil {
		return store.Token{}, s.err(fmt.Sprintf("look up token %d", id), err)
	}
	return t, nil
}

// ListTokens returns the tokens of subject ("" for all), by id.
func (s Shared) ListTokens(ctx context.Context, subject string) ([]store.Token, error) {
	return queryAll(ctx, s, "list tokens", scanToken, qTokenList, subject, subject)
}

// RevokeToken marks the token revoked (keeping an earlier revocation time).
func (s Shared) RevokeToken(ctx context.Context, id int64, at time.Time, audit domain.AuditRecord) (store.Token, error) {
	var t store.Token
	action := fmt.Sprintf("revoke token %d", id)
	err := s.b.Write(ctx, func(x Exec) error {
		if err := x.Queue(action, qTokenRevoke, TimeArg(at), id); err != nil {
			return err
		}
		var err error
		t, err = scanToken(x.QueryRow(qTokenByID, id))
		return s.err(action, err)
	}, audit)
	return t, err
}

// DeleteTokens deletes the tokens with those ids.
func (s Shared) DeleteTokens(ctx context.Context, ids []int64, audit ...domain.AuditRecord) (int, error) {
	return deleteEach(ctx, s, qTokenDelete, ids, func(id int64) string { return fmt.Sprintf("delete token %d", id) }, audit)
}

// deleteEach runs q with each key, in one transaction with audit, and
// returns how many rows they deleted; action names a key's failure.
func deleteEach[K any](ctx context.Context, s Shared, q Query, keys []K, action func(K) string, audit []domain.AuditRecord) (int, error) {
	var n int64
	err := s.b.Write(ctx, func(x Exec) error {
		n = 0 // fn runs again when the writer runs the batch a second time
		for _, k := range keys {
			err := x.QueueCheck(func(rows int64, err error) error {
				n += rows
				return s.err(action(k), err)
			}, q, k)
			if err != nil {
				return err
			}
		}
		return nil
	}, audit...)
	return int(n), err
}
