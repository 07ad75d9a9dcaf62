package service_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store"
)

// Budgets: set with defaults and audited before and after, read back with
// the period's spend from the history of newCostEnv, refused field by
// field, visible to the project's roles, writable by admins only, removed.
func TestBudgets(t *testing.T) {
	svc, raw := newCostEnv(t)
	ctx := context.Background()
	admin := service.Principal{Subject: "admin", Role: "admin"}
	b := domain.Budget{Project: "vision", Amount: mustMoney(t, "100"), Period: domain.BudgetMonthly, Action: domain.BudgetBlock}
	st, err := svc.Cost.SetBudget(ctx, admin, b)
	if err != nil {
		t.Fatal(err)
	}
	// March 2026 so far: vision spent 23.46; job 2 runs without a timeout,
	// so what it may still cost has no bound.
	if !st.InForce || st.Use.Period != "2026-03" || st.Use.Spent != mustMoney(t, "23.46") || !st.Use.Unbounded {
		t.Fatalf("status = %+v", st)
	}
	if got := st.Budget.Thresholds; len(got) != 3 || got[0] != 50 || got[2] != 100 {
		t.Errorf("default thresholds = %v, want 50, 80, 100", got)
	}
	b.Amount = mustMoney(t, "250")
	if _, err := svc.Cost.SetBudget(ctx, admin, b); err != nil {
		t.Fatal(err)
	}
	recs, err := raw.ListAudit(ctx, store.AuditFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, r := range recs {
		if r.Action == "budget.write" && r.Target == "budget/vision" && strings.Contains(string(r.Before), `"100.00"`) && strings.Contains(string(r.After), `"250.00"`) {
			found = true
		}
	}
	if !found {
		t.Errorf("no audit record of the raise from 100.00 to 250.00 among %d records", len(recs))
	}

	bad := map[string]domain.Budget{
		"amount":        {Project: "vision", Period: domain.BudgetMonthly},
		"period":        {Project: "vision", Amount: 1, Period: "fortnight"},
		"action":        {Project: "vision", Amount: 1, Period: domain.BudgetMonthly, Action: "panic"},
		"thresholds[1]": {Project: "vision", Amount: 1, Period: domain.BudgetMonthly, Thresholds: []int{80, 50}},
		"end":           {Project: "vision", Amount: 1, Start: costAt(5), End: costAt(1)},
		"project":       {Project: "Not A Name", Amount: 1, Period: domain.BudgetMonthly},
	}
	for field, b := range bad {
		var fe domain.FieldErrors
		if _, err := svc.Cost.SetBudget(ctx, admin, b); !errors.As(err, &fe) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: err = %v, want a field error naming %s", field, err, field)
		}
	}
	member := service.Principal{Subject: "bob", Projects: []domain.ProjectRole{{Project: "vision", Role: domain.RoleMember}}}
	if _, err := svc.Cost.SetBudget(ctx, member, b); !errors.Is(err, domain.ErrForbidden) {
		t.Errorf("a member setting a budget: %v, want forbidden", err)
	}
	if got, err := svc.Cost.Budgets(ctx, member, ""); err != nil || len(got) != 1 || got[0].Budget.Amount != mustMoney(t, "250") {
		t.Errorf("a member's budgets = %+v, %v; want vision's", got, err)
	}
	other := service.Principal{Subject: "carol", Projects: []domain.ProjectRole{{Project: "nlp", Role: domain.RoleMember}}}
	if got, err := svc.Cost.Budgets(ctx, other, ""); err != nil || len(got) != 0 {
		t.Errorf("another project's member sees %+v, %v; want none", got, err)
	}
	if err := svc.Cost.DeleteBudget(ctx, admin, "vision"); err != nil {
		t.Fatal(err)
	}
	if err := svc.Cost.DeleteBudget(ctx, admin, "vision"); !errors.Is(err, domain.ErrNotFound) || !strings.Contains(err.Error(), "budget ls") {
		t.Errorf("deleting a missing budget: %v", err)
	}
}
