package alerts

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"trainyard/internal/domain"
)

// RuleSpendRate fires while a project's running jobs cost more per hour
// than its budget's rate limit (BudgetUse.MaxRate). It is about a project,
// not a job: Labels.Job is 0.
const RuleSpendRate Rule = "spend_rate"

// SpendRateKey is the dedupe key of a project's spend_rate alert:
// "spend_rate/project=vision".
func SpendRateKey(project string) string { return string(RuleSpendRate) + "/project=" + project }

// evaluateSpendRates fires spend_rate for each budget in force whose
// project runs above its rate limit, and resolves the alerts of projects
// that no longer do (or whose budget has no limit, or is gone). Left alone
// when the observation did not read budgets.
func (e *Engine) evaluateSpendRates(out []Transition, obs Observation) []Transition {
	if !obs.BudgetsSeen {
		return out
	}
	over := map[string]BudgetUse{}
	for _, u := range obs.Budgets {
		if u.MaxRate > 0 && u.Rate > u.MaxRate && (u.End.IsZero() || obs.Now.Before(u.End)) {
			over[SpendRateKey(u.Project)] = u
		}
	}
	if e.cfg.Rules.SpendRate.On() {
		for _, u := range sortedUses(over) {
			key := SpendRateKey(u.Project)
			if _, firing := e.active[key]; firing {
				continue
			}
			out = append(out, e.fire(Alert{Key: key, Rule: RuleSpendRate, Severity: e.cfg.Rules.SpendRate.Severity,
				Summary: spendRateSummary(u), Labels: Labels{Project: u.Project}}, obs.Now))
		}
	}
	for _, a := range e.Active() {
		if a.Rule != RuleSpendRate {
			continue
		}
		if _, still := over[a.Key]; !still {
			project := a.Labels.Project
			out = append(out, e.resolve(a.Key, obs.Now, fmt.Sprintf("project %s's running jobs cost no more per hour than its budget's limit", project)))
		}
	}
	return out
}

// spendRateSummary says how fast a project spends against its limit, what
// that does to its jobs, and where to look.
func spendRateSummary(u BudgetUse) string {
	effect := "its new jobs wait until enough running ones end"
	if u.Action == domain.BudgetNotify {
		effect = "nothing holds its jobs (the budget's action is notify)"
	}
	return fmt.Sprintf("project %s's running jobs cost %s an hour, above its budget's limit of %s an hour: %s — see them with `trainyard cost --project %s --by job`, or raise the limit with `trainyard budget set %s --max-rate RATE`",
		u.Project, money(u.Rate, u.Currency), money(u.MaxRate, u.Currency), effect, u.Project, u.Project)
}

// sortedUses returns the uses by project.
func sortedUses(m map[string]BudgetUse) []BudgetUse {
	return slices.SortedFunc(maps.Values(m), func(a, b BudgetUse) int { return strings.Compare(a.Project, b.Project) })
}
