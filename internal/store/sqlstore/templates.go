package sqlstore

import (
	"context"
	"database/sql"
	"fmt"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// templateLabel names a template in error messages.
func templateLabel(project, name string) string {
	return fmt.Sprintf("template %q of project %q", name, project)
}

const templateCols = `project, name, version, body, hash, created_by, created_at`

var (
	qTemplateLatestVersion = Q(`SELECT COALESCE(MAX(version), 0) FROM templates WHERE project = ? AND name = ?`)
	qTemplateInsert        = Q(`INSERT INTO templates (` + templateCols + `) VALUES (?, ?, ?, ?, ?, ?, ?)`)
	qTemplateGet           = Q(`SELECT ` + templateCols + `
		FROM templates WHERE project = ? AND name = ? AND (? = 0 OR version = ?)
		ORDER BY version DESC LIMIT 1`)
	qTemplateList = Each(`SELECT `+templateCols+`
		FROM templates AS t
		WHERE (? = '' OR project = ?)
		  AND version = (SELECT MAX(version) FROM templates AS u WHERE u.project = t.project AND u.name = t.name)
		ORDER BY project, name`,
		`SELECT DISTINCT ON (project COLLATE "C", name COLLATE "C") `+templateCols+`
		FROM templates WHERE ($1 = '' OR project = $2)
		ORDER BY project COLLATE "C", name COLLATE "C", version DESC`)
)

// PutTemplate stores t as the next version of its template; a version that
// is not exactly one more than the latest is store.ErrConflict (also when
// another replica stores the same version at the same moment).
func (s Shared) PutTemplate(ctx context.Context, t store.Template, audit domain.AuditRecord) error {
	action := "put " + templateLabel(t.Project, t.Name)
	if t.Project == "" || t.Name == "" || t.Hash == "" || len(t.Body) == 0 {
		return fmt.Errorf("%s: project, name, body and hash are required: %w", action, store.ErrInvalid)
	}
	return s.b.Write(ctx, func(x Exec) error {
		var latest int
		if err := x.QueryRow(qTemplateLatestVersion, t.Project, t.Name).Scan(&latest); err != nil {
			return s.err(action, err)
		}
		if t.Version != latest+1 {
			return fmt.Errorf("%s: version %d is not the next one (latest is %d): %w", action, t.Version, latest, store.ErrConflict)
		}
		return x.Queue(action, qTemplateInsert,
			t.Project, t.Name, t.Version, t.Body, t.Hash, t.CreatedBy, TimeArg(t.CreatedAt))
	}, audit)
}

// GetTemplate returns one version of a template (the latest for version 0)
// or store.ErrNotFound.
func (s Shared) GetTemplate(ctx context.Context, project, name string, version int) (store.Template, error) {
	action := "get " + templateLabel(project, name)
	if version > 0 {
		action += fmt.Sprintf(" version %d", version)
	}
	r, err := s.b.Reader()
	if err != nil {
		return store.Template{}, err
	}
	t, err := scanTemplate(r.QueryRow(ctx, qTemplateGet, project, name, version, version))
	if err != nil {
		return store.Template{}, s.err(action, err)
	}
	return t, nil
}

// ListTemplates returns the latest version of every template of project
// ("" for all), ordered by project then name.
func (s Shared) ListTemplates(ctx context.Context, project string) ([]store.Template, error) {
	return queryAll(ctx, s, "list templates", scanTemplate, qTemplateList, project, project)
}

// scanTemplate reads one templates row.
func scanTemplate(row Row) (store.Template, error) {
	var (
		t       store.Template
		created sql.NullInt64
	)
	if err := row.Scan(&t.Project, &t.Name, &t.Version, &t.Body, &t.Hash, &t.CreatedBy, &created); err != nil {
		return store.Template{}, err
	}
	t.CreatedAt = TimeOf(created)
	return t, nil
}
