package store

import (
	"context"
	"time"

	"trainyard/internal/domain"
)

// Secret is one stored version of a secret. The value is never stored in the
// clear: Nonce and Ciphertext are what package secrets sealed under the master
// key KeyID, bound to (Project, Name, Version).
type Secret struct {
	Project    string // "" for a global secret, visible to every project
	Name       string
	Version    int // from 1, one more per set
	KeyID      string
	Nonce      []byte
	Ciphertext []byte
	CreatedBy  string // the actor who set this version, e.g. "user:alice"
	CreatedAt  time.Time
}

// Secrets stores sealed secret values. Mutations take the audit record of
// the change and append it in the same transaction.
type Secrets interface {
	// PutSecret stores s as a new version of (s.Project, s.Name). s.Version
	// must be one more than the latest stored version (1 for a new secret);
	// otherwise nothing is stored and the error is ErrConflict.
	PutSecret(ctx context.Context, s Secret, audit domain.AuditRecord) error
	// LatestSecret returns the newest version of (project, name) with its
	// sealed value, or ErrNotFound. It never falls back from a project to
	// the global scope; callers decide that.
	LatestSecret(ctx context.Context, project, name string) (Secret, error)
	// ListSecrets returns the newest version of every secret, without Nonce
	// and Ciphertext, ordered by project ("" first), then name.
	ListSecrets(ctx context.Context) ([]Secret, error)
	// DeleteSecret removes every version of (project, name); ErrNotFound
	// when there is none.
	DeleteSecret(ctx context.Context, project, name string, audit domain.AuditRecord) error
	// RekeySecrets passes every stored version to reseal and stores what it
	// returns (only KeyID, Nonce and Ciphertext may change), all in one
	// transaction: if reseal fails for any version, nothing changes and its
	// error is returned. No other write can interleave. It returns how many
	// versions were resealed.
	RekeySecrets(ctx context.Context, reseal func(Secret) (Secret, error), audit domain.AuditRecord) (int, error)
}
