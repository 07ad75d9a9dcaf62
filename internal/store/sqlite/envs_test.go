package sqlite

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"trainyard/internal/domain"
)

// The schema itself keeps versions immutable: writes that bypass the
// store's methods are refused by the triggers of migration 0009.
func TestEnvVersionsImmutableInTheSchema(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	e := domain.Environment{Name: "e", Version: 1, Image: "reg/e:1", CreatedBy: "user:a"}
	e.Digest = domain.EnvDigest(e)
	if err := s.PutEnv(ctx, e, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", dsn(s.Path(), false))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	refused := func(query, want string) {
		t.Helper()
		if _, err := db.ExecContext(ctx, query); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want it refused with %q", query, err, want)
		}
	}
	refused(`UPDATE envs SET image = 'reg/evil:1' WHERE name = 'e'`, "immutable")
	refused(`UPDATE envs SET check_argv = '["true"]' WHERE name = 'e'`, "immutable")
	refused(`UPDATE envs SET digest = 'sha256:x' WHERE name = 'e'`, "immutable")
	refused(`DELETE FROM envs WHERE name = 'e'`, "never deleted")
	if _, err := s.DeprecateEnv(ctx, "e", 1, "old", e.CreatedAt, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); err != nil {
		t.Fatal(err)
	}
	refused(`UPDATE envs SET deprecated = 0 WHERE name = 'e'`, "deprecated once")
	refused(`UPDATE envs SET deprecated_reason = 'other' WHERE name = 'e'`, "deprecated once")
	got, err := s.GetEnv(ctx, "e", 1)
	if err != nil || got.Image != "reg/e:1" || !got.Deprecated || got.DeprecatedReason != "old" {
		t.Errorf("after refused writes: %+v, %v", got, err)
	}
}
