package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// identityTests cover store.Users and the visibility filter of ListJobs.
var identityTests = map[string]func(t *testing.T, s store.Store){
	"UsersCreateGetList": testUsersCreateGetList,
	"UsersRoles":         testUsersRoles,
	"UsersTokenAdmin":    testUsersTokenAdmin,
	"ListJobsRestricted": testListJobsRestricted,
	"UsersCreateTokens":  testUsersCreateTokens,
	"UsersDeleteTokens":  testUsersDeleteTokens,
	"ApplyJobTokens":     testApplyJobTokens,
}

func testUsersCreateGetList(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, name := range []string{"bob", "alice"} {
		u, err := s.CreateUser(ctx, domain.User{Name: name, CreatedAt: t0}, setupAudit)
		if err != nil {
			t.Fatalf("CreateUser(%s): %v", name, err)
		}
		if u.Name != name || !u.CreatedAt.Equal(t0) {
			t.Errorf("CreateUser returned %+v", u)
		}
	}
	if _, err := s.CreateUser(ctx, domain.User{Name: "alice", CreatedAt: at(1)}, setupAudit); !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateUser of an existing name: %v, want ErrConflict", err)
	}
	u, err := s.GetUser(ctx, "alice")
	if err != nil || u.Name != "alice" || !u.CreatedAt.Equal(t0) || len(u.Roles) != 0 {
		t.Errorf("GetUser = %+v, %v", u, err)
	}
	if _, err := s.GetUser(ctx, "carol"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetUser of a missing user: %v, want ErrNotFound", err)
	}
	users, err := s.ListUsers(ctx)
	if err != nil || len(users) != 2 || users[0].Name != "alice" || users[1].Name != "bob" {
		t.Errorf("ListUsers = %+v, %v; want alice, bob", users, err)
	}
}

func testUsersRoles(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.GrantRole(ctx, "ghost", domain.RoleBinding{Role: domain.RoleAdmin}, t0, setupAudit); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GrantRole to a missing user: %v, want ErrNotFound", err)
	}
	if _, err := s.CreateUser(ctx, domain.User{Name: "alice", CreatedAt: t0}, setupAudit); err != nil {
		t.Fatal(err)
	}
	grants := []domain.RoleBinding{
		{Role: domain.RoleMember, Project: "vision"},
		{Role: domain.RoleAuditor},
		{Role: domain.RoleViewer, Project: "audio"},
		{Role: domain.RoleLead, Project: "vision"},
	}
	for _, b := range grants {
		created, err := s.GrantRole(ctx, "alice", b, t0, setupAudit)
		if err != nil || !created {
			t.Fatalf("GrantRole(%s) = %v, %v", b, created, err)
		}
	}
	if created, err := s.GrantRole(ctx, "alice", grants[0], at(1), setupAudit); err != nil || created {
		t.Errorf("GrantRole of a held role = %v, %v; want false, nil", created, err)
	}
	u, err := s.GetUser(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	want := []domain.RoleBinding{{Role: domain.RoleAuditor}, {Role: domain.RoleViewer, Project: "audio"},
		{Role: domain.RoleLead, Project: "vision"}, {Role: domain.RoleMember, Project: "vision"}}
	if !slices.Equal(u.Roles, want) {
		t.Errorf("roles = %v, want %v", u.Roles, want)
	}
	if err := s.RevokeRole(ctx, "alice", grants[0], setupAudit); err != nil {
		t.Fatalf("RevokeRole: %v", err)
	}
	if err := s.RevokeRole(ctx, "alice", grants[0], setupAudit); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RevokeRole of a role not held: %v, want ErrNotFound", err)
	}
	users, err := s.ListUsers(ctx)
	if err != nil || len(users) != 1 || len(users[0].Roles) != 3 {
		t.Errorf("ListUsers after revoke = %+v, %v; want alice with 3 roles", users, err)
	}
}

