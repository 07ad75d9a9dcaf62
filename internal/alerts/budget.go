package alerts

import (
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"

	"trainyard/internal/domain"
)

// BudgetUse is a project's spend in the current period of its budget.
// Observation.Budgets lists one for every budget in force.
type BudgetUse struct {
	Project string
	// Period names the budget's period holding Observation.Now ("2026-12",
	// "2026-12-01..2026-12-15"); End is when it ends (zero: unknown).
	Period string
	End    time.Time
	Amount domain.Money
	Spent  domain.Money
	// Thresholds are percentages of Amount (ascending) that alert.
	Thresholds []int
	// Currency names the money's unit in summaries ("USD"); may be empty.
	Currency string
	// Rate is what the project's running jobs cost per hour now; MaxRate
	// the budget's limit on it (0: none), for spend_rate; Action the
	// budget's action at its limits.
	Rate, MaxRate domain.Money
	Action        domain.BudgetAction
}

// BudgetKey is the dedupe key of the budget_threshold alert of a project's
// period at a threshold: "budget_threshold/project=vision/period=2026-12/at=80".
func BudgetKey(project, period string, threshold int) string {
	return string(RuleBudgetThreshold) + "/project=" + project + "/period=" + period + "/at=" + strconv.Itoa(threshold)
}

// parseBudgetKey is BudgetKey's inverse.
func parseBudgetKey(key string) (project, period string, threshold int, ok bool) {
	rest, found := strings.CutPrefix(key, string(RuleBudgetThreshold)+"/project=")
	if !found {
		return "", "", 0, false
	}
	i := strings.LastIndex(rest, "/at=")
	if i < 0 {
		return "", "", 0, false
	}
	threshold, err := strconv.Atoi(rest[i+len("/at="):])
	if err != nil {
		return "", "", 0, false
	}
	rest = rest[:i]
	j := strings.LastIndex(rest, "/period=")
	if j < 0 {
		return "", "", 0, false
	}
	return rest[:j], rest[j+len("/period="):], threshold, true
}

// reached reports whether spent is at least pct percent of amount, without
// overflow.
func reached(spent, amount domain.Money, pct int) bool {
	if amount <= 0 || pct < 0 {
		return false
	}
	if spent <= 0 {
		return pct == 0
	}
	hs, ls := bits.Mul64(uint64(spent), 100)
	ha, la := bits.Mul64(uint64(amount), uint64(pct))
	return hs > ha || hs == ha && ls >= la
}

// percentOf is spent as a whole percentage of amount, rounded down.
func percentOf(spent, amount domain.Money) int64 {
	if amount <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(max(spent, 0)), 100)
	if hi >= uint64(amount) {
		return 1<<63 - 1
	}
	q, _ := bits.Div64(hi, lo, uint64(amount))
	return int64(min(q, 1<<63-1))
}

// evaluateBudgets fires budget_threshold for every threshold a budget's
// spend reached, and resolves the alerts whose threshold is no longer
// reached in their period: the budget was raised, its period ended, or it
// is gone. Left alone when the observation did not read budgets.
func (e *Engine) evaluateBudgets(out []Transition, obs Observation) []Transition {
	if !obs.BudgetsSeen {
		return out
	}
	now, rule := obs.Now, e.cfg.Rules.BudgetThreshold
	uses := slices.Clone(obs.Budgets)
	slices.SortStableFunc(uses, func(a, b BudgetUse) int { return strings.Compare(a.Project, b.Project) })
	byProject := map[string]BudgetUse{}
	reachedKeys := map[string]bool{}
	for _, u := range uses {
		if !u.End.IsZero() && !now.Before(u.End) {
			continue // its period is over: it no longer counts
		}
		byProject[u.Project] = u
		if !rule.On() {
			continue
		}
		for _, t := range u.Thresholds {
			if !reached(u.Spent, u.Amount, t) {
				continue
			}
			key := BudgetKey(u.Project, u.Period, t)
			reachedKeys[key] = true
			if _, firing := e.active[key]; firing {
				continue
			}
			sev := rule.Severity
			if t >= 100 {
				sev = rule.ExceededSeverity
			}
			out = append(out, e.fire(Alert{Key: key, Rule: RuleBudgetThreshold, Severity: sev,
				Summary: budgetSummary(u, t), Labels: Labels{Project: u.Project}}, now))
		}
	}
	for _, a := range e.Active() {
		if a.Rule != RuleBudgetThreshold || reachedKeys[a.Key] {
			continue
		}
		project, period, t, _ := parseBudgetKey(a.Key)
		u, has := byProject[project]
		var why string
		switch {
		case !has:
			why = fmt.Sprintf("project %s no longer has a budget in force for %s", project, period)
		case u.Period != period:
			why = fmt.Sprintf("period %s of project %s's budget ended; %s began", period, project, u.Period)
		case !slices.Contains(u.Thresholds, t):
			why = fmt.Sprintf("%d%% is no longer a threshold of project %s's budget", t, project)
		default:
			why = fmt.Sprintf("project %s's spend for %s, %s, is under %d%% of its budget of %s",
				project, period, money(u.Spent, u.Currency), t, money(u.Amount, u.Currency))
		}
		out = append(out, e.resolve(a.Key, now, why))
	}
	return out
}

// budgetSummary says how much of its budget a project spent, and what to do.
func budgetSummary(u BudgetUse, t int) string {
	budget := "budget"
	if u.Currency != "" {
		budget = u.Currency + " budget"
	}
	p := u.Project
	state := fmt.Sprintf("past its %d%% threshold", t)
	if t >= 100 {
		state = "the budget is used up"
	}
	return fmt.Sprintf("project %s has spent %s of its %s %s for %s (%d%%): %s — raise it with `trainyard budget set %s --amount AMOUNT` or review its jobs with `trainyard cost --project %s --by job`",
		p, groupDigits(u.Spent.Cents()), groupDigits(u.Amount.Cents()), budget, u.Period, percentOf(u.Spent, u.Amount), state, p, p)
}

// money is m with two decimals, digits grouped, and the currency if known.
func money(m domain.Money, currency string) string {
	s := groupDigits(m.Cents())
	if currency != "" {
		s += " " + currency
	}
	return s
}

// groupDigits puts a comma between every three digits of the whole part of
// a decimal: "4012.50" → "4,012.50".
func groupDigits(s string) string {
	sign := ""
	if strings.HasPrefix(s, "-") {
		sign, s = "-", s[1:]
	}
	whole, frac, _ := strings.Cut(s, ".")
	var b strings.Builder
	for i, r := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if frac != "" {
		return sign + b.String() + "." + frac
	}
	return sign + b.String()
}
