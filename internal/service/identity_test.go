package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/authz"
	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite/sqlitetest"
)

// auditSpy is a store that records the audit records given to quota
// writes, and those appended on their own.
type auditSpy struct {
	store.Store
	mu       sync.Mutex
	attached []domain.AuditRecord
	appended []domain.AuditRecord
}

func (s *auditSpy) PutQuota(ctx context.Context, q domain.Quota, audit domain.AuditRecord) error {
	s.mu.Lock()
	s.attached = append(s.attached, audit)
	s.mu.Unlock()
	return s.Store.PutQuota(ctx, q, audit)
}

func (s *auditSpy) AppendAudit(ctx context.Context, recs ...domain.AuditRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.appended = append(s.appended, recs...)
	return nil
}

func (s *auditSpy) records() (attached, appended []domain.AuditRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]domain.AuditRecord(nil), s.attached...), append([]domain.AuditRecord(nil), s.appended...)
}

type idEnv struct {
	svc   *service.Service
	clk   *clock.Fake
	spy   *auditSpy
	admin service.Principal // as authenticated from the bootstrap token
	ctx   context.Context
}

func newIDEnv(t *testing.T) idEnv {
	t.Helper()
	st := sqlitetest.Open(t, t.TempDir())
	spy := &auditSpy{Store: st}
	clk := clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	svc := service.New(service.Config{Store: spy, Clock: clk})
	ctx := service.WithClient(context.Background(), "192.0.2.7")
	secret, err := svc.Identity.Bootstrap(ctx)
	if err != nil || secret == "" {
		t.Fatalf("Bootstrap = %q, %v", secret, err)
	}
	p, err := svc.Identity.Authenticate(ctx, secret)
	if err != nil {
		t.Fatalf("authenticate the bootstrap token: %v", err)
	}
	return idEnv{svc: svc, clk: clk, spy: spy, admin: p, ctx: ctx}
}

// user creates name with roles and returns a token secret for it.
func (e idEnv) user(t *testing.T, name string, roles ...domain.RoleBinding) string {
	t.Helper()
	if _, err := e.svc.Identity.CreateUser(e.ctx, e.admin, name); err != nil {
		t.Fatalf("CreateUser(%s): %v", name, err)
	}
	for _, b := range roles {
		if _, err := e.svc.Identity.GrantRole(e.ctx, e.admin, name, b); err != nil {
			t.Fatalf("GrantRole(%s, %s): %v", name, b, err)
		}
	}
	secret, _, err := e.svc.Identity.CreateToken(e.ctx, e.admin, service.TokenInput{User: name, TTL: time.Hour})
	if err != nil {
		t.Fatalf("CreateToken(%s): %v", name, err)
	}
	return secret
}

func TestBootstrapAdminPrincipal(t *testing.T) {
	e := newIDEnv(t)
	if e.admin.Subject != "admin" || !e.admin.HasGlobal(domain.RoleAdmin) || e.admin.Role != domain.RoleAdmin || e.admin.TokenID == 0 {
		t.Errorf("bootstrap principal = %+v", e.admin)
	}
	if again, err := e.svc.Identity.Bootstrap(e.ctx); err != nil || again != "" {
		t.Errorf("second Bootstrap = %q, %v; want nothing", again, err)
	}
}

func TestRevokedTokenStopsAtOnce(t *testing.T) {
	e := newIDEnv(t)
	secret := e.user(t, "alice", domain.RoleBinding{Role: domain.RoleMember, Project: "vision"})
	p, err := e.svc.Identity.Authenticate(e.ctx, secret)
	if err != nil {
		t.Fatalf("Authenticate: %v", err)
	}
	if _, err := e.svc.Identity.RevokeToken(e.ctx, p, p.TokenID); err != nil { // users revoke their own tokens
		t.Fatalf("RevokeToken: %v", err)
	}
	_, err = e.svc.Identity.Authenticate(e.ctx, secret)
	if !errors.Is(err, domain.ErrUnauthorized) || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("Authenticate right after revoke = %v, want unauthorized: revoked", err)
	}
}

func TestExpiredTokenStopsAtOnce(t *testing.T) {
	e := newIDEnv(t)
	secret := e.user(t, "alice") // expires in an hour
	if _, err := e.svc.Identity.Authenticate(e.ctx, secret); err != nil {
		t.Fatalf("Authenticate: %v", err)
	}
	e.clk.Advance(time.Hour - time.Nanosecond)
	if _, err := e.svc.Identity.Authenticate(e.ctx, secret); err != nil {
		t.Fatalf("Authenticate just before expiry: %v", err)
	}
	e.clk.Advance(time.Nanosecond)
	if _, err := e.svc.Identity.Authenticate(e.ctx, secret); !errors.Is(err, domain.ErrUnauthorized) || !strings.Contains(err.Error(), "expired") {
		t.Errorf("Authenticate at expiry = %v, want unauthorized: expired", err)
	}
}

