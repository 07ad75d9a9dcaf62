package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// testBudgets: budgets round-trip with every field, replace by project,
// list by project, and delete; a missing one is ErrNotFound; each write
// appends its audit record.
func testBudgets(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.GetBudget(ctx, "vision"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetBudget of none: %v, want ErrNotFound", err)
	}
	monthly := domain.Budget{Project: "vision", Amount: 5000 * domain.MoneyUnit, Period: domain.BudgetMonthly,
		Thresholds: []int{50, 80, 100}, Action: domain.BudgetBlock, UpdatedAt: at(1)}
	once := domain.Budget{Project: "nlp", Amount: 1250*domain.MoneyUnit + 500_000, Start: at(0), End: at(100),
		Action: domain.BudgetNotify, UpdatedAt: at(2)}
	for _, b := range []domain.Budget{monthly, once} {
		if err := s.PutBudget(ctx, b, setupAudit); err != nil {
			t.Fatalf("PutBudget(%s): %v", b.Project, err)
		}
	}
	got, err := s.GetBudget(ctx, "vision")
	if err != nil || !reflect.DeepEqual(got, monthly) {
		t.Fatalf("GetBudget = %+v, %v; want %+v", got, err, monthly)
	}
	once.Thresholds = []int{} // none stored reads back as an empty list
	list, err := s.ListBudgets(ctx)
	if err != nil || len(list) != 2 || list[0].Project != "nlp" || list[1].Project != "vision" ||
		len(list[0].Thresholds) != 0 || !list[0].Start.Equal(once.Start) || !list[0].End.Equal(once.End) {
		t.Fatalf("ListBudgets = %+v, %v; want nlp, vision", list, err)
	}
	raised := monthly
	raised.Amount, raised.Action, raised.Thresholds, raised.UpdatedAt = 8000*domain.MoneyUnit, domain.BudgetSuspend, []int{90}, at(3)
	raised.MaxRate = 40*domain.MoneyUnit + 500_000
	if err := s.PutBudget(ctx, raised, setupAudit); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetBudget(ctx, "vision"); err != nil || !reflect.DeepEqual(got, raised) {
		t.Fatalf("after replace = %+v, %v; want %+v", got, err, raised)
	}
	if err := s.DeleteBudget(ctx, "vision", setupAudit); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteBudget(ctx, "vision", setupAudit); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second DeleteBudget: %v, want ErrNotFound", err)
	}
	if list, err := s.ListBudgets(ctx); err != nil || len(list) != 1 {
		t.Fatalf("after delete = %+v, %v; want only nlp", list, err)
	}
	recs, err := s.ListAudit(ctx, store.AuditFilter{Limit: 100})
	if err != nil || len(recs) != 4 {
		t.Fatalf("audit records = %d, %v; want 4 (three puts and a delete)", len(recs), err)
	}
}
