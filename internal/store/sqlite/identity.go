package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// CreateUser stores u; an existing name is store.ErrConflict.
func (s *Store) CreateUser(ctx context.Context, u domain.User, audit domain.AuditRecord) (domain.User, error) {
	err := s.write(ctx, func(w *writer) error {
		_, err := w.exec(`INSERT INTO users (name, created_at) VALUES (?, ?)`, u.Name, timeArg(u.CreatedAt))
		if isUniqueViolation(err) {
			return fmt.Errorf("create user %q: a user with that name exists: %w", u.Name, store.ErrConflict)
		}
		return interpretError(fmt.Sprintf("create user %q", u.Name), err)
	}, withAudit(audit))
	if err != nil {
		return domain.User{}, err
	}
	return domain.User{Name: u.Name, CreatedAt: normTime(u.CreatedAt)}, nil
}

// GetUser returns the named user with its roles, or store.ErrNotFound.
func (s *Store) GetUser(ctx context.Context, name string) (domain.User, error) {
	if err := s.checkOpen(); err != nil {
		return domain.User{}, err
	}
	st, err := s.readStmt(ctx, `SELECT name, created_at FROM users WHERE name = ?`)
	if err != nil {
		return domain.User{}, interpretError("look up user", err)
	}
	var (
		u       domain.User
		created sql.NullInt64
	)
	if err := st.QueryRowContext(ctx, name).Scan(&u.Name, &created); err != nil {
		return domain.User{}, interpretError(fmt.Sprintf("look up user %q", name), err)
	}
	u.CreatedAt = timeOf(created)
	roles, err := s.roles(ctx, name)
	if err != nil {
		return domain.User{}, err
	}
	u.Roles = roles[name]
	return u, nil
}

