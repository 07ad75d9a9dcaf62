package service_test

import (
	"context"
	"errors"
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
	if _, _, err := e.svc.PutPool(ctx, admin, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.SetQuota(ctx, admin, domain.Quota{Project: "vision", Pool: "gpu", Guaranteed: domain.Limits{GPUs: 2}}); err != nil {
		t.Fatal(err)
	}
	spec := "name: big\nproject: vision\npool: gpu\nentrypoint: [true]\nresources: {gpus: 6}\n"
	submit := func() error {
		_, _, err := e.svc.Submit(ctx, lead, service.SubmitInput{Doc: []byte(spec)})
		return err
	}
	if err := submit(); !errors.Is(err, domain.ErrInvalid) {
		t.Fatalf("6 GPUs on a 2-GPU quota without borrowing: err = %v, want a refusal", err)
	}

	// A request is not a grant until decided.
	r, err := e.svc.RequestQuota(ctx, lead, domain.QuotaRequest{Project: "vision", Pool: "gpu", Extra: domain.Limits{GPUs: 4},
		Until: e.clk.Now().Add(48 * time.Hour), Reason: "rebuttal experiments"})
	if err != nil {
		t.Fatal(err)
	}
	if err := submit(); err == nil {
		t.Fatal("a pending request raised the quota")
	}
	if _, err := e.svc.DecideRequest(ctx, lead, r.ID, true, ""); !errors.Is(err, domain.ErrForbidden) {
		t.Fatalf("self-approval: err = %v, want forbidden", err)
	}
	if _, err := e.svc.DecideRequest(ctx, admin, r.ID, true, "ok"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.DecideRequest(ctx, admin, r.ID, false, "changed my mind"); !errors.Is(err, domain.ErrConflict) {
		t.Fatalf("deciding twice: err = %v, want conflict", err)
	}
	if err := submit(); err != nil {
		t.Fatalf("6 GPUs with an active 4-GPU grant: %v", err)
	}

	e.clk.Advance(48 * time.Hour)
	if err := submit(); err == nil || !strings.Contains(err.Error(), "2") {
		t.Fatalf("after expiry: err = %v, want the 2-GPU quota again", err)
	}
	reqs, _ := e.svc.ListRequests(ctx, admin, "vision", "")
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
			_, err := e.svc.RequestQuota(ctx, p, tc.r)
			if paths := fieldPaths(t, err); len(paths) == 0 || paths[0] != tc.path {
				t.Fatalf("err = %v, want a field error on %s", err, tc.path)
			}
		})
	}
}
