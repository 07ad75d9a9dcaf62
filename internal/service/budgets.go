package service

import (
	"context"
	"errors"
	"time"

	"trainyard/internal/authz"
	"trainyard/internal/cost"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// BudgetStore is what budgets read and write beside the spend history.
type BudgetStore interface {
	CostStore
	PutBudget(ctx context.Context, b domain.Budget, audit domain.AuditRecord) error
	GetBudget(ctx context.Context, project string) (domain.Budget, error)
	ListBudgets(ctx context.Context) ([]domain.Budget, error)
	DeleteBudget(ctx context.Context, project string, audit domain.AuditRecord) error
}

var _ BudgetStore = store.Store(nil)

// BudgetStatus is a budget with its project's spend in the period that
// holds now (cost.Use); InForce is false for a one-off period that has
// not begun or has ended.
type BudgetStatus struct {
	Budget  domain.Budget
	InForce bool
	Use     cost.Use
}

// SetBudget creates or replaces the budget of b.Project (thresholds
// default to 50, 80 and 100%, the action to notify), audited with the
// budget before and after. The control loop releases the project's jobs
// held for the budget at its next pass, and holds again those that still
// do not fit.
func (s *CostService) SetBudget(ctx context.Context, p Principal, b domain.Budget) (BudgetStatus, error) {
	if b.Thresholds == nil {
		b.Thresholds = append([]int(nil), domain.DefaultBudgetThresholds...)
	}
	if b.Action == "" {
		b.Action = domain.BudgetNotify
	}
	var errs domain.FieldErrors
	checkName(&errs, "project", b.Project)
	errs = append(errs, b.Check()...)
	if err := errs.Err(); err != nil {
		return BudgetStatus{}, err
	}
	if err := s.authorize(ctx, p, authz.BudgetWrite, authz.Resource{Kind: "budget", Project: b.Project}); err != nil {
		return BudgetStatus{}, err
	}
	before, err := s.budgetBefore(ctx, b.Project)
	if err != nil {
		return BudgetStatus{}, err
	}
	b.UpdatedAt = s.cfg.Clock.Now()
	if err := s.st.PutBudget(ctx, b, s.audited(ctx, p, authz.BudgetWrite, "budget/"+b.Project, before, budgetSum(b))); err != nil {
		return BudgetStatus{}, err
	}
	s.budgetsChanged()
	out, err := s.statuses(ctx, []domain.Budget{b})
	if err != nil {
		return BudgetStatus{}, err
	}
	return out[0], nil
}

// Budgets returns the budgets of the projects p may read the spend of
// (or of project alone), with each one's spend in its current period.
func (s *CostService) Budgets(ctx context.Context, p Principal, project string) ([]BudgetStatus, error) {
	if err := s.authorize(ctx, p, authz.CostRead, authz.Resource{Kind: "cost", Project: project}); err != nil {
		return nil, err
	}
	all, err := s.st.ListBudgets(ctx)
	if err != nil {
		return nil, err
	}
	vis := authz.VisibleCost(p)
	var bs []domain.Budget
	for _, b := range all {
		if (project == "" || b.Project == project) && vis.Sees(b.Project, "") {
			bs = append(bs, b)
		}
	}
	return s.statuses(ctx, bs)
}

// DeleteBudget removes the project's budget, audited; its held jobs are
// released at the control loop's next pass.
func (s *CostService) DeleteBudget(ctx context.Context, p Principal, project string) error {
	if err := s.authorize(ctx, p, authz.BudgetWrite, authz.Resource{Kind: "budget", Project: project}); err != nil {
		return err
	}
	before, err := s.budgetBefore(ctx, project)
	if err != nil {
		return err
	}
	if before == nil {
		return noBudget(project)
	}
	if err := s.st.DeleteBudget(ctx, project, s.audited(ctx, p, authz.BudgetWrite, "budget/"+project, before, nil)); err != nil {
		if errors.Is(err, domain.ErrNotFound) {
			return noBudget(project)
		}
		return err
	}
	s.budgetsChanged()
	return nil
}

func noBudget(project string) error {
	return domain.Errorf(domain.ErrNotFound, "project %q has no budget; list budgets with: trainyard budget ls", project)
}

// statuses prices each budget's period from one read of the history.
func (s *CostService) statuses(ctx context.Context, bs []domain.Budget) ([]BudgetStatus, error) {
	uses, err := store.BudgetUses(ctx, s.st, bs, s.cfg.Clock.Now())
	if err != nil {
		return nil, err
	}
	out := make([]BudgetStatus, len(bs))
	for i, b := range bs {
		out[i].Budget = b
		out[i].Use, out[i].InForce = uses[b.Project]
	}
	return out, nil
}

func (s *CostService) budgetBefore(ctx context.Context, project string) (any, error) {
	b, err := s.st.GetBudget(ctx, project)
	if errors.Is(err, domain.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return budgetSum(b), nil
}

// budgetSum is a budget as its audit records show it.
func budgetSum(b domain.Budget) map[string]any {
	m := map[string]any{"amount": b.Amount.String(), "action": string(b.Action), "thresholds": b.Thresholds}
	if b.Period != "" {
		m["period"] = b.Period
	} else {
		m["start"], m["end"] = b.Start.UTC().Format(time.RFC3339), b.End.UTC().Format(time.RFC3339)
	}
	return m
}

// budgetsChanged tells other replicas and wakes the control loop, which
// re-reads budgets at every pass.
func (s *CostService) budgetsChanged() {
	if s.cfg.Broadcast != nil {
		s.cfg.Broadcast("sched")
	}
	s.cfg.Wake()
}

// preview says how job j stands against its project's budget, for a dry
// run; nil when the project has no budget in
// force or p may not read its spend. A failure to read is no reason to
// refuse a preview: it is then nil too.
func (s *CostService) preview(ctx context.Context, p Principal, project string, j cost.Job) *PreviewBudget {
	if s.authorize(ctx, p, authz.CostRead, authz.Resource{Kind: "cost", Project: project}) != nil {
		return nil
	}
	b, err := s.st.GetBudget(ctx, project)
	if err != nil {
		return nil
	}
	st, err := s.statuses(ctx, []domain.Budget{b})
	if err != nil || !st[0].InForce {
		return nil
	}
	pb := &PreviewBudget{Status: st[0], Fits: true}
	if b.Action.Blocks() {
		pb.Fits, pb.Why, _ = cost.Admit(st[0].Use, cost.Admitted{}, j, s.cfg.Currency)
	}
	return pb
}
