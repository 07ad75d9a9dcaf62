package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api"
	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/logs"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
)

// authzEnv is a server with one user per role row of the matrix, each with
// a real token, and three jobs: alice's and bob's in project default (both
// members there) and carol's in project other.
type authzEnv struct {
	*env
	svc    *service.Service
	tokens map[string]string // row → token
	jobs   map[string]int64  // "own" (alice's), "other-member" (bob's), "other-project" (carol's)
}

var rows = []string{"admin", "resource-admin", "auditor", "lead", "member", "viewer", "none", "job"}

func newAuthzEnv(t *testing.T) *authzEnv {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	svc := service.New(service.Config{Store: st, ArtifactsRoot: filepath.Join(dir, "artifacts"), Logs: logs.Layout{Root: filepath.Join(dir, "runs")}})
	token, err := svc.Identity.Bootstrap(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler(api.Config{Service: svc, Ready: st.Ping}))
	t.Cleanup(func() { srv.Close(); st.Close() })
	e := &authzEnv{env: &env{t: t, srv: srv, st: st, token: token}, svc: svc,
		tokens: map[string]string{"admin": token}, jobs: map[string]int64{}}

	must := func(code int, b []byte, want int) {
		t.Helper()
		if code != want {
			t.Fatalf("setup: %d %s, want %d", code, b, want)
		}
	}
	code, b := e.do("PUT", "/api/v1/pools/default", token, apitypes.Pool{Executor: "local", Borrowing: true,
		Nodes: []apitypes.Node{{Name: "n1", CPUs: 8, Memory: "32GiB"}}})
	must(code, b, 201)
	for _, p := range []string{"default", "other"} {
		code, b = e.do("PUT", "/api/v1/quotas/"+p+"/default", token, apitypes.Quota{CPUs: 4, Memory: "16GiB", MaxPriority: "urgent"})
		must(code, b, 200)
	}
	users := map[string][]apitypes.RoleBinding{
		"ops":    {{Role: "resource-admin"}},
		"aud":    {{Role: "auditor"}},
		"lee":    {{Role: "lead", Project: "default"}},
		"alice":  {{Role: "member", Project: "default"}},
		"bob":    {{Role: "member", Project: "default"}},
		"vic":    {{Role: "viewer", Project: "default"}},
		"carol":  {{Role: "member", Project: "other"}},
		"nobody": nil,
	}
	rowUser := map[string]string{"resource-admin": "ops", "auditor": "aud", "lead": "lee", "member": "alice", "viewer": "vic", "none": "nobody"}
	userTok := map[string]string{}
	for name, roles := range users {
		code, b = e.do("POST", "/api/v1/users", token, map[string]string{"name": name})
		must(code, b, 201)
		for _, r := range roles {
			code, b = e.do("POST", "/api/v1/users/"+name+"/roles", token, r)
			must(code, b, 201)
		}
		code, b = e.do("POST", "/api/v1/tokens", token, apitypes.TokenRequest{User: name, Expires: "1d"})
		must(code, b, 201)
		var tok apitypes.Token
		json.Unmarshal(b, &tok)
		if !strings.HasPrefix(tok.Token, "ty_") || tok.User != name {
			t.Fatalf("token create answered %s", b)
		}
		userTok[name] = tok.Token
	}
	for row, u := range rowUser {
		e.tokens[row] = userTok[u]
	}
	for scope, sub := range map[string][2]string{"own": {"alice", "default"}, "other-member": {"bob", "default"}, "other-project": {"carol", "other"}} {
		s, _ := json.Marshal(fmt.Sprintf("name: %s-job\nproject: %s\nentrypoint: [\"true\"]\n", sub[0], sub[1]))
		code, b = e.do("POST", "/api/v1/jobs", userTok[sub[0]], apitypes.SubmitRequest{Spec: s})
		must(code, b, 201)
		var j apitypes.Job
		json.Unmarshal(b, &j)
		e.jobs[scope] = j.ID
	}
	jobTok, err := svc.Identity.IssueJobToken(context.Background(), service.AttemptRef{JobID: e.jobs["own"], Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	e.tokens["job"] = jobTok
	return e
}

// outcome classifies an answer: "ok", "hidden" (404 as for a missing job),
// "forbidden" (403), or the status.
func outcome(code int, body []byte) string {
	switch {
	case code >= 200 && code < 300:
		return "ok"
	case code == 404 && strings.Contains(string(body), "does not exist"):
		return "hidden"
	case code == 404 && strings.Contains(string(body), "no attempt yet"):
		return "ok" // logs of a job the caller may read, that has not started
	case code == 403:
		return "forbidden"
	}
	return strconv.Itoa(code)
}

func TestHTTPAuthorizationMatrix(t *testing.T) {
	e := newAuthzEnv(t)
	// do counts the refusals, which must each leave an audit record.
	refusals := 0
	do := func(method, path, token string, body any) (int, []byte) {
		before := countDenied(t, e.st)
		code, b := e.do(method, path, token, body)
		// A 404 "no attempt yet" on logs is an answer, not a refusal.
		if code == 403 || (code == 404 && !strings.Contains(string(b), "no attempt yet")) {
			refusals++
			if countDenied(t, e.st) != before+1 {
				t.Errorf("%s %s: refused with %d but no denied audit record was written", method, path, code)
			}
		}
		return code, b
	}
	const ok, hidden, forbidden = "ok", "hidden", "forbidden"
	scopes := []string{"own", "other-member", "other-project"}
	// want[route][row] lists the outcome for own / other member's / other
	// project's job.
	read := map[string][3]string{
		"admin": {ok, ok, ok}, "resource-admin": {ok, ok, ok}, "auditor": {ok, ok, ok},
		"lead": {ok, ok, hidden}, "member": {ok, hidden, hidden}, "viewer": {ok, ok, hidden},
		"none": {hidden, hidden, hidden}, "job": {forbidden, forbidden, forbidden},
	}
	cancel := map[string][3]string{
		"admin": {ok, ok, ok}, "resource-admin": {forbidden, forbidden, forbidden}, "auditor": {forbidden, forbidden, forbidden},
		"lead": {ok, ok, hidden}, "member": {ok, hidden, hidden}, "viewer": {forbidden, forbidden, hidden},
		"none": {hidden, hidden, hidden}, "job": {forbidden, forbidden, forbidden},
	}
	routes := []struct {
		name, method, suffix string
		want                 map[string][3]string
	}{
		{"show", "GET", "", read},
		{"logs", "GET", "/logs", read},
		{"why", "GET", "/why", read},
		{"cancel", "POST", "/cancel", cancel}, // last: earlier rows may have canceled
	}
	unexpectedAllows := 0
	for _, rt := range routes {
		for _, row := range rows {
			for i, scope := range scopes {
				code, b := do(rt.method, fmt.Sprintf("/api/v1/jobs/%d%s", e.jobs[scope], rt.suffix), e.tokens[row], nil)
				got, want := outcome(code, b), rt.want[row][i]
				if got != want {
					if got == ok {
						unexpectedAllows++
					}
					t.Errorf("%s by %s on %s job: %s (%d %s), want %s", rt.name, row, scope, got, code, b, want)
				}
				if got == forbidden && row != "job" && !strings.Contains(string(b), "role") {
					t.Errorf("%s by %s on %s job: 403 does not name the role needed: %s", rt.name, row, scope, b)
				}
			}
		}
	}

	// list: which jobs each row sees.
	all := []int64{e.jobs["other-project"], e.jobs["other-member"], e.jobs["own"]}
	slices.Sort(all)
	lists := map[string][]int64{
		"admin": all, "resource-admin": all, "auditor": all,
		"lead": {e.jobs["own"], e.jobs["other-member"]}, "viewer": {e.jobs["own"], e.jobs["other-member"]},
		"member": {e.jobs["own"]}, "none": nil, "job": nil,
	}
	for _, row := range rows {
		code, b := do("GET", "/api/v1/jobs", e.tokens[row], nil)
		want := lists[row]
		if want == nil {
			if code != 403 {
				unexpectedAllows++
				t.Errorf("list by %s: %d %s, want 403", row, code, b)
			}
			continue
		}
		var l apitypes.JobList
		json.Unmarshal(b, &l)
		var got []int64
		for _, j := range l.Jobs {
			got = append(got, j.ID)
		}
		slices.Sort(got)
		slices.Sort(want)
		if code != 200 || !slices.Equal(got, want) {
			t.Errorf("list by %s: %d ids %v, want %v", row, code, got, want)
		}
	}

	// submit into default (where lead and member hold roles) and other.
	submitOK := map[string][2]bool{"admin": {true, true}, "lead": {true, false}, "member": {true, false}}
	for _, row := range rows {
		for i, project := range []string{"default", "other"} {
			s, _ := json.Marshal(fmt.Sprintf("name: m-%s\nproject: %s\nentrypoint: [\"true\"]\n", row, project))
			code, b := do("POST", "/api/v1/jobs", e.tokens[row], apitypes.SubmitRequest{Spec: s})
			if want := submitOK[row][i]; (code == 201) != want || (!want && code != 403) {
				if code == 201 {
					unexpectedAllows++
				}
				t.Errorf("submit by %s into %s: %d %s, want allowed=%v", row, project, code, b, want)
			}
		}
	}

	// pool, quota and budget writes: admin and resource-admin only.
	for _, row := range rows {
		writeOK := row == "admin" || row == "resource-admin"
		code, b := do("PUT", "/api/v1/budgets/default", e.tokens[row], apitypes.Budget{Amount: "100", Period: "month"})
		if (code == 200) != writeOK || (!writeOK && code != 403) {
			if code == 200 {
				unexpectedAllows++
			}
			t.Errorf("budget write by %s: %d %s", row, code, b)
		}
		code, b = do("PUT", "/api/v1/quotas/default/default", e.tokens[row], apitypes.Quota{CPUs: 2, Memory: "8GiB"})
		if (code == 200) != writeOK || (!writeOK && code != 403) {
			t.Errorf("quota write by %s: %d %s", row, code, b)
		}
		code, b = do("PUT", "/api/v1/pools/default", e.tokens[row], apitypes.Pool{Executor: "local", Borrowing: true,
			Nodes: []apitypes.Node{{Name: "n1", CPUs: 8, Memory: "32GiB"}}})
		if (code == 200) != writeOK || (!writeOK && code != 403) {
			if code == 200 {
				unexpectedAllows++
			}
			t.Errorf("pool write by %s: %d %s", row, code, b)
		}
	}
	if unexpectedAllows > 0 {
		t.Errorf("%d unexpected allows", unexpectedAllows)
	}
	recs, err := e.st.ListAudit(context.Background(), store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	denied := 0
	for _, r := range recs {
		if r.Result == domain.AuditDenied {
			denied++
		}
	}
	if refusals == 0 || denied != refusals {
		t.Errorf("%d refusals left %d denied audit records; every refusal must leave one", refusals, denied)
	}
}

func TestMemberCannotCancelOthersJob(t *testing.T) {
	e := newAuthzEnv(t)
	code, b := e.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", e.jobs["other-member"]), e.tokens["member"], nil)
	missingCode, missing := e.do("POST", "/api/v1/jobs/999999/cancel", e.tokens["member"], nil)
	if code != 404 || missingCode != 404 || decodeErr(t, b).Message != strings.Replace(decodeErr(t, missing).Message, "999999", strconv.FormatInt(e.jobs["other-member"], 10), 1) {
		t.Errorf("member canceling bob's job: %d %s; a missing job: %d %s — want the same 404", code, b, missingCode, missing)
	}
	code, b = e.do("GET", fmt.Sprintf("/api/v1/jobs/%d", e.jobs["other-member"]), e.token, nil)
	var j apitypes.Job
	json.Unmarshal(b, &j)
	if code != 200 || j.State != "queued" || j.CancelRequested {
		t.Errorf("bob's job after the refused cancel: %d %+v", code, j)
	}
	// A viewer sees the job, so the refusal is a 403 naming the role.
	code, b = e.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", e.jobs["own"]), e.tokens["viewer"], nil)
	if code != 403 || !strings.Contains(decodeErr(t, b).Message, "lead") {
		t.Errorf("viewer cancel: %d %s, want 403 naming lead", code, b)
	}
}

func TestTokenRevocationAndRateLimitHTTP(t *testing.T) {
	e := newAuthzEnv(t)
	tok := e.tokens["member"]
	code, b := e.do("GET", "/api/v1/whoami", tok, nil)
	var who apitypes.Whoami
	json.Unmarshal(b, &who)
	if code != 200 || who.User != "alice" || len(who.Roles) != 1 || who.Roles[0] != (apitypes.RoleBinding{Role: "member", Project: "default"}) {
		t.Fatalf("whoami: %d %s", code, b)
	}
	code, b = e.do("DELETE", fmt.Sprintf("/api/v1/tokens/%d", who.TokenID), tok, nil)
	if code != 200 {
		t.Fatalf("revoke own token: %d %s", code, b)
	}
	if code, b = e.do("GET", "/api/v1/whoami", tok, nil); code != 401 || !strings.Contains(string(b), "revoked") {
		t.Errorf("revoked token: %d %s, want 401 revoked", code, b)
	}
	// The job token reaches whoami but no job route.
	code, b = e.do("GET", "/api/v1/whoami", e.tokens["job"], nil)
	json.Unmarshal(b, &who)
	if code != 200 || who.Job != e.jobs["own"] || who.Attempt != 1 {
		t.Errorf("job token whoami: %d %s", code, b)
	}
	// Failures from one address: 10 answer 401, then a bad token gets 429
	// with Retry-After, while a valid token still passes.
	for i := range 9 { // the revoked token above already failed once
		if code, _ := e.do("GET", "/api/v1/jobs", "ty_bad"+strconv.Itoa(i), nil); code != 401 {
			t.Fatalf("failure %d: %d, want 401", i+2, code)
		}
	}
	req := httptest.NewRequest("GET", e.srv.URL+"/api/v1/jobs", nil)
	req.RequestURI = ""
	req.Header.Set("Authorization", "Bearer ty_bad9")
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("bad token after 10 failures: %d Retry-After %q, want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if code, b := e.do("GET", "/api/v1/jobs", e.token, nil); code != 200 {
		t.Errorf("valid token after 10 failures: %d %s, want 200", code, b)
	}
}

// TestBadTokenFloodSparesUsersAndJobReports: jobs call the API from their
// node's address, so a job that floods bad tokens from 127.0.0.1 must not
// lock out the users there nor another job's progress reports.
func TestBadTokenFloodSparesUsersAndJobReports(t *testing.T) {
	e := newAuthzEnv(t)
	id := e.jobs["own"]
	errs, err := e.st.Apply(context.Background(), []store.Change{
		{JobID: id, Move: domain.MoveStart(), At: time.Now(), Attempt: &store.AttemptChange{Create: true, Number: 1, To: domain.AttemptRunning}},
		{JobID: id, Move: domain.MoveRun(), At: time.Now()}})
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("create attempt: %v %v", err, errs)
	}
	for i := range 30 {
		code, b := e.do("GET", "/api/v1/jobs", fmt.Sprintf("ty_flood%03d", i), nil)
		switch {
		case i < 10 && code != 401:
			t.Fatalf("bad token %d: %d %s, want 401", i+1, code, b)
		case i >= 10 && (code != 429 || !strings.Contains(string(b), "a valid token is accepted at once")):
			t.Fatalf("bad token %d: %d %s, want 429 saying a valid token is accepted", i+1, code, b)
		}
	}
	if code, b := e.do("GET", "/api/v1/jobs", e.tokens["member"], nil); code != 200 {
		t.Errorf("a user's valid token after the flood: %d %s, want 200", code, b)
	}
	report := fmt.Sprintf("/api/v1/jobs/%d/attempts/1/metrics", id)
	if code, b := e.do("POST", report, e.tokens["job"], `{"points": [{"step": 1, "metrics": {"loss": 0.5}}]}`); code != 200 {
		t.Errorf("a job's progress report after the flood: %d %s, want 200", code, b)
	}
}

func TestIdentityEndpoints(t *testing.T) {
	e := newAuthzEnv(t)
	code, b := e.do("GET", "/api/v1/users", e.token, nil)
	var ul apitypes.UserList
	json.Unmarshal(b, &ul)
	if code != 200 || len(ul.Users) != 9 || ul.Users[0].Name != "admin" || ul.Users[0].Roles[0].Role != "admin" {
		t.Errorf("users: %d %s", code, b)
	}
	if code, _ := e.do("GET", "/api/v1/users", e.tokens["member"], nil); code != 403 {
		t.Errorf("member listing users: %d, want 403", code)
	}
	// A lead manages the members of their project, not of others.
	if code, b := e.do("POST", "/api/v1/users/nobody/roles", e.tokens["lead"], apitypes.RoleBinding{Role: "viewer", Project: "default"}); code != 201 {
		t.Errorf("lead granting viewer in default: %d %s", code, b)
	}
	if code, b := e.do("POST", "/api/v1/users/nobody/roles", e.tokens["lead"], apitypes.RoleBinding{Role: "viewer", Project: "other"}); code != 403 {
		t.Errorf("lead granting in other: %d %s", code, b)
	}
	if code, b := e.do("POST", "/api/v1/users/nobody/roles", e.tokens["lead"], apitypes.RoleBinding{Role: "admin"}); code != 403 {
		t.Errorf("lead granting admin: %d %s", code, b)
	}
	if code, b := e.do("DELETE", "/api/v1/users/nobody/roles?role=viewer&project=default", e.token, nil); code != 200 {
		t.Errorf("revoke role: %d %s", code, b)
	}
	code, b = e.do("GET", "/api/v1/tokens?all=true", e.tokens["auditor"], nil)
	var tl apitypes.TokenList
	json.Unmarshal(b, &tl)
	if code != 200 || len(tl.Tokens) < 9 || strings.Contains(string(b), "sha256") || strings.Contains(string(b), "ty_") {
		t.Errorf("auditor token list: %d %s", code, b)
	}
	if code, b := e.do("POST", "/api/v1/tokens", e.token, apitypes.TokenRequest{Expires: "soon"}); code != 400 {
		t.Errorf("bad expiry: %d %s", code, b)
	}
}

func countDenied(t *testing.T, st store.Store) int {
	t.Helper()
	recs, err := st.ListAudit(context.Background(), store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Result == domain.AuditDenied {
			n++
		}
	}
	return n
}

// TestAttemptReportHidesJobsTheCallerMayNotSee: reporting for an attempt
// of a job the caller may not read answers exactly as for a job that does
// not exist, so job ids cannot be probed through the report routes.
func TestAttemptReportHidesJobsTheCallerMayNotSee(t *testing.T) {
	e := newAuthzEnv(t)
	const missing = 99999
	body := `{"points": [{"step": 1, "metrics": {"loss": 0.5}}]}`
	for _, route := range []string{"/api/v1/jobs/%d/attempts/1/metrics", "/api/v1/jobs/%d/attempts/1/checkpoints"} {
		if strings.HasSuffix(route, "checkpoints") {
			body = `{"name": "step-1"}`
		}
		for _, tc := range []struct{ who, hidden string }{
			{"job", "other-project"},    // a job token, for another job
			{"member", "other-project"}, // alice, for carol's job
			{"member", "other-member"},  // alice, for bob's job in her own project
		} {
			hidden := e.jobs[tc.hidden]
			code, b := e.do("POST", fmt.Sprintf(route, hidden), e.tokens[tc.who], body)
			mcode, mb := e.do("POST", fmt.Sprintf(route, missing), e.tokens[tc.who], body)
			got := strings.ReplaceAll(string(b), strconv.FormatInt(hidden, 10), "ID")
			want := strings.ReplaceAll(string(mb), strconv.Itoa(missing), "ID")
			if code != 404 || mcode != 404 || got != want {
				t.Errorf("%s as %s for %s's job: %d %s; for a missing job: %d %s; want the same 404", route, tc.who, tc.hidden, code, b, mcode, mb)
			}
		}
	}
	// A job that the caller sees but may not report for stays a 403.
	code, b := e.do("POST", fmt.Sprintf("/api/v1/jobs/%d/attempts/1/metrics", e.jobs["own"]), e.tokens["member"],
		`{"points": [{"step": 1, "metrics": {"loss": 0.5}}]}`)
	if code != 403 || !strings.Contains(string(b), "job token") {
		t.Errorf("member reporting for her own job: %d %s, want 403 naming the job token", code, b)
	}
}
