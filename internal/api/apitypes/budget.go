package apitypes

import "time"

// Budget is a project's money budget with its spend in the period that
// holds now, and the body of PUT /api/v1/budgets/{project}, which creates
// or replaces it (project may be left out: the path names it). On PUT give
// amount, and period "month" or start and end; the fields the server sets
// (updated_at and the status from in_force on) are ignored.
type Budget struct {
	Project string `json:"project"`
	// Amount is the budget per period, a decimal in the server's currency
	// ("5000", "1250.50"); a JSON number is read as written.
	Amount Amount `json:"amount"`
	// Currency, set by the server, is the server-wide currency. On PUT it
	// may be left out; any other value than the server's is refused.
	Currency string `json:"currency,omitempty"`
	// Period is "month" for a budget that renews every calendar month
	// (UTC); empty for one period from start to end.
	Period string `json:"period,omitempty"`
	// Start and End bound a one-off period, [start, end): RFC 3339 times,
	// or dates such as 2026-12-01 (midnight UTC). The server writes RFC 3339.
	Start string `json:"start,omitempty"`
	End   string `json:"end,omitempty"`
	// Thresholds are percentages of the amount, rising, from 1 to 1000.
	// Left out (or null) on PUT: 50, 80 and 100; [] for none.
	Thresholds []int `json:"thresholds"`
	// Action is what the budget does once spend reaches it: notify
	// (the default), block (hold jobs that would cross it, with reason
	// BudgetExceeded) or suspend (block, and stop the project's running
	// preemptible jobs). See docs/cost.md#budgets.
	Action string `json:"action,omitempty"`
	// MaxRatePerHour is a spend-rate limit: what the project's running jobs
	// may cost per hour together; a block or suspend budget keeps a job
	// queued while it would take them past it. Empty or "0": none.
	MaxRatePerHour Amount    `json:"max_rate_per_hour,omitempty"`
	UpdatedAt      time.Time `json:"updated_at,omitzero"`

	// InForce, set by the server, is false for a one-off period that has
	// not begun or has ended; the period and spend fields below are then
	// left out and percent_used is 0.
	InForce bool `json:"in_force"`
	// PeriodName names the period that holds now: "2026-12" for a month,
	// "2026-12-01..2027-01-01" for a one-off period.
	PeriodName  string     `json:"period_name,omitempty"`
	PeriodStart *time.Time `json:"period_start,omitempty"`
	PeriodEnd   *time.Time `json:"period_end,omitempty"` // exclusive
	// Spent is what the project's attempts cost in the period so far,
	// running ones up to now, at the pools' current rates.
	Spent Amount `json:"spent,omitempty"`
	// Committed is Spent plus what the running attempts may still cost
	// until their timeouts within the period. When a running attempt has
	// no timeout it has no bound: CommittedUnbounded is true and Committed
	// counts only what has a bound.
	Committed          Amount `json:"committed,omitempty"`
	CommittedUnbounded bool   `json:"committed_unbounded,omitempty"`
	// PercentUsed is Spent as a percentage of Amount, to two decimals.
	PercentUsed float64 `json:"percent_used"`
	// RatePerHour is what the project's running jobs cost per hour now.
	RatePerHour Amount `json:"rate_per_hour,omitempty"`
}

// BudgetList is the body of GET /api/v1/budgets, sorted by project.
type BudgetList struct {
	Budgets []Budget `json:"budgets"`
}