func testUsersTokenAdmin(t *testing.T, s store.Store) {
	ctx := context.Background()
	a, err := s.CreateToken(ctx, store.Token{Name: "laptop", Subject: "alice", Hash: "sha256:a1", CreatedAt: t0, ExpiresAt: at(100)}, setupAudit)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.CreateToken(ctx, store.Token{Name: "ci", Subject: "bob", Hash: "sha256:b1", CreatedAt: at(1)}, setupAudit)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.GetToken(ctx, a.ID)
	if err != nil {
		t.Fatalf("GetToken: %v", err)
	}
	if d := diff(a, got); d != "" {
		t.Errorf("GetToken differs:%s", d)
	}
	if _, err := s.GetToken(ctx, b.ID+100); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetToken of a missing id: %v, want ErrNotFound", err)
	}
	all, err := s.ListTokens(ctx, "")
	if err != nil || len(all) != 2 || all[0].ID != a.ID || all[1].ID != b.ID {
		t.Errorf("ListTokens(\"\") = %+v, %v", all, err)
	}
	mine, err := s.ListTokens(ctx, "bob")
	if err != nil || len(mine) != 1 || mine[0].ID != b.ID {
		t.Errorf("ListTokens(bob) = %+v, %v", mine, err)
	}
	r, err := s.RevokeToken(ctx, a.ID, at(5), setupAudit)
	if err != nil || !r.RevokedAt.Equal(at(5)) {
		t.Fatalf("RevokeToken = %+v, %v", r, err)
	}
	r, err = s.RevokeToken(ctx, a.ID, at(9), setupAudit)
	if err != nil || !r.RevokedAt.Equal(at(5)) {
		t.Errorf("second RevokeToken = %v, %v; want the first time kept", r.RevokedAt, err)
	}
	byHash, err := s.TokenByHash(ctx, "sha256:a1")
	if err != nil || !byHash.RevokedAt.Equal(at(5)) {
		t.Errorf("TokenByHash after revoke: %v, %v", byHash.RevokedAt, err)
	}
	if _, err := s.RevokeToken(ctx, b.ID+100, at(5), setupAudit); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RevokeToken of a missing id: %v, want ErrNotFound", err)
	}
}

// testUsersCreateTokens: the tokens of several attempts are stored in one
// write; a repeated hash stores none of them.
func testUsersCreateTokens(t *testing.T, s store.Store) {
	ctx := context.Background()
	job := func(n int, hash string) store.Token {
		return store.Token{Name: "job", Subject: domain.JobTokenSubject(9, n), Role: string(domain.RoleJob), Hash: hash, CreatedAt: at(n)}
	}
	if err := s.CreateTokens(ctx, []store.Token{job(1, "sha256:k1"), job(2, "sha256:k2"), job(3, "sha256:k3")}, setupAudit, setupAudit, setupAudit); err != nil {
		t.Fatal(err)
	}
	for i, h := range []string{"sha256:k1", "sha256:k2", "sha256:k3"} {
		tok, err := s.TokenByHash(ctx, h)
		if err != nil || tok.Subject != domain.JobTokenSubject(9, i+1) || tok.ID == 0 || !tok.CreatedAt.Equal(at(i+1)) {
			t.Errorf("TokenByHash(%s) = %+v, %v; want attempt %d's token", h, tok, err, i+1)
		}
	}
	err := s.CreateTokens(ctx, []store.Token{job(4, "sha256:k4"), job(5, "sha256:k2")}, setupAudit, setupAudit)
	if !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateTokens with a stored hash: %v, want ErrConflict", err)
	}
	if tok, err := s.TokenByHash(ctx, "sha256:k4"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a token of a write that failed was stored: %+v, %v", tok, err)
	}
	if err := s.CreateTokens(ctx, []store.Token{job(6, "")}, setupAudit); err == nil {
		t.Error("CreateTokens took a token without a hash")
	}
	if toks, err := s.ListTokens(ctx, ""); err != nil || len(toks) != 3 {
		t.Errorf("ListTokens = %+v, %v; want the three attempts' tokens", toks, err)
	}
}

