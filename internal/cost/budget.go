package cost

import (
	"fmt"
	"time"

	"trainyard/internal/domain"
)

// Use is a project's spend against its budget in the budget's period that
// holds the time it was computed at.
type Use struct {
	Budget   domain.Budget
	Period   string // the period's name: "2026-12", "2026-12-01..2026-12-15"
	From, To time.Time
	// Spent is what the project's attempts cost in the period so far.
	Spent domain.Money
	// Committed is Spent plus what the running attempts may still cost
	// until their timeouts (within the period): what the project has
	// committed to spend if nothing new starts. It is Unbounded when a
	// running attempt has no timeout.
	Committed domain.Money
	Unbounded bool
	// Rate is what the running attempts cost per hour now.
	Rate domain.Money
}

// BudgetUse prices the spans of b's project (spans of other projects are
// left out) in b's period holding now, at the rates of l in force while
// they ran; what running attempts may still cost is at the rates in force
// now. ok is false when b is not in force at now.
func BudgetUse(b domain.Budget, spans []Span, l Ledger, now time.Time) (u Use, ok bool) {
	from, to, name, ok := b.Window(now)
	if !ok {
		return Use{}, false
	}
	u = Use{Budget: b, Period: name, From: from, To: to}
	var c calc
	var running []Span
	for _, s := range spans {
		if s.Project != b.Project {
			continue
		}
		start, end, run, in := window(s, now, from)
		if !in {
			continue
		}
		u.Spent += c.price(s.Resources, l, s.Pool, start, end)
		if run {
			running = append(running, s)
		}
	}
	u.AddRunning(running, l, now)
	return u, true
}

// AddRunning adds to u, whose Spent is what the period cost up to now,
// what the running attempts of its project do from now: their cost per
// hour and what they may still cost until their timeouts inside the
// period, at the rates in force now; Committed becomes Spent plus that.
// Spans of other projects, and of attempts not running, are left out.
func (u *Use) AddRunning(running []Span, l Ledger, now time.Time) {
	var c calc
	for _, s := range running {
		if s.Project != u.Budget.Project || !s.End.IsZero() || s.Start.IsZero() {
			continue
		}
		r := l.At(s.Pool, now)
		u.Rate += c.of(s.Resources, r, time.Hour)
		if s.Timeout <= 0 {
			u.Unbounded = true
			continue
		}
		// The rest of its run up to its timeout, inside the period.
		stop := s.Start.Add(s.Timeout)
		if stop.After(u.To) {
			stop = u.To
		}
		if stop.After(now) {
			u.Committed += c.of(s.Resources, r, stop.Sub(now))
		}
	}
	u.Committed += u.Spent
}

// WorstCase is the most a job of res may cost at rates r: its whole
// timeout (0: unbounded, ok false).
func WorstCase(res domain.Resources, r domain.Rates, timeout time.Duration) (m domain.Money, ok bool) {
	if timeout <= 0 {
		return 0, false
	}
	return Of(res, r, timeout), true
}

// Job is what admitting one job adds to a budget's use: its worst case
// (Bounded false: it has no timeout) and its cost per hour.
type Job struct {
	Worst   domain.Money
	Bounded bool
	Rate    domain.Money
}

// JobCost is what a job of res with timeout (0: none) adds at rates r.
func JobCost(res domain.Resources, r domain.Rates, timeout time.Duration) Job {
	worst, bounded := WorstCase(res, r, timeout)
	return Job{Worst: worst, Bounded: bounded, Rate: Of(res, r, time.Hour)}
}

// Admitted is what was admitted since a Use was computed: the jobs' worst
// cases and rates, added to its committed spend and rate.
type Admitted struct {
	Worst, Rate domain.Money
}

// Add counts j as admitted.
func (a *Admitted) Add(j Job) { a.Worst, a.Rate = a.Worst+j.Worst, a.Rate+j.Rate }

// Admit decides whether job j fits in u's budget on top of the committed
// spend and rate and what was admitted since u was computed. When it does
// not, why says so with the numbers, in currency, and wait says the job
// only has to wait for running jobs to end (the rate limit), not for the
// budget to change.
func Admit(u Use, since Admitted, j Job, currency string) (ok bool, why string, wait bool) {
	committed := u.Committed + since.Worst
	b := u.Budget
	switch {
	case !j.Bounded:
		return false, fmt.Sprintf("project %s has a %s %s budget for %s and this job has no timeout, so its cost has no bound; set policy.timeout",
			b.Project, b.Amount, currency, u.Period), false
	case u.Unbounded:
		return false, fmt.Sprintf("project %s has a %s %s budget for %s and one of its running jobs has no timeout, so its committed spend has no bound; wait for it to end or raise the budget",
			b.Project, b.Amount, currency, u.Period), false
	case committed+j.Worst > b.Amount:
		return false, fmt.Sprintf("project %s has spent %s of its %s %s budget for %s (%s committed with its running jobs); this job may cost up to %s more (its timeout at its pool's rates); raise the budget, shorten policy.timeout, or wait for the period to end on %s",
			b.Project, u.Spent, b.Amount, currency, u.Period, committed, j.Worst, u.To.UTC().Format(time.DateOnly)), false
	case b.MaxRate > 0 && u.Rate+since.Rate+j.Rate > b.MaxRate:
		return false, fmt.Sprintf("project %s's running jobs cost %s %s an hour, and this job would add %s, past its limit of %s an hour; it starts when enough of them end, or raise the limit (trainyard budget set %s --max-rate …)",
			b.Project, u.Rate+since.Rate, currency, j.Rate, b.MaxRate, b.Project), true
	}
	return true, "", false
}
