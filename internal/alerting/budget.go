package alerting

import (
	"context"
	"time"

	"trainyard/internal/alerts"
	"trainyard/internal/store"
)

// BudgetRefresh is how often the budgets and their spend are read again;
// between reads the rules see the last list.
const BudgetRefresh = 30 * time.Second

// budgetUses returns the spend of every budget in force at now, read again
// when the last read is BudgetRefresh old; ok is false until a read
// succeeded. Without budgets it costs one ListBudgets per refresh, and
// nothing with budget_threshold and spend_rate disabled. Called from Run's goroutine only.
func (a *Alerter) budgetUses(ctx context.Context, now time.Time) (uses []alerts.BudgetUse, ok bool) {
	if rs := a.cfg.Alerts.Rules; !rs.BudgetThreshold.On() && !rs.SpendRate.On() {
		return nil, false
	}
	if a.budgetsRead && now.Sub(a.budgetsAt) < BudgetRefresh && !now.Before(a.budgetsAt) {
		return a.budgets, true
	}
	a.budgetsAt = now // on an error too: try again at the next refresh
	uses, err := a.readBudgets(ctx, now)
	if err != nil {
		a.log.Warn("read budgets for alerts; keeping the last read", "err", err)
		return a.budgets, a.budgetsRead
	}
	a.budgets, a.budgetsRead = uses, true
	return uses, true
}

// readBudgets prices every budget in force at now.
func (a *Alerter) readBudgets(ctx context.Context, now time.Time) ([]alerts.BudgetUse, error) {
	all, err := a.cfg.Store.ListBudgets(ctx)
	if err != nil {
		return nil, err
	}
	byProject, err := store.BudgetUses(ctx, a.cfg.Store, all, now)
	if err != nil {
		return nil, err
	}
	uses := make([]alerts.BudgetUse, 0, len(byProject))
	for _, b := range all {
		u, ok := byProject[b.Project]
		if !ok {
			continue
		}
		uses = append(uses, alerts.BudgetUse{Project: b.Project, Period: u.Period, End: u.To, Amount: b.Amount,
			Spent: u.Spent, Thresholds: b.Thresholds, Currency: a.cfg.Currency, Rate: u.Rate, MaxRate: b.MaxRate, Action: b.Action})
	}
	return uses, nil
}
