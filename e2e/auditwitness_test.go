package e2e

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
	_ "trainyard/internal/store/sqlite" // the "sqlite" database/sql driver
)

// A running server keeps the audit witness in <data>/audit-witness; removing
// the newest audit records from its database is then reported by
// 'trainyard audit verify', with the record numbers, though the shorter
// chain is intact.
func TestAuditWitnessCatchesTruncation(t *testing.T) {
	s := startServer(t, serverOpts{})
	for _, u := range []string{"alice", "bob", "carol"} {
		s.mustCLI("user", "create", u)
	}
	var v apitypes.AuditVerification
	waitFor(t, 10*time.Second, "the witness to reach the newest record", func() bool {
		v = apitypes.AuditVerification{}
		return s.api("GET", "/api/v1/audit/verify", nil, &v) == 200 && v.OK && v.Witness != nil && v.Witness.Seq == v.LastSeq
	})
	witness := s.mustCLI("audit", "witness")
	if !strings.Contains(witness, `"format": "trainyard-audit-witness-v1"`) {
		t.Fatalf("audit witness printed %q", witness)
	}

	db, err := sql.Open("sqlite", "file:"+filepath.Join(s.data, "trainyard.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`DELETE FROM audit WHERE seq > ?`, v.LastSeq-2); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := s.cli("audit", "verify")
	want := fmt.Sprintf("records %d to %d are missing from the end of the log", v.LastSeq-1, v.LastSeq)
	if code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("audit verify after removing the newest records: exit %d, %q; want exit 1 and %q", code, errOut, want)
	}
}
