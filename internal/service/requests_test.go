package service_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// A grant raises admission capacity while it is active and stops at expiry.
func TestQuotaGrantRaisesCapacityUntilExpiry(t *testing.T) {
	e := newPoolEnv(t, nil)
	ctx := context.Background()
	lead := service.Principal{Subject: "lena", Projects: []domain.ProjectRole{{Project: "vision", Role: domain.RoleLead}}}
	pool := domain.Pool{Name: "gpu", Executor: "local", Nodes: []domain.Node{{Name: "n1", CPUs: 32, Memory: 256 << 30, GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}}}}
	if _, _, err := e.svc.Pools.PutPool(ctx, admin, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Pools.SetQuota(ctx, admin, domain.Quota{Project: "vision", Pool: "gpu", Guaranteed: domain.Limits{GPUs: 2}}); err != nil {
		t.Fatal(err)
	}
	spec := "name: big\nproject: vision\npool: gpu\nentrypoint: [true]\nresources: {gpus: 6}\n"
	submit := func() error {
		_, _, err := e.svc.Jobs.Submit(ctx, lead, service.SubmitInput{Doc: []byte(spec)})
		return err
	}
	if err := submit(); !errors.Is(err, domain.ErrInvalid) {
		t.Fatalf("6 GPUs on a 2-GPU quota without borrowing: err = %v, want a refusal", err)
	}

	// A request is not a grant until decided.
	r, err := e.svc.Pools.RequestQuota(ctx, lead, domain.QuotaRequest{Project: "vision", Pool: "gpu", Extra: domain.Limits{GPUs: 4},
		Until: e.clk.Now().Add(48 * time.Hour), Reason: "rebuttal experiments"})
	if err != nil {
		t.Fatal(err)
	}
	if err := submit(); err == nil {
		t.Fatal("a pending request raised the quota")
	}
	if _, err := e.svc.Pools.DecideRequest(ctx, lead, r.ID, true, ""); !errors.Is(err, domain.ErrForbidden) {
		t.Fatalf("self-approval: err = %v, want forbidden", err)
	}
	if _, err := e.svc.Pools.DecideRequest(ctx, admin, r.ID, true, "ok"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Pools.DecideRequest(ctx, admin, r.ID, false, "changed my mind"); !errors.Is(err, domain.ErrConflict) {
		t.Fatalf("deciding twice: err = %v, want conflict", err)
	}
	if err := submit(); err != nil {
		t.Fatalf("6 GPUs with an active 4-GPU grant: %v", err)
	}

	e.clk.Advance(48 * time.Hour)
	if err := submit(); err == nil || !strings.Contains(err.Error(), "2") {
		t.Fatalf("after expiry: err = %v, want the 2-GPU quota again", err)
	}
	reqs, _ := e.svc.Pools.ListRequests(ctx, admin, "vision", "")
	if len(reqs) != 1 || reqs[0].Status(e.clk.Now()) != "expired" {
		t.Fatalf("requests after expiry = %+v, want one expired grant", reqs)
	}
}

func TestQuotaRequestValidation(t *testing.T) {
	e := newPoolEnv(t, nil)
	ctx := context.Background()
	p := service.Principal{Subject: "lena", Projects: []domain.ProjectRole{{Project: "vision", Role: domain.RoleLead}}}
	cases := map[string]struct {
		r    domain.QuotaRequest
		path string
	}{
		"nothing asked": {domain.QuotaRequest{Project: "vision", Pool: "gpu", Until: e.clk.Now().Add(time.Hour), Reason: "why not"}, "gpus"},
		"past date":     {domain.QuotaRequest{Project: "vision", Pool: "gpu", Extra: domain.Limits{GPUs: 1}, Until: e.clk.Now().Add(-time.Hour), Reason: "late"}, "until"},
		"no reason":     {domain.QuotaRequest{Project: "vision", Pool: "gpu", Extra: domain.Limits{GPUs: 1}, Until: e.clk.Now().Add(time.Hour)}, "reason"},
		"bad project":   {domain.QuotaRequest{Project: "Vision", Pool: "gpu", Extra: domain.Limits{GPUs: 1}, Until: e.clk.Now().Add(time.Hour), Reason: "x y z"}, "project"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := e.svc.Pools.RequestQuota(ctx, p, tc.r)
			if paths := fieldPaths(t, err); len(paths) == 0 || paths[0] != tc.path {
				t.Fatalf("err = %v, want a field error on %s", err, tc.path)
			}
		})
	}
}

// TestSelfDecisionRefusedAndAudited: resource admins decide compute
// requests, but not one they filed; the refusal says who may decide it and
// is audited like every denial.
func TestSelfDecisionRefusedAndAudited(t *testing.T) {
	e := newAuditEnv(t)
	ctx := service.WithClient(context.Background(), "192.0.2.44")
	ops := service.Principal{Subject: "ops", Roles: []domain.Role{domain.RoleResourceAdmin}, Role: domain.RoleResourceAdmin,
		Projects: []domain.ProjectRole{{Project: "vision", Role: domain.RoleMember}}}
	other := service.Principal{Subject: "ops2", Roles: []domain.Role{domain.RoleResourceAdmin}, Role: domain.RoleResourceAdmin}
	lead := service.Principal{Subject: "lena", Projects: []domain.ProjectRole{{Project: "vision", Role: domain.RoleLead}}}
	r, err := e.svc.Pools.RequestQuota(ctx, ops, domain.QuotaRequest{Project: "vision", Pool: "default", Extra: domain.Limits{CPUs: 2},
		Until: e.clk.Now().Add(48 * time.Hour), Reason: "rebuttal experiments"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.Pools.DecideRequest(ctx, ops, r.ID, true, "")
	if !errors.Is(err, domain.ErrForbidden) || !strings.Contains(err.Error(), "another resource-admin or an admin") {
		t.Fatalf("self-approval: %v; want forbidden, naming who may decide", err)
	}
	if _, err := e.svc.Pools.DecideRequest(ctx, lead, r.ID, true, ""); !errors.Is(err, domain.ErrForbidden) || !strings.Contains(err.Error(), "resource-admin") {
		t.Errorf("a lead approving: %v; want forbidden, naming resource-admin", err)
	}
	var denied []domain.AuditRecord
	for _, rec := range e.records(t, "quota.approve") {
		if rec.Result == domain.AuditDenied {
			denied = append(denied, rec)
		}
	}
	if len(denied) != 2 || denied[0].Actor != ops.Actor() || denied[0].Target != "request/"+strconv.FormatInt(r.ID, 10) ||
		denied[0].Client != "192.0.2.44" || !strings.Contains(denied[0].Detail, "you filed") {
		t.Errorf("denial records = %+v; want the self-approval's and the lead's, with actor, target, client and reason", denied)
	}
	if got, err := e.svc.Pools.DecideRequest(ctx, other, r.ID, true, "ok"); err != nil || got.State != domain.RequestApproved {
		t.Errorf("another resource admin approving: %+v, %v", got, err)
	}
}