func TestRevokedRoleStopsAtOnce(t *testing.T) {
	e := newIDEnv(t)
	lead := domain.RoleBinding{Role: domain.RoleLead, Project: "vision"}
	secret := e.user(t, "lee", lead)
	p, _ := e.svc.Identity.Authenticate(e.ctx, secret)
	if len(p.ProjectRoles("vision")) != 1 {
		t.Fatalf("principal = %+v, want lead of vision", p)
	}
	if err := e.svc.Identity.RevokeRole(e.ctx, e.admin, "lee", lead); err != nil {
		t.Fatal(err)
	}
	p, err := e.svc.Identity.Authenticate(e.ctx, secret)
	if err != nil || len(p.Projects) != 0 {
		t.Errorf("after revoking the role: %+v, %v; want no project roles", p, err)
	}
}

func TestFailedAuthLimitedPerAddressForBadTokensOnly(t *testing.T) {
	e := newIDEnv(t)
	good := e.user(t, "alice")
	job, err := e.svc.Identity.IssueJobToken(e.ctx, service.AttemptRef{JobID: 7, Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Every job calls from the address of its node: one flooding bad tokens
	// spends that address's budget.
	local := service.WithClient(context.Background(), "127.0.0.1")
	for i := range 10 {
		if _, err := e.svc.Identity.Authenticate(local, fmt.Sprintf("ty_wrong%04d", i)); !errors.Is(err, domain.ErrUnauthorized) {
			t.Fatalf("failure %d: %v, want unauthorized", i+1, err)
		}
	}
	_, err = e.svc.Identity.Authenticate(local, "ty_wrong9999")
	var rl *service.RateLimitedError
	if !errors.As(err, &rl) || rl.Scope != "address" || rl.RetryAfter <= 0 || rl.RetryAfter > 6*time.Second ||
		!strings.Contains(err.Error(), "not known") || !strings.Contains(err.Error(), "from this address") {
		t.Fatalf("11th bad token = %v, want RateLimitedError for the address, with the reason and a wait up to 6s", err)
	}
	// Valid tokens from the same address pass: a user's, and a job's reports.
	if p, err := e.svc.Identity.Authenticate(local, good); err != nil || p.Subject != "alice" {
		t.Errorf("valid user token after the flood: %+v, %v", p, err)
	}
	if p, err := e.svc.Identity.Authenticate(local, job); err != nil || p.JobID != 7 || p.Attempt != 1 {
		t.Errorf("valid job token after the flood: %+v, %v", p, err)
	}
	// Other addresses are not affected.
	if _, err := e.svc.Identity.Authenticate(service.WithClient(context.Background(), "198.51.100.10"), "ty_other"); !errors.Is(err, domain.ErrUnauthorized) {
		t.Errorf("bad token from another address: %v, want unauthorized (not limited)", err)
	}
	e.clk.Advance(rl.RetryAfter)
	if _, err := e.svc.Identity.Authenticate(local, "ty_wrong9999"); !errors.Is(err, domain.ErrUnauthorized) || errors.As(err, &rl) {
		t.Errorf("after Retry-After: %v, want unauthorized", err)
	}
	_, appended := e.spy.records()
	var failed int
	for _, r := range appended {
		if r.Action == "auth.failed" {
			failed++
			if strings.Contains(r.Detail+r.Actor+r.Target, "ty_wrong") || r.Client == "" || r.Result != domain.AuditFailed {
				t.Errorf("auth.failed record %+v: leaks the token or lacks the client", r)
			}
		}
	}
	if failed != 12 { // the limited try is not recorded
		t.Errorf("%d auth.failed records, want 12", failed)
	}
}

func TestFailedAuthLimitedPerTokenPrefix(t *testing.T) {
	e := newIDEnv(t)
	good := e.user(t, "alice")
	// Guesses completing a token whose start leaked, each from its own
	// address: the token prefix's budget runs out.
	prefix := good[:12]
	guess := func(i int) (context.Context, string) {
		return service.WithClient(context.Background(), fmt.Sprintf("203.0.113.%d", i)), prefix + fmt.Sprintf("%039d", i)
	}
	for i := range 10 {
		if _, err := e.svc.Identity.Authenticate(guess(i)); !errors.Is(err, domain.ErrUnauthorized) {
			t.Fatalf("guess %d: %v, want unauthorized", i+1, err)
		}
	}
	_, err := e.svc.Identity.Authenticate(guess(10))
	var rl *service.RateLimitedError
	if !errors.As(err, &rl) || rl.Scope != "token" || !strings.Contains(err.Error(), "tokens starting like this one") {
		t.Fatalf("11th guess = %v, want RateLimitedError for the token prefix", err)
	}
	// Another prefix from a fresh address is not limited, and the real
	// token still passes.
	if _, err := e.svc.Identity.Authenticate(service.WithClient(context.Background(), "203.0.113.200"), "ty_elsewhere"); !errors.Is(err, domain.ErrUnauthorized) {
		t.Errorf("another prefix: %v, want unauthorized (not limited)", err)
	}
	if p, err := e.svc.Identity.Authenticate(service.WithClient(context.Background(), "203.0.113.201"), good); err != nil || p.Subject != "alice" {
		t.Errorf("the valid token with the limited prefix: %+v, %v", p, err)
	}
}

func TestQuotaChangeAuditedWithBeforeAfter(t *testing.T) {
	e := newIDEnv(t)
	if _, _, err := e.svc.Pools.PutPool(e.ctx, e.admin, validPool()); err != nil {
		t.Fatal(err)
	}
	ops, _ := e.svc.Identity.Authenticate(e.ctx, e.user(t, "ops", domain.RoleBinding{Role: domain.RoleResourceAdmin}))
	q := domain.Quota{Project: "vision", Pool: "standard", Guaranteed: domain.Limits{GPUs: 1}}
	if _, err := e.svc.Pools.SetQuota(e.ctx, ops, q); err != nil {
		t.Fatalf("resource-admin SetQuota: %v", err)
	}
	q.Guaranteed.GPUs = 3
	if _, err := e.svc.Pools.SetQuota(e.ctx, ops, q); err != nil {
		t.Fatalf("resource-admin SetQuota: %v", err)
	}
	attached, _ := e.spy.records()
	if len(attached) != 2 {
		t.Fatalf("%d records attached to quota writes, want 2: %+v", len(attached), attached)
	}
	r := attached[1]
	var before, after map[string]any
	if err := json.Unmarshal([]byte(r.Before), &before); err != nil {
		t.Fatalf("before %q: %v", r.Before, err)
	}
	if err := json.Unmarshal([]byte(r.After), &after); err != nil {
		t.Fatalf("after %q: %v", r.After, err)
	}
	if r.Actor != "user:ops" || r.Action != "quota.write" || r.Target != "quota/vision/standard" || r.Client != "192.0.2.7" ||
		r.Result != domain.AuditOK || before["gpus"] != 1.0 || after["gpus"] != 3.0 {
		t.Errorf("quota record = %+v", r)
	}
	if attached[0].Before != "" {
		t.Errorf("creating a quota has a before: %q", attached[0].Before)
	}
}

func TestDenialsAuditedAndWorded(t *testing.T) {
	e := newIDEnv(t)
	if _, _, err := e.svc.Pools.PutPool(e.ctx, e.admin, validPool()); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		roles []domain.RoleBinding
	}{
		"member":  {[]domain.RoleBinding{{Role: domain.RoleMember, Project: "vision"}}},
		"auditor": {[]domain.RoleBinding{{Role: domain.RoleAuditor}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, _ := e.svc.Identity.Authenticate(e.ctx, e.user(t, name, tc.roles...))
			_, err := e.svc.Pools.SetQuota(e.ctx, p, domain.Quota{Project: "vision", Pool: "standard"})
			if !errors.Is(err, domain.ErrForbidden) || !strings.Contains(err.Error(), "resource-admin") {
				t.Errorf("SetQuota by %s = %v, want forbidden naming resource-admin", name, err)
			}
			_, appended := e.spy.records()
			found := false
			for _, r := range appended {
				found = found || (r.Actor == "user:"+name && r.Action == "quota.write" && r.Result == domain.AuditDenied && r.Client == "192.0.2.7")
			}
			if !found {
				t.Errorf("no denied quota.write record for %s in %+v", name, appended)
			}
		})
	}
}

func TestJobTokenReportsOnlyForItsAttempt(t *testing.T) {
	e := newIDEnv(t)
	secret, err := e.svc.Identity.IssueJobToken(e.ctx, service.AttemptRef{JobID: 42, Attempt: 2})
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.svc.Identity.Authenticate(e.ctx, secret)
	if err != nil || p.JobID != 42 || p.Attempt != 2 || p.Subject != "" || p.Actor() != "job:42/2" {
		t.Fatalf("job principal = %+v, %v", p, err)
	}
	if d := authz.Decide(p, authz.AttemptReport, authz.Resource{Kind: "attempt", ID: "42/2"}); !d.Allow {
		t.Errorf("job token may not report for its attempt: %s", d.Reason)
	}
	if d := authz.Decide(p, authz.AttemptReport, authz.Resource{Kind: "attempt", ID: "42/1"}); d.Allow {
		t.Error("job token may report for another attempt")
	}
	if _, err := e.svc.Pools.ListPools(e.ctx, p); !errors.Is(err, domain.ErrForbidden) {
		t.Errorf("job token ListPools = %v, want forbidden", err)
	}
	if _, _, err := e.svc.Identity.CreateToken(e.ctx, p, service.TokenInput{}); !errors.Is(err, domain.ErrForbidden) {
		t.Errorf("job token CreateToken = %v, want forbidden", err)
	}
	// The attempt's end deletes its token in the store (the change that
	// ends it: store.AttemptChange.EndTokens); JobTokensEnded then makes
	// an authentication cached before the end go.
	if n, err := e.spy.Store.DeleteTokens(e.ctx, []int64{p.TokenID}); err != nil || n != 1 {
		t.Fatalf("delete the token = %d, %v", n, err)
	}
	e.svc.Identity.JobTokensEnded([]service.AttemptRef{{JobID: 42, Attempt: 2}})
	if _, err := e.svc.Identity.Authenticate(e.ctx, secret); !errors.Is(err, domain.ErrUnauthorized) {
		t.Errorf("job token after its attempt ended: %v, want unauthorized", err)
	}
}

// TestJobTokensEndedForgetsOnlyTheirs: an attempt's end forgets the cached
// authentication of its own tokens (both, when a restart issued it a
// second) and keeps everyone else's. The tokens are deleted in the store
// behind the service's back, so a token that still authenticates was
// answered from the cache.
func TestJobTokensEndedForgetsOnlyTheirs(t *testing.T) {
	e := newIDEnv(t)
	user := e.user(t, "ada")
	ended, other := service.AttemptRef{JobID: 7, Attempt: 1}, service.AttemptRef{JobID: 8, Attempt: 1}
	first, err := e.svc.Identity.IssueJobToken(e.ctx, ended)
	if err != nil {
		t.Fatal(err)
	}
	second, err := e.svc.Identity.IssueJobToken(e.ctx, ended) // as a restart reattaching to it does
	if err != nil {
		t.Fatal(err)
	}
	running, err := e.svc.Identity.IssueJobToken(e.ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, secret := range []string{user, first, second, running} {
		p, err := e.svc.Identity.Authenticate(e.ctx, secret)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.TokenID)
	}
	if n, err := e.spy.Store.DeleteTokens(e.ctx, ids); err != nil || n != len(ids) {
		t.Fatalf("delete the tokens = %d, %v", n, err)
	}
	e.svc.Identity.JobTokensEnded([]service.AttemptRef{ended})
	for name, secret := range map[string]string{"the ended attempt's first token": first, "its second": second} {
		if _, err := e.svc.Identity.Authenticate(e.ctx, secret); !errors.Is(err, domain.ErrUnauthorized) {
			t.Errorf("%s after the end: %v, want unauthorized", name, err)
		}
	}
	for name, secret := range map[string]string{"the user's token": user, "a running attempt's token": running} {
		if _, err := e.svc.Identity.Authenticate(e.ctx, secret); err != nil {
			t.Errorf("%s was not kept in the cache: %v", name, err)
		}
	}
}

// TestJobTokensOfSeveralAttempts: the tokens of a pass's starts are made
// together, each for its own attempt with its own audit record, and work
// once stored (by the starts' write; here IssueJobTokens, which stores
// them for attempts that exist); their end has a record of its own.
func TestJobTokensOfSeveralAttempts(t *testing.T) {
	e := newIDEnv(t)
	refs := []service.AttemptRef{{JobID: 5, Attempt: 1}, {JobID: 6, Attempt: 3}}
	secrets, grants, err := e.svc.Identity.GrantJobTokens(e.ctx, refs)
	if err != nil || len(secrets) != 2 || len(grants) != 2 || secrets[0] == secrets[1] {
		t.Fatalf("GrantJobTokens = %d secrets, %d grants, %v; want 2 distinct", len(secrets), len(grants), err)
	}
	for i, ref := range refs {
		g := grants[i]
		if g.Token.Subject != domain.JobTokenSubject(ref.JobID, ref.Attempt) || g.Token.Hash != service.HashToken(secrets[i]) ||
			g.Token.Role != string(domain.RoleJob) || g.Audit.Action != "token.create" || g.Audit.Target != "attempt/"+domain.AttemptRef(ref.JobID, ref.Attempt) {
			t.Errorf("grant %d = %+v; want attempt %d of job %d's token and its record", i, g, ref.Attempt, ref.JobID)
		}
		if _, err := e.svc.Identity.Authenticate(e.ctx, secrets[i]); !errors.Is(err, domain.ErrUnauthorized) {
			t.Errorf("token %d before it is stored: %v, want unauthorized", i, err)
		}
	}
	if end := e.svc.Identity.JobTokenEnd(e.ctx, refs[1]); end.Action != "token.revoke" || end.Target != "attempt/6/3" || end.Actor != "system:control" {
		t.Errorf("JobTokenEnd = %+v; want system:control's token.revoke of attempt/6/3", end)
	}
	secrets, err = e.svc.Identity.IssueJobTokens(e.ctx, refs)
	if err != nil || len(secrets) != 2 || secrets[0] == secrets[1] {
		t.Fatalf("IssueJobTokens = %d secrets, %v; want 2 distinct", len(secrets), err)
	}
	for i, ref := range refs {
		p, err := e.svc.Identity.Authenticate(e.ctx, secrets[i])
		if err != nil || p.JobID != ref.JobID || p.Attempt != ref.Attempt {
			t.Errorf("token %d authenticates as %+v, %v; want attempt %d of job %d", i, p, err, ref.Attempt, ref.JobID)
		}
	}
	if _, err := e.svc.Identity.IssueJobTokens(e.ctx, []service.AttemptRef{{JobID: 7, Attempt: 1}, {JobID: 7, Attempt: 0}}); err == nil {
		t.Error("IssueJobTokens took attempt 0")
	}
	recs, err := e.spy.Store.ListAudit(e.ctx, store.AuditFilter{Target: "attempt/"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.Action+" "+r.Target)
	}
	want := []string{"token.create attempt/5/1", "token.create attempt/6/3"}
	if !slices.Equal(got, want) {
		t.Errorf("audit records = %q, want %q", got, want)
	}
}

func TestTokensOfOthers(t *testing.T) {
	e := newIDEnv(t)
	alice, _ := e.svc.Identity.Authenticate(e.ctx, e.user(t, "alice", domain.RoleBinding{Role: domain.RoleMember, Project: "vision"}))
	bobSecret := e.user(t, "bob")
	bob, _ := e.svc.Identity.Authenticate(e.ctx, bobSecret)
	if _, _, err := e.svc.Identity.CreateToken(e.ctx, alice, service.TokenInput{User: "bob"}); !errors.Is(err, domain.ErrForbidden) {
		t.Errorf("alice creating bob's token = %v, want forbidden", err)
	}
	_, err := e.svc.Identity.RevokeToken(e.ctx, alice, bob.TokenID)
	if !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("alice revoking bob's token = %v, want not found", err)
	}
	toks, err := e.svc.Identity.ListTokens(e.ctx, alice, "", false)
	if err != nil || len(toks) != 1 || toks[0].Subject != "alice" || toks[0].Hash != "" {
		t.Errorf("alice's tokens = %+v, %v", toks, err)
	}
	if _, err := e.svc.Identity.ListTokens(e.ctx, alice, "", true); !errors.Is(err, domain.ErrForbidden) {
		t.Errorf("alice listing every token = %v, want forbidden", err)
	}
	if _, err := e.svc.Identity.Authenticate(e.ctx, bobSecret); err != nil {
		t.Errorf("bob's token stopped working: %v", err)
	}
}

