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

// A dry run prices the job's worst case at its pool's rates and says how
// it stands against its project's budget.
func TestPreviewPricesTheWorstCaseAgainstTheBudget(t *testing.T) {
	svc, _ := newCostEnv(t)
	ctx := context.Background()
	admin := service.Principal{Subject: "admin", Role: "admin"}
	doc := []byte("name: probe\nproject: nlp\npool: gpu\nentrypoint: [train]\nresources: {gpus: 1, cpus: 1, memory: 1GiB}\npolicy: {timeout: 4h}\n")
	pv, err := svc.Jobs.Preview(ctx, admin, service.SubmitInput{Doc: doc})
	if err != nil {
		t.Fatal(err)
	}
	// 4 h × (2.10 + 0.04 + 0.005) = 8.58
	if !pv.CostBounded || pv.WorstCase != mustMoney(t, "8.58") || pv.Budget != nil {
		t.Fatalf("worst case %s (bounded %v), budget %+v; want 8.58 and no budget", pv.WorstCase, pv.CostBounded, pv.Budget)
	}
	// nlp spent 1.50 in March; a 10.00 block budget leaves room for 8.50.
	if _, err := svc.Cost.SetBudget(ctx, admin, domain.Budget{Project: "nlp", Amount: mustMoney(t, "10"), Period: domain.BudgetMonthly, Action: domain.BudgetBlock}); err != nil {
		t.Fatal(err)
	}
	pv, err = svc.Jobs.Preview(ctx, admin, service.SubmitInput{Doc: doc})
	if err != nil {
		t.Fatal(err)
	}
	if b := pv.Budget; b == nil || b.Fits || b.Status.Use.Spent != mustMoney(t, "1.50") || !strings.Contains(b.Why, "up to 8.58 more") {
		t.Fatalf("budget = %+v; want a refusal naming 8.58", b)
	}
	if _, err := svc.Cost.SetBudget(ctx, admin, domain.Budget{Project: "nlp", Amount: mustMoney(t, "10.08"), Period: domain.BudgetMonthly, Action: domain.BudgetBlock}); err != nil {
		t.Fatal(err)
	}
	if pv, err = svc.Jobs.Preview(ctx, admin, service.SubmitInput{Doc: doc}); err != nil || pv.Budget == nil || !pv.Budget.Fits {
		t.Fatalf("with room for it: %+v, %v; want it to fit", pv.Budget, err)
	}
}
