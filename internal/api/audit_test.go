package api_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"trainyard/internal/api"
	"trainyard/internal/api/apitypes"
	"trainyard/internal/audit"
	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store/sqlite"
)

func TestAuditList(t *testing.T) {
	e := newEnv(t)
	for _, name := range []string{"a", "b", "c"} {
		if code, _ := e.submit("name: " + name + "\nentrypoint: [true]\n"); code != 201 {
			t.Fatalf("submit: %d", code)
		}
	}
	code, b := e.do("GET", "/api/v1/audit?action=job.submit&target=job/&limit=2", e.token, nil)
	var page apitypes.AuditList
	if code != 200 || json.Unmarshal(b, &page) != nil {
		t.Fatalf("GET /api/v1/audit: %d %s", code, b)
	}
	if len(page.Records) != 2 || page.NextAfter != page.Records[1].Seq {
		t.Fatalf("first page: %d records, next_after %d; want 2 and the last seq", len(page.Records), page.NextAfter)
	}
	r := page.Records[0]
	if r.Actor != "user:admin" || r.Target != "job/1" || r.Result != "ok" || r.Client == "" || !strings.HasPrefix(r.Hash, "sha256:") {
		t.Errorf("record = %+v; want actor user:admin, target job/1, result ok, the client address and a hash", r)
	}
	code, b = e.do("GET", "/api/v1/audit?action=job.submit&target=job/&after="+jsonInt(page.NextAfter), e.token, nil)
	var rest apitypes.AuditList
	if code != 200 || json.Unmarshal(b, &rest) != nil || len(rest.Records) != 1 || rest.NextAfter != 0 || rest.Records[0].Target != "job/3" {
		t.Fatalf("second page: %d %s", code, b)
	}
	for _, q := range []string{"since=yesterday", "after=-1", "after=x", "limit=0x", "limit=5000"} {
		code, b := e.do("GET", "/api/v1/audit?"+q, e.token, nil)
		if code != 400 {
			t.Errorf("GET /api/v1/audit?%s: %d %s, want 400", q, code, b)
		}
	}
	if code, _ := e.do("GET", "/api/v1/audit/verify", "", nil); code != 401 {
		t.Errorf("verify without a token: %d, want 401", code)
	}
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestAuditVerifyAndExport(t *testing.T) {
	e := newEnv(t)
	for range 5 {
		e.submit("name: v\nentrypoint: [true]\n")
	}
	code, b := e.do("GET", "/api/v1/audit/verify", e.token, nil)
	var v apitypes.AuditVerification
	if code != 200 || json.Unmarshal(b, &v) != nil || !v.OK || v.Records < 5 || v.Problem != nil {
		t.Fatalf("verify: %d %s", code, b)
	}

	req, _ := http.NewRequest("GET", e.srv.URL+"/api/v1/audit/export", nil)
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("export: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var recs []domain.AuditRecord
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var a apitypes.AuditRecord
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatalf("export line %q: %v", sc.Text(), err)
		}
		recs = append(recs, domain.AuditRecord{Seq: a.Seq, At: a.At, Actor: a.Actor, Action: a.Action, Target: a.Target,
			Before: a.Before, After: a.After, Result: a.Result, Detail: a.Detail, Client: a.Client, PrevHash: a.PrevHash, Hash: a.Hash})
	}
	if rep, err := audit.Verify(audit.Records(recs)); err != nil || !rep.OK() || int64(len(recs)) != v.Records || rep.LastHash != v.LastHash {
		t.Fatalf("exported %d records verify as %+v, %v; want the %d the server verified", len(recs), rep, err, v.Records)
	}
	code, b = e.do("GET", "/api/v1/audit/export?after="+jsonInt(v.LastSeq), e.token, nil)
	if code != 200 || len(b) != 0 {
		t.Errorf("export after the newest record: %d %q, want 200 and nothing", code, b)
	}

	// Change a record behind the server's back.
	db, err := sql.Open("sqlite", "file:"+e.st.(*sqlite.Store).Path())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE audit SET actor = 'user:someone-else' WHERE seq = 4`); err != nil {
		t.Fatal(err)
	}
	code, b = e.do("GET", "/api/v1/audit/verify", e.token, nil)
	v = apitypes.AuditVerification{}
	if code != 200 || json.Unmarshal(b, &v) != nil || v.OK || v.Problem == nil {
		t.Fatalf("verify of a changed log: %d %s", code, b)
	}
	want := apitypes.AuditProblem{Kind: "modified", Seq: 4, Message: "record 4 was modified: its hash does not match its content"}
	if *v.Problem != want || v.Records != 3 {
		t.Errorf("problem = %+v after %d records, want %+v after 3", *v.Problem, v.Records, want)
	}
	if !bytes.Contains(b, []byte(`"ok":false`)) {
		t.Errorf("verify body lacks \"ok\": false: %s", b)
	}

	// A time that is not a number is named, in a 200 answer, not a 500.
	if _, err := db.Exec(`UPDATE audit SET at = 'soon' WHERE seq = 2`); err != nil {
		t.Fatal(err)
	}
	code, b = e.do("GET", "/api/v1/audit/verify", e.token, nil)
	v = apitypes.AuditVerification{}
	if code != 200 || json.Unmarshal(b, &v) != nil || v.OK || v.Problem == nil {
		t.Fatalf("verify of a log with an unreadable time: %d %s; want 200 naming the record", code, b)
	}
	want = apitypes.AuditProblem{Kind: "modified", Seq: 2, Message: `record 2 was modified: its time (at) is "soon", not Unix nanoseconds`}
	if *v.Problem != want || v.Records != 1 {
		t.Errorf("problem = %+v after %d records, want %+v after 1", *v.Problem, v.Records, want)
	}
}

// TestAuditVerifyWitness drives the witness through the API: the server's
// witness is served to keep, a kept witness is checked with POST, and a
// truncated log is reported.
func TestAuditVerifyWitness(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	svc := service.New(service.Config{Store: st, ArtifactsRoot: filepath.Join(dir, "artifacts"), AuditWitness: filepath.Join(dir, "audit-witness")})
	token, err := svc.Identity.Bootstrap(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, srv: httptest.NewServer(api.Handler(api.Config{Service: svc})), st: st, token: token}
	t.Cleanup(func() { e.srv.Close(); st.Close() })
	admin := service.Principal{Subject: "admin", Role: "admin"}
	for i := range 6 {
		if _, err := svc.Identity.CreateUser(context.Background(), admin, "u"+jsonInt(int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	head, err := svc.Audit.UpdateAuditWitness(context.Background())
	if err != nil || head.Seq < 6 {
		t.Fatalf("UpdateAuditWitness = %d, %v", head.Seq, err)
	}

	code, kept := e.do("GET", "/api/v1/audit/witness", e.token, nil)
	if code != 200 || !bytes.Contains(kept, []byte(`"seq": `+jsonInt(head.Seq))) {
		t.Fatalf("GET witness: %d %s; want the witness at %d", code, kept, head.Seq)
	}
	verify := func(method string, body any) apitypes.AuditVerification {
		t.Helper()
		code, b := e.do(method, "/api/v1/audit/verify", e.token, body)
		var v apitypes.AuditVerification
		if code != 200 || json.Unmarshal(b, &v) != nil {
			t.Fatalf("%s verify: %d %s; want 200 with a report", method, code, b)
		}
		return v
	}
	if v := verify("POST", map[string]json.RawMessage{"witness": kept}); !v.OK || v.Witness == nil || v.Witness.Seq != head.Seq {
		t.Fatalf("verify with the kept witness: %+v; want ok, witnessed at %d", v, head.Seq)
	}
	if code, b := e.do("POST", "/api/v1/audit/verify", e.token, `{"witness": {"seq": 1}}`); code != 400 || !bytes.Contains(b, []byte(`"witness"`)) {
		t.Errorf("verify with a made-up witness: %d %s; want 400 naming the witness", code, b)
	}

	db, err := sql.Open("sqlite", "file:"+st.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`DELETE FROM audit WHERE seq > ?`, head.Seq-2); err != nil {
		t.Fatal(err)
	}
	v := verify("GET", nil)
	if v.OK || v.Problem == nil || v.Problem.Kind != "truncated" || v.Problem.Seq != head.Seq-1 || v.Problem.Other != head.Seq {
		t.Fatalf("verify of a truncated log: %+v; want truncated from %d", v.Problem, head.Seq-1)
	}

	// A server that keeps no witness says so.
	other := newEnv(t)
	if code, b := other.do("GET", "/api/v1/audit/witness", other.token, nil); code != 404 || !bytes.Contains(b, []byte("audit_witness")) {
		t.Errorf("GET witness without one: %d %s; want 404 naming audit_witness", code, b)
	}
}
