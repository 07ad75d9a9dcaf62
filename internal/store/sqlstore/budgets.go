package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

const budgetCols = `project, amount, period, start_at, end_at, thresholds, action, max_rate, updated_at`

var (
	qBudgetUpsert = Q(`INSERT INTO budgets (` + budgetCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (project) DO UPDATE SET amount = excluded.amount, period = excluded.period,
		start_at = excluded.start_at, end_at = excluded.end_at, thresholds = excluded.thresholds,
		action = excluded.action, max_rate = excluded.max_rate, updated_at = excluded.updated_at`)
	qBudgetGet    = Q(`SELECT ` + budgetCols + ` FROM budgets WHERE project = ?`)
	qBudgetList   = Q(`SELECT ` + budgetCols + ` FROM budgets ORDER BY project{C}`)
	qBudgetDelete = Q(`DELETE FROM budgets WHERE project = ?`)
)

func scanBudget(row Row) (domain.Budget, error) {
	var (
		b                       domain.Budget
		amount, maxRate         int64
		start, end, updated     sql.NullInt64
		thresholds, action, per string
	)
	if err := row.Scan(&b.Project, &amount, &per, &start, &end, &thresholds, &action, &maxRate, &updated); err != nil {
		return b, err
	}
	b.Amount, b.Period, b.Action, b.MaxRate = domain.Money(amount), per, domain.BudgetAction(action), domain.Money(maxRate)
	b.Start, b.End, b.UpdatedAt = TimeOf(start), TimeOf(end), TimeOf(updated)
	if err := json.Unmarshal([]byte(thresholds), &b.Thresholds); err != nil {
		return b, fmt.Errorf("budget of project %q: thresholds %q: %w", b.Project, thresholds, err)
	}
	return b, nil
}

// PutBudget implements store.Pools.
func (s Shared) PutBudget(ctx context.Context, b domain.Budget, audit domain.AuditRecord) error {
	action := fmt.Sprintf("put budget of project %q", b.Project)
	if b.Project == "" {
		return fmt.Errorf("%s: the project must be set: %w", action, store.ErrInvalid)
	}
	th, err := json.Marshal(b.Thresholds)
	if err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	if b.Thresholds == nil {
		th = []byte("[]")
	}
	return s.b.Write(ctx, func(x Exec) error {
		return x.Queue(action, qBudgetUpsert, b.Project, int64(b.Amount), b.Period, TimeArg(b.Start), TimeArg(b.End),
			string(th), string(b.Action), int64(b.MaxRate), TimeArg(b.UpdatedAt))
	}, audit)
}

// GetBudget implements store.Pools.
func (s Shared) GetBudget(ctx context.Context, project string) (domain.Budget, error) {
	return queryOne(ctx, s, fmt.Sprintf("get budget of project %q", project), scanBudget, qBudgetGet, project)
}

// ListBudgets implements store.Pools.
func (s Shared) ListBudgets(ctx context.Context) ([]domain.Budget, error) {
	return queryAll(ctx, s, "list budgets", scanBudget, qBudgetList)
}

// DeleteBudget implements store.Pools.
func (s Shared) DeleteBudget(ctx context.Context, project string, audit domain.AuditRecord) error {
	action := fmt.Sprintf("delete budget of project %q", project)
	return s.b.Write(ctx, func(x Exec) error {
		n, err := x.Exec(qBudgetDelete, project)
		if err != nil {
			return s.err(action, err)
		}
		if n == 0 {
			return fmt.Errorf("%s: %w", action, store.ErrNotFound)
		}
		return nil
	}, audit)
}
