package domain

import (
	"fmt"
	"slices"
	"time"
)

// BudgetAction is what a budget does once its project's spend reaches it.
type BudgetAction string

const (
	// BudgetNotify only alerts.
	BudgetNotify BudgetAction = "notify"
	// BudgetBlock holds the project's jobs whose worst-case cost would take
	// its committed spend past the budget, with reason BudgetExceeded.
	BudgetBlock BudgetAction = "block"
	// BudgetSuspend blocks, and stops the project's running preemptible
	// jobs (as a preemption: they checkpoint and requeue, then wait held).
	BudgetSuspend BudgetAction = "suspend"
)

// BudgetActions lists the actions in the order help texts name them.
func BudgetActions() []BudgetAction { return []BudgetAction{BudgetNotify, BudgetBlock, BudgetSuspend} }

// Blocks reports whether the action holds jobs that would cross the budget.
func (a BudgetAction) Blocks() bool { return a == BudgetBlock || a == BudgetSuspend }

// BudgetMonthly is the period of a budget that renews every calendar month
// (UTC); the other period is "once": from Start to End.
const BudgetMonthly = "month"

// DefaultBudgetThresholds are the percentages of a budget that alert when
// none are given.
var DefaultBudgetThresholds = []int{50, 80, 100}

// Budget is a project's money limit over a period: every calendar month
// (UTC), or once from Start to End.
type Budget struct {
	Project string
	Amount  Money
	// Period is BudgetMonthly or "" for the one period [Start, End).
	Period     string
	Start, End time.Time
	// Thresholds are percentages of Amount, ascending, at which an alert
	// fires once per period (100 is the budget itself).
	Thresholds []int
	Action     BudgetAction
	// MaxRate, when set, limits what the project's running jobs may cost
	// per hour together (a spend-rate limit): a block or suspend budget
	// holds a job that would take the rate past it.
	MaxRate   Money
	UpdatedAt time.Time
}

// Window returns the period of b that holds t, [start, end), and its name
// ("2026-12" for a month, "2026-12-01..2026-12-15" for a one-off period);
// ok is false when b is not in force at t.
func (b Budget) Window(t time.Time) (start, end time.Time, name string, ok bool) {
	t = t.UTC()
	if b.Period == BudgetMonthly {
		start = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 1, 0), start.Format("2006-01"), true
	}
	if t.Before(b.Start) || !t.Before(b.End) {
		return time.Time{}, time.Time{}, "", false
	}
	return b.Start, b.End, b.Start.UTC().Format(time.DateOnly) + ".." + b.End.UTC().Format(time.DateOnly), true
}

// Check returns what is wrong with b, field by field.
func (b Budget) Check() FieldErrors {
	var errs FieldErrors
	if b.Amount <= 0 {
		errs.Add("amount", "must be a positive amount, such as 5000 or 1250.50")
	}
	switch {
	case b.Period == BudgetMonthly:
		if !b.Start.IsZero() || !b.End.IsZero() {
			errs.Add("start", "a monthly budget renews every calendar month; leave out start and end, or leave out period for one period from start to end")
		}
	case b.Period == "":
		if b.Start.IsZero() || b.End.IsZero() {
			errs.Add("period", "give period: month, or start and end (dates such as 2026-12-01) for one period")
		} else if !b.End.After(b.Start) {
			errs.Add("end", "must be after start (%s)", b.Start.UTC().Format(time.DateOnly))
		}
	default:
		errs.Add("period", "unknown period %q; use month, or leave it out and give start and end", b.Period)
	}
	if b.MaxRate < 0 {
		errs.Add("max_rate_per_hour", "must be a positive amount per hour, such as 50, or 0 for no limit")
	}
	if !slices.Contains(BudgetActions(), b.Action) {
		errs.Add("action", "unknown action %q; use notify, block or suspend", b.Action)
	}
	for i, p := range b.Thresholds {
		if p < 1 || p > 1000 {
			errs.Add(fmt.Sprintf("thresholds[%d]", i), "%d is not a percentage from 1 to 1000", p)
		} else if i > 0 && p <= b.Thresholds[i-1] {
			errs.Add(fmt.Sprintf("thresholds[%d]", i), "thresholds must rise: %d follows %d", p, b.Thresholds[i-1])
		}
	}
	return errs
}
