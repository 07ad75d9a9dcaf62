package control

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
)

// BenchmarkBudgetCycle is what budgets add to a control-loop cycle with
// 1,000 running attempts of a project under a block budget: reading the
// budgets, the suspend check and admitting one start on the project's
// priced spend (steady: read at most every 15 s), and, apart, the
// refresh that prices the period's spend again (refresh-ms, the mean of
// 20), without and with 20,000 attempts that ended earlier in the period.
func BenchmarkBudgetCycle(b *testing.B) {
	for _, history := range []int{0, 20_000} {
		b.Run(fmt.Sprintf("history=%d", history), func(b *testing.B) { benchBudgetCycle(b, history) })
	}
}

func benchBudgetCycle(b *testing.B, history int) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "db.sqlite"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	audit := domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}
	rates := domain.Rates{GPUHour: 2 * domain.MoneyUnit, CPUHour: domain.MoneyUnit / 10}
	if _, err := st.PutPool(ctx, domain.Pool{Name: "gpu", Rates: rates,
		Nodes: []domain.Node{{Name: "n", CPUs: 8000, Memory: 1 << 50, GPUs: []int{0}}}}, audit); err != nil {
		b.Fatal(err)
	}
	now := time.Date(2026, 12, 15, 0, 0, 0, 0, time.UTC)
	if err := st.PutBudget(ctx, domain.Budget{Project: "p", Amount: 1_000_000 * domain.MoneyUnit, Period: domain.BudgetMonthly,
		Action: domain.BudgetBlock, UpdatedAt: now}, audit); err != nil {
		b.Fatal(err)
	}
	spec := domain.Spec{Name: "train", Project: "p", Pool: "gpu", Entrypoint: []string{"train"},
		Resources: domain.Resources{GPUs: 1, CPUs: 4, Memory: 16 << 30, Nodes: 1}, Policy: domain.Policy{Timeout: domain.Duration(24 * time.Hour)}}
	js, _ := json.Marshal(spec)
	sum := sha256.Sum256(js)
	var last domain.Job
	for i := range 1000 + history {
		j, _, err := st.CreateJob(ctx, store.NewJob{Spec: spec, SpecJSON: js, SpecHash: "sha256:" + hex.EncodeToString(sum[:]),
			Submitter: "alice", SubmittedAt: now.Add(-time.Hour), Actor: "user:alice",
			OutputDir: func(id int64) string { return fmt.Sprintf("/out/%d", id) }}, audit)
		if err != nil {
			b.Fatal(err)
		}
		started := now.Add(-time.Duration(i%1000) * time.Minute)
		changes := []store.Change{
			{JobID: j.ID, Move: domain.MoveStart(), At: started, Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting}},
			{JobID: j.ID, Move: domain.MoveRun(), At: started, Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}},
		}
		if i >= 1000 { // ended earlier in the period
			changes = append(changes, store.Change{JobID: j.ID, Move: domain.MoveSucceed().Only(domain.JobRunning), At: started.Add(30 * time.Second),
				Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptSucceeded}})
		}
		if _, err := st.Apply(ctx, changes); err != nil {
			b.Fatal(err)
		}
		if i < 1000 {
			last = j
		}
	}
	c := New(Config{Store: st, Executor: &executortest.Fake{}, Currency: "USD"})
	byPool := map[string]domain.Rates{"gpu": rates}
	if _, err := c.loadBudgets(ctx, now); err != nil {
		b.Fatal(err)
	}
	var refreshed time.Duration
	const refreshes = 20
	for range refreshes {
		delete(c.budget.uses, "p")
		start := time.Now()
		if ok, why, _ := c.admit(ctx, last, byPool, now); !ok {
			b.Fatalf("admit: %s", why)
		}
		refreshed += time.Since(start)
	}
	for b.Loop() {
		if _, err := c.loadBudgets(ctx, now); err != nil {
			b.Fatal(err)
		}
		c.suspendOverBudget(ctx, now)
		c.admit(ctx, last, byPool, now)
	}
	b.ReportMetric(float64(refreshed.Microseconds())/1000/refreshes, "refresh-ms")
}
