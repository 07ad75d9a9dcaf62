package store

import (
	"context"
	"time"

	"trainyard/internal/domain"
)

// Template is one stored version of a job template. Versions are
// immutable: a change stores the next version.
type Template struct {
	Project   string
	Name      string
	Version   int    // from 1, one more per change
	Body      []byte // the template document as written
	Hash      string // "sha256:<hex>" of Body
	CreatedBy string // the actor who stored this version, e.g. "user:alice"
	CreatedAt time.Time
}

// Templates stores job templates. Mutations take the audit record of the
// change and append it in the same transaction.
type Templates interface {
	// PutTemplate stores t as a new version of (t.Project, t.Name).
	// t.Version must be one more than the latest stored version (1 for a
	// new template); otherwise nothing is stored and the error is
	// ErrConflict.
	PutTemplate(ctx context.Context, t Template, audit domain.AuditRecord) error
	// GetTemplate returns version of (project, name), the latest when
	// version is 0, or ErrNotFound.
	GetTemplate(ctx context.Context, project, name string, version int) (Template, error)
	// ListTemplates returns the latest version of every template of
	// project ("" for every project), ordered by project, then name.
	ListTemplates(ctx context.Context, project string) ([]Template, error)
}
