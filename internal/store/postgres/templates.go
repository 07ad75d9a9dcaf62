package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// templateLabel names a template in error messages.
func templateLabel(project, name string) string {
	return fmt.Sprintf("template %q of project %q", name, project)
}

// PutTemplate stores t as the next version of its template; a version that
// is not exactly one more than the latest is store.ErrConflict (also when
// another replica stores the same version at the same moment).
func (s *Store) PutTemplate(ctx context.Context, t store.Template, audit domain.AuditRecord) error {
	action := "put " + templateLabel(t.Project, t.Name)
	if t.Project == "" || t.Name == "" || t.Hash == "" || len(t.Body) == 0 {
		return fmt.Errorf("%s: project, name, body and hash are required: %w", action, store.ErrInvalid)
	}
	return s.write(ctx, func(w *writer) error {
		var latest int32
		if err := w.queryRow(`SELECT COALESCE(MAX(version), 0) FROM templates WHERE project = $1 AND name = $2`,
			t.Project, t.Name).Scan(&latest); err != nil {
			return interpretError(action, err)
		}
		if t.Version != int(latest)+1 {
			return fmt.Errorf("%s: version %d is not the next one (latest is %d): %w", action, t.Version, latest, store.ErrConflict)
		}
		w.queue(action, `INSERT INTO templates (project, name, version, body, hash, created_by, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			t.Project, t.Name, t.Version, t.Body, t.Hash, t.CreatedBy, timeArg(t.CreatedAt))
		return nil
	}, withAudit(audit))
}

const templateCols = `project, name, version, body, hash, created_by, created_at`

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
	t, err := scanTemplate(s.pool.QueryRow(ctx, `SELECT `+templateCols+`
		FROM templates WHERE project = $1 AND name = $2 AND ($3 = 0 OR version = $3)
		ORDER BY version DESC LIMIT 1`, project, name, version))
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
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT ON (project COLLATE "C", name COLLATE "C") `+templateCols+`
		FROM templates WHERE ($1 = '' OR project = $1)
		ORDER BY project COLLATE "C", name COLLATE "C", version DESC`, project)
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
func scanTemplate(row rowScanner) (store.Template, error) {
	var (
		t       store.Template
		version int32
		created pgtype.Int8
	)
	if err := row.Scan(&t.Project, &t.Name, &version, &t.Body, &t.Hash, &t.CreatedBy, &created); err != nil {
		return store.Template{}, err
	}
	t.Version, t.CreatedAt = int(version), timeOf(created)
	return t, nil
}
