package main

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trainyard/internal/audit"
	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
)

// TestStoreVerifyWitness checks a store offline against a witness file:
// intact, then with its newest records removed behind the server's back.
func TestStoreVerifyWitness(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "trainyard.db")
	st, err := sqlite.Open(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		rec := domain.AuditRecord{At: time.Date(2025, 6, 1, 12, 0, i, 0, time.UTC), Actor: "user:admin", Action: "user.write",
			Target: "user/u", Result: domain.AuditOK}
		if err := st.AppendAudit(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := st.ListAudit(context.Background(), store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	w, err := audit.Witness{}.Extend(recs)
	if err != nil {
		t.Fatal(err)
	}
	witness := filepath.Join(dir, "audit-witness")
	if err := os.WriteFile(witness, w.Marshal(), 0o644); err != nil {
		t.Fatal(err)
	}

	run := func() (string, error) {
		cmd := storeVerifyCommand()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs([]string{"--store", dbPath, "--witness", witness})
		err := cmd.ExecuteContext(context.Background())
		return out.String(), err
	}
	if out, err := run(); err != nil || !strings.Contains(out, "matches the witness in "+witness+" (record 8)") {
		t.Fatalf("store verify of an intact store: %q, %v", out, err)
	}

	db, err := sql.Open("sqlite", "file:"+dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`DELETE FROM audit WHERE seq > 5`); err != nil {
		t.Fatal(err)
	}
	_, err = run()
	want := "the audit log no longer holds what its witness saw: records 6 to 8 are missing from the end of the log: it ends at record 5, but the witness in " + witness + " saw record 8"
	if err == nil || err.Error() != want {
		t.Fatalf("store verify of a truncated store = %v\nwant %s", err, want)
	}
}
