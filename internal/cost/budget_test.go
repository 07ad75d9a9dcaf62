package cost

import (
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
)

// A hand-computed month: GPUs at 2.00 an hour, a 100.00 budget.
//   - a 1-GPU attempt of 10 h, ended:                       20.00 spent
//   - a 1-GPU attempt from 1 h before the month for 3 h:     4.00 spent (2 h inside)
//   - a 2-GPU attempt running for 2 h with a 5 h timeout:    8.00 spent, 12.00 still possible
//   - another project's attempt:                            not counted
//
// Spent 32.00, committed 44.00; a 1-GPU job with a 28 h timeout (56.00)
// fits exactly, a cent more does not.
func TestBudgetUseByHand(t *testing.T) {
	month := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	now := month.Add(20 * 24 * time.Hour)
	gpu := func(n int) domain.Resources { return domain.Resources{GPUs: n, Nodes: 1} }
	rates := map[string]domain.Rates{"gpu": {GPUHour: 2 * domain.MoneyUnit}}
	spans := []Span{
		{Project: "p", Pool: "gpu", Resources: gpu(1), Start: month.Add(24 * time.Hour), End: month.Add(34 * time.Hour), State: domain.AttemptSucceeded},
		{Project: "p", Pool: "gpu", Resources: gpu(1), Start: month.Add(-time.Hour), End: month.Add(2 * time.Hour), State: domain.AttemptFailed},
		{Project: "p", Pool: "gpu", Resources: gpu(2), Start: now.Add(-2 * time.Hour), State: domain.AttemptRunning, Timeout: 5 * time.Hour},
		{Project: "q", Pool: "gpu", Resources: gpu(8), Start: month, End: now, State: domain.AttemptSucceeded},
	}
	b := domain.Budget{Project: "p", Amount: 100 * domain.MoneyUnit, Period: domain.BudgetMonthly, Action: domain.BudgetBlock}
	u, ok := BudgetUse(b, spans, Flat(rates), now)
	if !ok || u.Period != "2026-12" || !u.From.Equal(month) || !u.To.Equal(month.AddDate(0, 1, 0)) {
		t.Fatalf("BudgetUse = %+v, %v", u, ok)
	}
	if u.Spent != 32*domain.MoneyUnit || u.Committed != 44*domain.MoneyUnit || u.Unbounded {
		t.Fatalf("spent %s, committed %s (unbounded %v); want 32.00 and 44.00", u.Spent, u.Committed, u.Unbounded)
	}
	worst, bounded := WorstCase(gpu(1), rates["gpu"], 28*time.Hour)
	if worst != 56*domain.MoneyUnit || !bounded {
		t.Fatalf("WorstCase = %s, %v; want 56.00", worst, bounded)
	}
	job := Job{Worst: worst, Bounded: true, Rate: 2 * domain.MoneyUnit}
	if ok, why, _ := Admit(u, Admitted{}, job, "USD"); !ok {
		t.Fatalf("a job that fills the budget exactly is refused: %s", why)
	}
	ok, why, wait := Admit(u, Admitted{Worst: domain.MoneyUnit / 100}, job, "USD")
	if wait {
		t.Error("a job over the budget waits for running jobs instead of being held")
	}
	for _, want := range []string{"spent 32.00 of its 100.00 USD budget for 2026-12", "44.01 committed", "up to 56.00 more", "2027-01-01"} {
		if ok || !strings.Contains(why, want) {
			t.Errorf("Admit a cent over = %v, %q; want a refusal saying %q", ok, why, want)
		}
	}
	if ok, why, _ := Admit(u, Admitted{}, Job{}, "USD"); ok || !strings.Contains(why, "policy.timeout") {
		t.Errorf("a job without timeout: %v, %q", ok, why)
	}
	// The running 2-GPU attempt costs 4.00 an hour; under a 5.00 limit a
	// 1-GPU job (2.00) waits for running jobs to end, with the numbers.
	if u.Rate != 4*domain.MoneyUnit {
		t.Errorf("running rate %s, want 4.00", u.Rate)
	}
	limited := u
	limited.Budget.MaxRate = 5 * domain.MoneyUnit
	small := Job{Worst: domain.MoneyUnit, Bounded: true, Rate: 2 * domain.MoneyUnit}
	ok, why, wait = Admit(limited, Admitted{}, small, "USD")
	if ok || !wait || !strings.Contains(why, "cost 4.00 USD an hour, and this job would add 2.00, past its limit of 5.00") {
		t.Errorf("past the rate limit: %v %v %q", ok, wait, why)
	}
	if ok, _, _ := Admit(limited, Admitted{}, Job{Worst: domain.MoneyUnit, Bounded: true, Rate: domain.MoneyUnit}, "USD"); !ok {
		t.Error("a job within the rate limit is refused")
	}
	// A one-off period that has not begun is not in force.
	once := domain.Budget{Project: "p", Amount: domain.MoneyUnit, Start: now.Add(time.Hour), End: now.Add(48 * time.Hour), Action: domain.BudgetBlock}
	if _, ok := BudgetUse(once, spans, Flat(rates), now); ok {
		t.Error("a budget whose period starts later is in force now")
	}
	// A running attempt without a timeout leaves the commitment unbounded.
	spans[2].Timeout = 0
	if u, _ := BudgetUse(b, spans, Flat(rates), now); !u.Unbounded {
		t.Error("a running attempt without timeout leaves the commitment bounded")
	}
}
