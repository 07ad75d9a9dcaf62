package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// Upgrading a store drops the job tokens of attempts that ended before
// job tokens were deleted at their attempt's end (kept revoked, one per
// attempt that ever ran), and keeps every other token: a running attempt's,
// and a user's, revoked or not.
func TestMigrationDropsEndedJobTokens(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "trainyard.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	audit := domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}
	mk := func(name, subject string, role domain.Role, revoked bool) store.Token {
		tok, err := s.CreateToken(ctx, store.Token{Name: name, Subject: subject, Role: string(role), Hash: "sha256:" + name, CreatedAt: t0}, audit)
		if err != nil {
			t.Fatal(err)
		}
		if revoked {
			if tok, err = s.RevokeToken(ctx, tok.ID, t0, audit); err != nil {
				t.Fatal(err)
			}
		}
		return tok
	}
	ended := mk("ended", domain.JobTokenSubject(1, 1), domain.RoleJob, true)
	kept := []store.Token{
		mk("running", domain.JobTokenSubject(2, 1), domain.RoleJob, false),
		mk("alice", "alice", domain.RoleMember, true),
		mk("bob", "bob", domain.RoleMember, false),
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// As the store was before the migration: not yet applied.
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DELETE FROM schema_migrations WHERE name LIKE '%drop_ended_job_tokens%'`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	if s, err = Open(ctx, path); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if tok, err := s.GetToken(ctx, ended.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the ended attempt's revoked token after the upgrade: %+v, %v; want it gone", tok, err)
	}
	for _, want := range kept {
		if got, err := s.GetToken(ctx, want.ID); err != nil || got.Name != want.Name || got.RevokedAt.IsZero() != want.RevokedAt.IsZero() {
			t.Errorf("token %s after the upgrade: %+v, %v; want it kept as it was", want.Name, got, err)
		}
	}
}
