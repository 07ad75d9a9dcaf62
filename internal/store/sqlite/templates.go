package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

var _ store.Templates = (*Store)(nil)

// templateLabel names a template in error messages.
func templateLabel(project, name string) string {
	return fmt.Sprintf("template %q of project %q", name, project)
}

// PutTemplate stores t as the next version of its template; a version that
// is not exactly one more than the latest is store.ErrConflict.
func (s *Store) PutTemplate(ctx context.Context, t store.Template, audit domain.AuditRecord) error {
	action := "put " + templateLabel(t.Project, t.Name)
	if t.Project == "" || t.Name == "" || t.Hash == "" || len(t.Body) == 0 {
		return fmt.Errorf("%s: project, name, body and hash are required: %w", action, store.ErrInvalid)
	}
	return s.write(ctx, func(w *writer) error {
		var latest int
		if err := w.queryRow(`SELECT COALESCE(MAX(version), 0) FROM templates WHERE project = ? AND name = ?`,
			t.Project, t.Name).Scan(&latest); err != nil {
			return interpretError(action, err)
		}
		if t.Version != latest+1 {
			return fmt.Errorf("%s: version %d is not the next one (latest is %d): %w", action, t.Version, latest, store.ErrConflict)
		}
		_, err := w.exec(`INSERT INTO templates (project, name, version, body, hash, created_by, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`,
			t.Project, t.Name, t.Version, t.Body, t.Hash, t.CreatedBy, timeArg(t.CreatedAt))
		return interpretError(action, err)
	}, withAudit(audit))
}

// GetTemplate returns one version of a template (the latest for version 0)
// or store.ErrNotFound.
func (s *Store) GetTemplate(ctx context.Context, project, name string, version int) (store.Template, error) {
	action := "get " + templateLabel(project, name)
	if version > 0 {
		action += fmt.Sprintf(" version %d", version)
	}
	if err := s.checkOpen(); err != nil {
		return store.Template{}, err
	}
	st, err := s.readStmt(ctx, `SELECT project, name, version, body, hash, created_by, created_at
		FROM templates WHERE project = ? AND name = ? AND (? = 0 OR version = ?)
		ORDER BY version DESC LIMIT 1`)
	if err != nil {
		return store.Template{}, interpretError(action, err)
	}
	t, err := scanTemplate(st.QueryRowContext(ctx, project, name, version, version))
	if err != nil {
		return store.Template{}, interpretError(action, err)
	}
	return t, nil
}

// ListTemplates returns the latest version of every template of project
// ("" for all), ordered by project then name.
func (s *Store) ListTemplates(ctx context.Context, project string) ([]store.Template, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := s.readDB.QueryContext(ctx, `SELECT project, name, version, body, hash, created_by, created_at
		FROM templates AS t
		WHERE (? = '' OR project = ?)
		  AND version = (SELECT MAX(version) FROM templates AS u WHERE u.project = t.project AND u.name = t.name)
		ORDER BY project, name`, project, project)
	if err != nil {
		return nil, interpretError("list templates", err)
	}
	defer rows.Close()
	var out []store.Template
	for rows.Next() {
		t, err := scanTemplate(rows)
		if err != nil {
			return nil, interpretError("list templates", err)
		}
		out = append(out, t)
	}
	return out, interpretError("list templates", rows.Err())
}

// scanTemplate reads one templates row.
func scanTemplate(row interface{ Scan(...any) error }) (store.Template, error) {
	var (
		t       store.Template
		created sql.NullInt64
	)
	if err := row.Scan(&t.Project, &t.Name, &t.Version, &t.Body, &t.Hash, &t.CreatedBy, &created); err != nil {
		return store.Template{}, err
	}
	t.CreatedAt = timeOf(created)
	return t, nil
}
