package alerting_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"trainyard/internal/alerting"
	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// A project whose attempts cost past 50% and 100% of its budget gets two
// alerts, stored with the project and no job; a raised budget is seen at
// the next refresh and resolves the 100% one.
func TestBudgetThresholdsStoreAlerts(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	t0 := time.Date(2026, 12, 10, 0, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0.Add(12 * time.Hour))
	audit := func(action string) domain.AuditRecord {
		return domain.AuditRecord{At: t0, Actor: "user:admin", Action: action, Target: "test", Result: domain.AuditOK}
	}
	money := func(s string) domain.Money {
		m, err := domain.ParseMoney(s)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	pool := domain.Pool{Name: "gpu", Nodes: []domain.Node{{Name: "gpu-1", CPUs: 64, Memory: 512 << 30, GPUs: []int{0, 1, 2, 3}}},
		Rates: domain.Rates{GPUHour: money("2.00")}}
	if _, err := st.PutPool(ctx, pool, audit("pool.write")); err != nil {
		t.Fatal(err)
	}
	spec := domain.Spec{Name: "train", Project: "vision", Pool: "gpu", Entrypoint: []string{"true"}, Resources: domain.Resources{GPUs: 1, Nodes: 1}}
	b, _ := json.Marshal(spec)
	sum := sha256.Sum256(b)
	j, _, err := st.CreateJob(ctx, store.NewJob{Spec: spec, SpecJSON: b, SpecHash: "sha256:" + hex.EncodeToString(sum[:]),
		Submitter: "alice", SubmittedAt: t0, Actor: "user:alice", OutputDir: func(id int64) string { return fmt.Sprintf("/out/%d", id) }},
		audit("job.submit"))
	if err != nil {
		t.Fatal(err)
	}
	apply := func(changes ...store.Change) {
		t.Helper()
		errs, err := st.Apply(ctx, changes)
		if err == nil {
			err = errors.Join(errs...)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// One GPU for 11 hours at 2.00: 22.00 spent.
	apply(store.Change{JobID: j.ID, Move: domain.MoveStart(), At: t0,
		Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting, Node: "gpu-1"}},
		store.Change{JobID: j.ID, Move: domain.MoveRun(), At: t0,
			Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}})
	apply(store.Change{JobID: j.ID, Move: domain.MoveSucceed().Only(domain.JobRunning), At: t0.Add(11 * time.Hour),
		Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptSucceeded}})
	budget := domain.Budget{Project: "vision", Amount: money("20.00"), Period: domain.BudgetMonthly, Thresholds: []int{50, 100},
		Action: domain.BudgetNotify, UpdatedAt: t0}
	if err := st.PutBudget(ctx, budget, audit("budget.write")); err != nil {
		t.Fatal(err)
	}

	h := &hook{}
	srv := httptest.NewServer(h)
	defer srv.Close()
	a, stop, done := newAlerterWith(t, st, srv.URL, func(c *alerting.Config) { c.Clock, c.Currency = clk, "USD" })
	defer func() { stop(); <-done }()
	observe(a, map[int64]domain.Job{}, nil)

	var firing []domain.Alert
	waitFor(t, "two budget alerts", func() bool {
		firing, _ = st.ListAlerts(ctx, store.AlertFilter{State: domain.AlertFiring})
		return len(firing) >= 2
	})
	byKey := map[string]domain.Alert{}
	for _, f := range firing {
		byKey[f.Key] = f
	}
	half, full := byKey["budget_threshold/project=vision/period=2026-12/at=50"], byKey["budget_threshold/project=vision/period=2026-12/at=100"]
	if len(firing) != 2 || half.Severity != "warning" || full.Severity != "critical" {
		t.Fatalf("firing alerts = %+v", firing)
	}
	if full.Project != "vision" || full.JobID != 0 || full.Rule != "budget_threshold" ||
		!strings.HasPrefix(full.Summary, "project vision has spent 22.00 of its 20.00 USD budget for 2026-12 (110%): the budget is used up") {
		t.Fatalf("stored alert = %+v", full)
	}

	// Raised to 30.00: 22.00 is past 50% still, not 100%. Seen once the
	// last read is BudgetRefresh old.
	budget.Amount = money("30.00")
	if err := st.PutBudget(ctx, budget, audit("budget.write")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(alerting.BudgetRefresh)
	waitFor(t, "the 100% alert to resolve", func() bool {
		l, _ := st.ListAlerts(ctx, store.AlertFilter{State: domain.AlertResolved})
		return len(l) == 1 && l[0].Key == full.Key
	})
	if l, _ := st.ListAlerts(ctx, store.AlertFilter{State: domain.AlertFiring}); len(l) != 1 || l[0].Key != half.Key {
		t.Fatalf("firing after the raise = %+v", l)
	}
}
