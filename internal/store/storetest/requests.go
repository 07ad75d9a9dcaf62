package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// testRequests: compute requests round-trip, their decisions are guarded,
// and only approved, unexpired ones are active grants.
func testRequests(t *testing.T, s store.Store) {
	ctx := context.Background()
	putPool(t, s, testPool("standard"))
	if _, err := s.CreateRequest(ctx, domain.QuotaRequest{Project: "vision", Pool: "nope", Until: at(100), CreatedAt: at(0)}, setupAudit); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("request for a missing pool: err = %v, want ErrNotFound", err)
	}
	in := domain.QuotaRequest{Project: "vision", Pool: "standard", Extra: domain.Limits{GPUs: 16, CPUs: 8.5, Memory: 64 << 30, Jobs: 2},
		Until: at(100), Reason: "paper deadline", Requester: "alice", CreatedAt: at(1)}
	a, err := s.CreateRequest(ctx, in, setupAudit)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.CreateRequest(ctx, domain.QuotaRequest{Project: "nlp", Pool: "standard", Extra: domain.Limits{GPUs: 1}, Until: at(100), Requester: "bob", CreatedAt: at(2)}, setupAudit)
	if err != nil {
		t.Fatal(err)
	}
	if a.ID <= 0 || b.ID <= a.ID || a.State != domain.RequestPending {
		t.Fatalf("created %+v and %+v", a, b)
	}
	got, err := s.GetRequest(ctx, a.ID)
	want := in
	want.ID, want.State = a.ID, domain.RequestPending
	if err != nil || got != want {
		t.Fatalf("GetRequest = %+v, %v\nwant %+v", got, err, want)
	}
	if _, err := s.GetRequest(ctx, 9999); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("missing request: err = %v", err)
	}
	if l, _ := s.ListRequests(ctx, "", ""); len(l) != 2 || l[0].ID != b.ID {
		t.Errorf("list all = %+v, want newest first", l)
	}
	if l, _ := s.ListRequests(ctx, "vision", "standard"); len(l) != 1 || l[0].ID != a.ID {
		t.Errorf("list vision = %+v", l)
	}

	dec, err := s.DecideRequest(ctx, a.ID, domain.RequestApproved, "carol", at(3), "ok for two weeks", setupAudit)
	if err != nil || dec.State != domain.RequestApproved || dec.Decider != "carol" || !dec.DecidedAt.Equal(at(3)) || dec.Note != "ok for two weeks" {
		t.Fatalf("approve = %+v, %v", dec, err)
	}
	if _, err := s.DecideRequest(ctx, a.ID, domain.RequestDenied, "dave", at(4), "", setupAudit); !errors.Is(err, store.ErrConflict) {
		t.Errorf("deciding twice: err = %v, want ErrConflict", err)
	}
	if _, err := s.DecideRequest(ctx, 9999, domain.RequestDenied, "dave", at(4), "", setupAudit); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deciding a missing request: err = %v, want ErrNotFound", err)
	}
	if _, err := s.DecideRequest(ctx, b.ID, domain.RequestDenied, "dave", at(4), "not now", setupAudit); err != nil {
		t.Fatal(err)
	}
	grants, err := s.ActiveGrants(ctx, at(50))
	if err != nil || len(grants) != 1 || grants[0].ID != a.ID {
		t.Fatalf("active grants before expiry = %+v, %v; want the approved one", grants, err)
	}
	if grants, _ := s.ActiveGrants(ctx, at(100).Add(time.Nanosecond)); len(grants) != 0 {
		t.Errorf("active grants after expiry = %+v, want none", grants)
	}
}