// ListUsers returns every user with its roles, by name.
func (s *Store) ListUsers(ctx context.Context) ([]domain.User, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := s.readDB.QueryContext(ctx, `SELECT name, created_at FROM users ORDER BY name`)
	if err != nil {
		return nil, interpretError("list users", err)
	}
	defer rows.Close()
	var users []domain.User
	for rows.Next() {
		var (
			u       domain.User
			created sql.NullInt64
		)
		if err := rows.Scan(&u.Name, &created); err != nil {
			return nil, interpretError("list users", err)
		}
		u.CreatedAt = timeOf(created)
		users = append(users, u)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("list users", err)
	}
	roles, err := s.roles(ctx, "")
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
func (s *Store) roles(ctx context.Context, user string) (map[string][]domain.RoleBinding, error) {
	q := `SELECT user_name, project, role FROM role_bindings`
	var args []any
	if user != "" {
		q += ` WHERE user_name = ?`
		args = append(args, user)
	}
	q += ` ORDER BY user_name, project, role`
	st, err := s.readStmt(ctx, q)
	if err != nil {
		return nil, interpretError("list roles", err)
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, interpretError("list roles", err)
	}
	defer rows.Close()
	out := map[string][]domain.RoleBinding{}
	for rows.Next() {
		var name string
		var b domain.RoleBinding
		if err := rows.Scan(&name, &b.Project, &b.Role); err != nil {
			return nil, interpretError("list roles", err)
		}
		out[name] = append(out[name], b)
	}
	return out, interpretError("list roles", rows.Err())
}

// GrantRole gives user the binding; created is false when it was held.
func (s *Store) GrantRole(ctx context.Context, user string, b domain.RoleBinding, at time.Time, audit domain.AuditRecord) (created bool, err error) {
	err = s.write(ctx, func(w *writer) error {
		var n int
		if err := w.queryRow(`SELECT COUNT(*) FROM users WHERE name = ?`, user).Scan(&n); err != nil {
			return interpretError("grant role: look up user", err)
		}
		if n == 0 {
			return fmt.Errorf("grant role: user %q does not exist: %w", user, store.ErrNotFound)
		}
		res, err := w.exec(`INSERT OR IGNORE INTO role_bindings (user_name, project, role, created_at) VALUES (?, ?, ?, ?)`,
			user, b.Project, string(b.Role), timeArg(at))
		if err != nil {
			return interpretError(fmt.Sprintf("grant role %s to %q", b, user), err)
		}
		rows, err := res.RowsAffected()
		created = rows > 0
		return interpretError("grant role: count rows", err)
	}, withAudit(audit))
	return created, err
}

// RevokeRole takes the binding away; store.ErrNotFound when it is not held.
func (s *Store) RevokeRole(ctx context.Context, user string, b domain.RoleBinding, audit domain.AuditRecord) error {
	return s.write(ctx, func(w *writer) error {
		res, err := w.exec(`DELETE FROM role_bindings WHERE user_name = ? AND project = ? AND role = ?`,
			user, b.Project, string(b.Role))
		if err != nil {
			return interpretError(fmt.Sprintf("revoke role %s from %q", b, user), err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return interpretError("revoke role: count rows", err)
		}
		if n == 0 {
			return fmt.Errorf("revoke role: user %q does not hold %s: %w", user, b, store.ErrNotFound)
		}
		return nil
	}, withAudit(audit))
}

const tokenCols = `id, name, subject, role, hash, created_at, expires_at, revoked_at`

func scanToken(r rowScanner) (store.Token, error) {
	var (
		t                         store.Token
		created, expires, revoked sql.NullInt64
	)
	if err := r.Scan(&t.ID, &t.Name, &t.Subject, &t.Role, &t.Hash, &created, &expires, &revoked); err != nil {
		return store.Token{}, err
	}
	t.CreatedAt, t.ExpiresAt, t.RevokedAt = timeOf(created), timeOf(expires), timeOf(revoked)
	return t, nil
}

// GetToken returns the token with that id, or store.ErrNotFound.
func (s *Store) GetToken(ctx context.Context, id int64) (store.Token, error) {
	if err := s.checkOpen(); err != nil {
		return store.Token{}, err
	}
	st, err := s.readStmt(ctx, `SELECT `+tokenCols+` FROM tokens WHERE id = ?`)
	if err != nil {
		return store.Token{}, interpretError("look up token", err)
	}
	t, err := scanToken(st.QueryRowContext(ctx, id))
	if err != nil {
		return store.Token{}, interpretError(fmt.Sprintf("look up token %d", id), err)
	}
	return t, nil
}

// ListTokens returns the tokens of subject ("" for all), by id.
func (s *Store) ListTokens(ctx context.Context, subject string) ([]store.Token, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	q := `SELECT ` + tokenCols + ` FROM tokens`
	var args []any
	if subject != "" {
		q += ` WHERE subject = ?`
		args = append(args, subject)
	}
	rows, err := s.readDB.QueryContext(ctx, q+` ORDER BY id`, args...)
	if err != nil {
		return nil, interpretError("list tokens", err)
	}
	defer rows.Close()
	var out []store.Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, interpretError("list tokens", err)
		}
		out = append(out, t)
	}
	return out, interpretError("list tokens", rows.Err())
}

// RevokeToken marks the token revoked (keeping an earlier revocation time).
func (s *Store) RevokeToken(ctx context.Context, id int64, at time.Time, audit domain.AuditRecord) (store.Token, error) {
	var t store.Token
	err := s.write(ctx, func(w *writer) error {
		if _, err := w.exec(`UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`, timeArg(at), id); err != nil {
			return interpretError(fmt.Sprintf("revoke token %d", id), err)
		}
		var err error
		t, err = scanToken(w.queryRow(`SELECT `+tokenCols+` FROM tokens WHERE id = ?`, id))
		return interpretError(fmt.Sprintf("revoke token %d", id), err)
	}, withAudit(audit))
	return t, err
}

// RevokeSubjectTokens revokes every unrevoked token of subject.
func (s *Store) RevokeSubjectTokens(ctx context.Context, subject string, at time.Time, audit domain.AuditRecord) (int, error) {
	var n int64
	err := s.write(ctx, func(w *writer) error {
		res, err := w.exec(`UPDATE tokens SET revoked_at = ? WHERE subject = ? AND revoked_at IS NULL`, timeArg(at), subject)
		if err != nil {
			return interpretError(fmt.Sprintf("revoke the tokens of %q", subject), err)
		}
		n, err = res.RowsAffected()
		return interpretError("revoke tokens: count rows", err)
	}, withAudit(audit))
	return int(n), err
}