// testUsersDeleteTokens: tokens are deleted by id, the others kept.
func testUsersDeleteTokens(t *testing.T, s store.Store) {
	ctx := context.Background()
	var ids []int64
	for i, h := range []string{"sha256:d1", "sha256:d2", "sha256:d3"} {
		tok, err := s.CreateToken(ctx, store.Token{Name: "web session", Subject: "alice", Hash: h, CreatedAt: at(i)}, setupAudit)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tok.ID)
	}
	n, err := s.DeleteTokens(ctx, []int64{ids[0], ids[2], ids[2] + 100}, setupAudit)
	if err != nil || n != 2 {
		t.Errorf("DeleteTokens = %d, %v; want 2", n, err)
	}
	if toks, err := s.ListTokens(ctx, "alice"); err != nil || len(toks) != 1 || toks[0].ID != ids[1] {
		t.Errorf("ListTokens after DeleteTokens = %+v, %v; want only token %d", toks, err, ids[1])
	}
}

func testListJobsRestricted(t *testing.T, s store.Store) {
	ctx := context.Background()
	// vision: alice 1, bob 2; audio: alice 3, carol 4; nlp: dan 5.
	subs := []struct{ project, submitter string }{{"vision", "alice"}, {"vision", "bob"}, {"audio", "alice"}, {"audio", "carol"}, {"nlp", "dan"}}
	ids := map[string]int64{}
	for i, x := range subs {
		j := create(t, s, newJob(t, testSpec("j", x.project), x.submitter, at(i)))
		ids[x.project+"/"+x.submitter] = j.ID
	}
	tests := map[string]struct {
		f    store.JobFilter
		want []string
	}{
		"own only":            {store.JobFilter{Restrict: true, Submitter: "alice"}, []string{"audio/alice", "vision/alice"}},
		"projects only":       {store.JobFilter{Restrict: true, Projects: []string{"vision", "nlp"}}, []string{"nlp/dan", "vision/bob", "vision/alice"}},
		"projects or own":     {store.JobFilter{Restrict: true, Projects: []string{"audio"}, Submitter: "bob"}, []string{"audio/carol", "audio/alice", "vision/bob"}},
		"nothing":             {store.JobFilter{Restrict: true}, nil},
		"with project filter": {store.JobFilter{Restrict: true, Submitter: "alice", Project: "audio"}, []string{"audio/alice"}},
		"with states and limit": {store.JobFilter{Restrict: true, Submitter: "alice", Limit: 1,
			States: states(domain.JobQueued, domain.JobRunning)}, []string{"audio/alice"}},
		"unrestricted ignores fields": {store.JobFilter{Submitter: "nobody", Projects: []string{"x"}, Limit: 2}, []string{"nlp/dan", "audio/carol"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			jobs, err := s.ListJobs(ctx, tc.f)
			if err != nil {
				t.Fatalf("ListJobs: %v", err)
			}
			var got []int64
			for _, j := range jobs {
				got = append(got, j.ID)
			}
			var want []int64
			for _, k := range tc.want {
				want = append(want, ids[k])
			}
			if !slices.Equal(got, want) {
				t.Errorf("ids = %v, want %v (%v)", got, want, tc.want)
			}
		})
	}
}

