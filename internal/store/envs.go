package store

import (
	"context"
	"time"

	"trainyard/internal/domain"
)

// Envs stores the versions of software environments. A stored version is
// immutable except for its deprecation, which happens once and is never
// undone. Mutations take the audit record of the change and append it in
// the same transaction.
type Envs interface {
	// PutEnv stores e as a new version of e.Name. e.Version must be one more
	// than the latest stored version (1 for a new name); otherwise nothing
	// is stored and the error is ErrConflict. Name, a positive Version and
	// Digest are required (ErrInvalid). e's deprecation fields are ignored:
	// a new version is never deprecated.
	PutEnv(ctx context.Context, e domain.Environment, audit domain.AuditRecord) error
	// GetEnv returns version of name, the latest stored when version is 0,
	// or ErrNotFound.
	GetEnv(ctx context.Context, name string, version int) (domain.Environment, error)
	// ListEnvs returns every version of name ("" for every environment),
	// ordered by name, then version.
	ListEnvs(ctx context.Context, name string) ([]domain.Environment, error)
	// DeprecateEnv marks version of name deprecated with reason at at;
	// version 0 marks every version of name. Versions deprecated already
	// keep their reason and time. It returns the versions it marked, in
	// order (none when all were deprecated already), or ErrNotFound when
	// there is no such version (no version at all, for 0).
	DeprecateEnv(ctx context.Context, name string, version int, reason string, at time.Time, audit domain.AuditRecord) ([]int, error)
}
