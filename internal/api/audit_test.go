package api_test

import (
	"bufio"
	"bytes"
	"database/sql"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/audit"
	"trainyard/internal/domain"
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
	if !bytes.Contains(b, []byte(`"ok": false`)) {
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