func TestGrantRoleValidation(t *testing.T) {
	e := newIDEnv(t)
	e.user(t, "alice")
	tests := map[string]struct {
		b    domain.RoleBinding
		want string
	}{
		"unknown role":            {domain.RoleBinding{Role: "owner"}, "role"},
		"global with project":     {domain.RoleBinding{Role: domain.RoleAuditor, Project: "vision"}, "project"},
		"project role no project": {domain.RoleBinding{Role: domain.RoleMember}, "project"},
		"bad project name":        {domain.RoleBinding{Role: domain.RoleMember, Project: "Vision!"}, "project"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := e.svc.Identity.GrantRole(e.ctx, e.admin, "alice", tc.b)
			if paths := fieldPaths(t, err); len(paths) != 1 || paths[0] != tc.want {
				t.Errorf("paths = %v, want [%s]", paths, tc.want)
			}
		})
	}
	if _, err := e.svc.Identity.GrantRole(e.ctx, e.admin, "ghost", domain.RoleBinding{Role: domain.RoleAdmin}); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("grant to a missing user = %v, want not found", err)
	}
}

// TestAuditTrailInStore checks, against the real store's audit log, that a
// resource admin's quota change is recorded with before and after values,
// and that a denial and a failed authentication are appended.
func TestAuditTrailInStore(t *testing.T) {
	st := sqlitetest.Open(t, t.TempDir())
	lister := st
	svc := service.New(service.Config{Store: st})
	ctx := service.WithClient(context.Background(), "203.0.113.5")
	secret, _ := svc.Identity.Bootstrap(ctx)
	admin, _ := svc.Identity.Authenticate(ctx, secret)
	if _, _, err := svc.Pools.PutPool(ctx, admin, validPool()); err != nil {
		t.Fatal(err)
	}
	e := idEnv{svc: svc, admin: admin, ctx: ctx}
	ops, _ := svc.Identity.Authenticate(ctx, e.user(t, "ops", domain.RoleBinding{Role: domain.RoleResourceAdmin}))
	alice, _ := svc.Identity.Authenticate(ctx, e.user(t, "alice", domain.RoleBinding{Role: domain.RoleMember, Project: "vision"}))
	q := domain.Quota{Project: "vision", Pool: "standard", Guaranteed: domain.Limits{GPUs: 1}}
	for _, gpus := range []int{1, 2} {
		q.Guaranteed.GPUs = gpus
		if _, err := svc.Pools.SetQuota(ctx, ops, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.Pools.SetQuota(ctx, alice, q); !errors.Is(err, domain.ErrForbidden) {
		t.Fatalf("member SetQuota = %v, want forbidden", err)
	}
	if _, err := svc.Identity.Authenticate(ctx, "ty_not-a-token"); err == nil {
		t.Fatal("a wrong token authenticated")
	}
	recs, err := lister.ListAudit(ctx, store.AuditFilter{Action: "quota.write"})
	if err != nil {
		t.Fatal(err)
	}
	var okRecs, denied []domain.AuditRecord
	for _, r := range recs {
		switch r.Result {
		case domain.AuditOK:
			okRecs = append(okRecs, r)
		case domain.AuditDenied:
			denied = append(denied, r)
		}
	}
	if len(okRecs) != 2 || !strings.Contains(okRecs[1].Before, `"gpus":1`) || !strings.Contains(okRecs[1].After, `"gpus":2`) ||
		okRecs[1].Actor != "user:ops" || okRecs[1].Client != "203.0.113.5" {
		t.Errorf("quota changes recorded as %+v", okRecs)
	}
	if len(denied) != 1 || denied[0].Actor != "user:alice" {
		t.Errorf("denials recorded as %+v", denied)
	}
	failed, err := lister.ListAudit(ctx, store.AuditFilter{Action: "auth.failed"})
	if err != nil || len(failed) != 1 || strings.Contains(failed[0].Detail, "ty_not-a-token") || failed[0].Client != "203.0.113.5" {
		t.Errorf("auth.failed records = %+v, %v", failed, err)
	}
}

// A role granted to a user whose token is in use counts on the next request
// (the authentication cache must not keep the narrower view).
func TestGrantedRoleCountsAtOnce(t *testing.T) {
	e := newIDEnv(t)
	secret := e.user(t, "gina")
	p, err := e.svc.Identity.Authenticate(e.ctx, secret)
	if err != nil || len(p.Projects) != 0 {
		t.Fatalf("before the grant: %+v, %v", p, err)
	}
	if _, err := e.svc.Identity.GrantRole(e.ctx, e.admin, "gina", domain.RoleBinding{Role: domain.RoleMember, Project: "vision"}); err != nil {
		t.Fatal(err)
	}
	p, err = e.svc.Identity.Authenticate(e.ctx, secret)
	if err != nil || len(p.Projects) != 1 || p.Projects[0].Role != domain.RoleMember {
		t.Fatalf("after the grant: %+v, %v; want member of vision", p, err)
	}
}