// testApplyJobTokens: the change that creates an attempt stores its job
// token and the token's audit record; the change that ends it deletes
// every token of the attempt and appends another record. A change that
// does not apply writes neither, and the others of its Apply still do.
func testApplyJobTokens(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := create(t, s, newJob(t, testSpec("a", "p"), "alice", t0))
	b := create(t, s, newJob(t, testSpec("b", "p"), "alice", t0))
	record := func(action string, id int64) domain.AuditRecord {
		return domain.AuditRecord{At: at(1), Actor: "system:control", Action: action, Target: fmt.Sprintf("attempt/%d/1", id), Result: domain.AuditOK}
	}
	grant := func(id int64, hash string) *store.TokenGrant {
		return &store.TokenGrant{Token: store.Token{Name: "job", Subject: domain.JobTokenSubject(id, 1), Role: string(domain.RoleJob),
			Hash: hash, CreatedAt: at(1)}, Audit: record("token.create", id)}
	}
	start := func(id int64, g *store.TokenGrant) store.Change {
		return store.Change{JobID: id, Move: domain.MoveStart(), At: at(1),
			Attempt: &store.AttemptChange{Create: true, Number: 1, To: domain.AttemptStarting, Token: g}}
	}
	unstarted := func(when string) {
		t.Helper()
		if j := get(t, s, b.ID); j.State != domain.JobQueued || j.Attempts != 0 {
			t.Errorf("%s: job b is %s with %d attempts; want queued with none", when, j.State, j.Attempts)
		}
	}

	// b's token names a's attempt: b's start is refused on its own.
	errs := apply(t, s, start(a.ID, grant(a.ID, "sha256:ja")), start(b.ID, grant(a.ID, "sha256:jb")))
	if errs[0] != nil || !errors.Is(errs[1], domain.ErrInvalid) {
		t.Fatalf("Apply = %v; want a's start, and b's refused as invalid", errs)
	}
	if tok, err := s.TokenByHash(ctx, "sha256:ja"); err != nil || tok.Subject != domain.JobTokenSubject(a.ID, 1) || tok.Role != string(domain.RoleJob) {
		t.Errorf("a's token = %+v, %v; want stored with its start", tok, err)
	}
	if tok, err := s.TokenByHash(ctx, "sha256:jb"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused start's token = %+v, %v; want none stored", tok, err)
	}
	unstarted("token of another attempt")
	// A hash already stored: the start is a conflict, and nothing of it stays.
	if errs := apply(t, s, start(b.ID, grant(b.ID, "sha256:ja"))); !errors.Is(errs[0], store.ErrConflict) {
		t.Errorf("a start with a stored token hash = %v; want ErrConflict", errs[0])
	}
	unstarted("stored hash")
	// A token without a hash, and one on a change that creates no attempt.
	if errs := apply(t, s, start(b.ID, grant(b.ID, ""))); !errors.Is(errs[0], domain.ErrInvalid) {
		t.Errorf("a start with a token without a hash = %v; want ErrInvalid", errs[0])
	}
	unstarted("empty hash")
	run := store.Change{JobID: a.ID, Move: domain.MoveRun(), At: at(2), Attempt: &store.AttemptChange{Number: 1,
		From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning, Token: grant(a.ID, "sha256:jc")}}
	if errs := apply(t, s, run); !errors.Is(errs[0], domain.ErrInvalid) {
		t.Errorf("a token on a change that creates no attempt = %v; want ErrInvalid", errs[0])
	}
	// Tokens end only with the attempt.
	run.Attempt.Token = nil
	endRec := record("token.revoke", a.ID)
	run.Attempt.EndTokens = &endRec
	if errs := apply(t, s, run); !errors.Is(errs[0], domain.ErrInvalid) {
		t.Errorf("EndTokens on a change to running = %v; want ErrInvalid", errs[0])
	}
	run.Attempt.EndTokens = nil
	mustApply(t, s, run, start(b.ID, grant(b.ID, "sha256:jb")))

	// A second token of a's attempt (a restart reattached to it), then its end.
	if err := s.CreateTokens(ctx, []store.Token{{Name: "job", Subject: domain.JobTokenSubject(a.ID, 1), Role: string(domain.RoleJob),
		Hash: "sha256:ja2", CreatedAt: at(2)}}, setupAudit); err != nil {
		t.Fatal(err)
	}
	code := 0
	mustApply(t, s, store.Change{JobID: a.ID, Move: domain.MoveSucceed(), At: at(3), Attempt: &store.AttemptChange{Number: 1,
		From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptSucceeded, ExitCode: &code, EndTokens: &endRec}})
	for _, h := range []string{"sha256:ja", "sha256:ja2"} {
		if tok, err := s.TokenByHash(ctx, h); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("token %s after its attempt ended = %+v, %v; want deleted", h, tok, err)
		}
	}
	if tok, err := s.TokenByHash(ctx, "sha256:jb"); err != nil || tok.Subject != domain.JobTokenSubject(b.ID, 1) {
		t.Errorf("another attempt's token after a's end = %+v, %v; want kept", tok, err)
	}
	recs, err := s.ListAudit(ctx, store.AuditFilter{Target: "attempt/"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.Action+" "+r.Target)
	}
	want := []string{"token.create " + fmt.Sprintf("attempt/%d/1", a.ID), "token.create " + fmt.Sprintf("attempt/%d/1", b.ID),
		"token.revoke " + fmt.Sprintf("attempt/%d/1", a.ID)}
	if !slices.Equal(got, want) {
		t.Errorf("audit records = %q; want %q", got, want)
	}
}
