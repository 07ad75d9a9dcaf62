package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// CreateUser stores u; an existing name is store.ErrConflict.
func (s *Store) CreateUser(ctx context.Context, u domain.User, audit domain.AuditRecord) (domain.User, error) {
	err := s.write(ctx, func(w *writer) error {
		_, err := w.exec(`INSERT INTO users (name, created_at) VALUES ($1, $2)`, u.Name, timeArg(u.CreatedAt))
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
	var (
		u       domain.User
		created pgtype.Int8
	)
	if err := s.pool.QueryRow(ctx, `SELECT name, created_at FROM users WHERE name = $1`, name).Scan(&u.Name, &created); err != nil {
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
	rows, err := s.pool.Query(ctx, `SELECT name, created_at FROM users ORDER BY name COLLATE "C"`)
	if err != nil {
		return nil, interpretError("list users", err)
	}
	defer rows.Close()
	var users []domain.User
	for rows.Next() {
		var (
			u       domain.User
			created pgtype.Int8
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
	rows, err := s.pool.Query(ctx, `SELECT user_name, project, role FROM role_bindings
		WHERE ($1 = '' OR user_name = $1) ORDER BY user_name COLLATE "C", project COLLATE "C", role COLLATE "C"`, user)
	if err != nil {
		return nil, interpretError("list roles", err)
	}
	defer rows.Close()
	out := map[string][]domain.RoleBinding{}
	for rows.Next() {
		var name, project, role string
		if err := rows.Scan(&name, &project, &role); err != nil {
			return nil, interpretError("list roles", err)
		}
		out[name] = append(out[name], domain.RoleBinding{Project: project, Role: domain.Role(role)})
	}
	return out, interpretError("list roles", rows.Err())
}

// GrantRole gives user the binding; created is false when it was held.
func (s *Store) GrantRole(ctx context.Context, user string, b domain.RoleBinding, at time.Time, audit domain.AuditRecord) (created bool, err error) {
	err = s.write(ctx, func(w *writer) error {
		var n int64
		if err := w.queryRow(`SELECT COUNT(*) FROM users WHERE name = $1`, user).Scan(&n); err != nil {
			return interpretError("grant role: look up user", err)
		}
		if n == 0 {
			return fmt.Errorf("grant role: user %q does not exist: %w", user, store.ErrNotFound)
		}
		tag, err := w.exec(`INSERT INTO role_bindings (user_name, project, role, created_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT DO NOTHING`, user, b.Project, string(b.Role), timeArg(at))
		if err != nil {
			return interpretError(fmt.Sprintf("grant role %s to %q", b, user), err)
		}
		created = tag.RowsAffected() > 0
		return nil
	}, withAudit(audit))
	return created, err
}

// RevokeRole takes the binding away; store.ErrNotFound when it is not held.
func (s *Store) RevokeRole(ctx context.Context, user string, b domain.RoleBinding, audit domain.AuditRecord) error {
	return s.write(ctx, func(w *writer) error {
		tag, err := w.exec(`DELETE FROM role_bindings WHERE user_name = $1 AND project = $2 AND role = $3`,
			user, b.Project, string(b.Role))
		if err != nil {
			return interpretError(fmt.Sprintf("revoke role %s from %q", b, user), err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("revoke role: user %q does not hold %s: %w", user, b, store.ErrNotFound)
		}
		return nil
	}, withAudit(audit))
}

// GetToken returns the token with that id, or store.ErrNotFound.
func (s *Store) GetToken(ctx context.Context, id int64) (store.Token, error) {
	if err := s.checkOpen(); err != nil {
		return store.Token{}, err
	}
	t, err := scanToken(s.pool.QueryRow(ctx, `SELECT `+tokenCols+` FROM tokens WHERE id = $1`, id))
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
	rows, err := s.pool.Query(ctx, `SELECT `+tokenCols+` FROM tokens WHERE ($1 = '' OR subject = $1) ORDER BY id`, subject)
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
		w.queue(fmt.Sprintf("revoke token %d", id), `UPDATE tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL`, timeArg(at), id)
		var err error
		t, err = scanToken(w.queryRow(`SELECT `+tokenCols+` FROM tokens WHERE id = $1`, id))
		return interpretError(fmt.Sprintf("revoke token %d", id), err)
	}, withAudit(audit))
	return t, err
}

// RevokeSubjectTokens revokes every unrevoked token of subject.
func (s *Store) RevokeSubjectTokens(ctx context.Context, subject string, at time.Time, audit domain.AuditRecord) (int, error) {
	var n int64
	err := s.write(ctx, func(w *writer) error {
		tag, err := w.exec(`UPDATE tokens SET revoked_at = $1 WHERE subject = $2 AND revoked_at IS NULL`, timeArg(at), subject)
		if err != nil {
			return interpretError(fmt.Sprintf("revoke the tokens of %q", subject), err)
		}
		n = tag.RowsAffected()
		return nil
	}, withAudit(audit))
	return int(n), err
}
