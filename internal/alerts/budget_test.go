package alerts

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
)

func usd(units float64) domain.Money { return domain.Money(units * float64(domain.MoneyUnit)) }

var dec2026 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func visionUse(spent float64) BudgetUse {
	return BudgetUse{Project: "vision", Period: "2026-12", End: dec2026.AddDate(0, 1, 0), Amount: usd(5000), Spent: usd(spent),
		Thresholds: []int{50, 80, 100}, Currency: "USD"}
}

func budgetObs(now time.Time, uses ...BudgetUse) Observation {
	return Observation{Now: now, Budgets: uses, BudgetsSeen: true}
}

// Each threshold fires once per period, warning under 100% and critical at
// 100%, with a summary that has the numbers and what to do.
func TestBudgetThresholdFiresOncePerThreshold(t *testing.T) {
	e := newEngine(t, nil)
	now := dec2026.Add(10 * 24 * time.Hour)
	expect(t, "under 50%", e.Evaluate(budgetObs(now, visionUse(2400))), "")
	ts := e.Evaluate(budgetObs(now.Add(time.Minute), visionUse(4012.50)))
	expect(t, "past 80%", ts, "firing budget_threshold/project=vision/period=2026-12/at=50; firing budget_threshold/project=vision/period=2026-12/at=80")
	a := ts[1].Alert
	want := "project vision has spent 4,012.50 of its 5,000.00 USD budget for 2026-12 (80%): past its 80% threshold — raise it with `trainyard budget set vision --amount AMOUNT` or review its jobs with `trainyard cost --project vision --by job`"
	if a.Summary != want {
		t.Errorf("summary = %q\nwant      %q", a.Summary, want)
	}
	if a.Severity != SeverityWarning || a.Labels != (Labels{Project: "vision"}) {
		t.Errorf("severity %s, labels %+v; want warning and only the project", a.Severity, a.Labels)
	}
	if got := a.Labels.title(); got != "project vision" {
		t.Errorf("title = %q", got)
	}
	if ids := e.EventJobs(); len(ids) != 0 {
		t.Errorf("EventJobs = %v, want none for a project alert", ids)
	}
	expect(t, "still past 80%", e.Evaluate(budgetObs(now.Add(2*time.Minute), visionUse(4500))), "")
	ts = e.Evaluate(budgetObs(now.Add(3*time.Minute), visionUse(5100)))
	expect(t, "used up", ts, "firing budget_threshold/project=vision/period=2026-12/at=100")
	if a := ts[0].Alert; a.Severity != SeverityCritical || !strings.Contains(a.Summary, "spent 5,100.00 of its 5,000.00 USD budget for 2026-12 (102%): the budget is used up") {
		t.Errorf("alert at 100%% = %s %q", a.Severity, a.Summary)
	}
	if s := SlackText(Notification{ts[0].Alert}); strings.Contains(s, "job 0") || !strings.Contains(s, "project vision") {
		t.Errorf("Slack text = %q", s)
	}
}

// Severities and the switch are configurable like other rules'.
func TestBudgetThresholdConfig(t *testing.T) {
	off := false
	e := newEngine(t, func(c *Config) {
		c.Rules.BudgetThreshold.Severity = SeverityInfo
		c.Rules.BudgetThreshold.ExceededSeverity = SeverityWarning
	})
	ts := e.Evaluate(budgetObs(dec2026, visionUse(6000)))
	if len(ts) != 3 || ts[0].Severity != SeverityInfo || ts[1].Severity != SeverityInfo || ts[2].Severity != SeverityWarning {
		t.Fatalf("transitions = %+v", ts)
	}
	e = newEngine(t, func(c *Config) { c.Rules.BudgetThreshold.Enabled = &off })
	expect(t, "disabled", e.Evaluate(budgetObs(dec2026, visionUse(6000))), "")

	var c Config
	c.Defaults()
	c.Rules.BudgetThreshold.ExceededSeverity = "loud"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "alerts.rules.budget_threshold.exceeded_severity: unknown severity \"loud\"") {
		t.Errorf("Validate = %v", err)
	}
}

// An alert resolves when the budget is raised, its period ends, the
// budget is gone or the threshold is dropped; not when budgets were not read.
func TestBudgetThresholdResolves(t *testing.T) {
	now := dec2026.Add(24 * time.Hour)
	key := func(p string, at int) string {
		return "budget_threshold/project=vision/period=" + p + "/at=" + itoa(at)
	}
	t.Run("raised", func(t *testing.T) {
		e := newEngine(t, nil)
		e.Evaluate(budgetObs(now, visionUse(4100)))
		u := visionUse(4100)
		u.Amount = usd(6000)
		ts := e.Evaluate(budgetObs(now.Add(time.Minute), u))
		expect(t, "raised", ts, "resolved "+key("2026-12", 80))
		if r := ts[0].Resolution; r != "project vision's spend for 2026-12, 4,100.00 USD, is under 80% of its budget of 6,000.00 USD" {
			t.Errorf("resolution = %q", r)
		}
	})
	t.Run("period", func(t *testing.T) {
		e := newEngine(t, nil)
		e.Evaluate(budgetObs(now, visionUse(2600)))
		// The list read before the month ended is reused: it no longer counts.
		ts := e.Evaluate(budgetObs(dec2026.AddDate(0, 1, 0), visionUse(2600)))
		expect(t, "stale list", ts, "resolved "+key("2026-12", 50))
		e.Evaluate(budgetObs(now, visionUse(2600)))
		next := BudgetUse{Project: "vision", Period: "2027-01", End: dec2026.AddDate(0, 2, 0), Amount: usd(5000), Thresholds: []int{50}}
		ts = e.Evaluate(budgetObs(dec2026.AddDate(0, 1, 0), next))
		expect(t, "new period", ts, "resolved "+key("2026-12", 50))
		if r := ts[0].Resolution; r != "period 2026-12 of project vision's budget ended; 2027-01 began" {
			t.Errorf("resolution = %q", r)
		}
	})
	t.Run("removed", func(t *testing.T) {
		e := newEngine(t, nil)
		e.Evaluate(budgetObs(now, visionUse(2600)))
		expect(t, "not read", e.Evaluate(Observation{Now: now.Add(time.Minute)}), "")
		ts := e.Evaluate(budgetObs(now.Add(2 * time.Minute)))
		expect(t, "removed", ts, "resolved "+key("2026-12", 50))
		if r := ts[0].Resolution; r != "project vision no longer has a budget in force for 2026-12" {
			t.Errorf("resolution = %q", r)
		}
	})
	t.Run("threshold dropped", func(t *testing.T) {
		e := newEngine(t, nil)
		e.Evaluate(budgetObs(now, visionUse(2600)))
		u := visionUse(2600)
		u.Thresholds = []int{80, 100}
		ts := e.Evaluate(budgetObs(now.Add(time.Minute), u))
		expect(t, "dropped", ts, "resolved "+key("2026-12", 50))
		if r := ts[0].Resolution; r != "50% is no longer a threshold of project vision's budget" {
			t.Errorf("resolution = %q", r)
		}
	})
}

// Alerts restored after a restart do not fire again, and still resolve.
func TestBudgetThresholdRestore(t *testing.T) {
	now := dec2026.Add(24 * time.Hour)
	e := newEngine(t, nil)
	fired := e.Evaluate(budgetObs(now, visionUse(4100)))
	var active []Alert
	for _, t := range fired {
		active = append(active, t.Alert)
	}
	e = newEngine(t, nil)
	e.Restore(active)
	expect(t, "after restart", e.Evaluate(budgetObs(now.Add(time.Minute), visionUse(4200))), "")
	expect(t, "removed", e.Evaluate(budgetObs(now.Add(2*time.Minute))),
		"resolved budget_threshold/project=vision/period=2026-12/at=50; resolved budget_threshold/project=vision/period=2026-12/at=80")
}

func TestBudgetKeyRoundTrip(t *testing.T) {
	k := BudgetKey("vision", "2026-12-01..2026-12-15", 80)
	if k != "budget_threshold/project=vision/period=2026-12-01..2026-12-15/at=80" {
		t.Fatalf("key = %q", k)
	}
	if p, per, at, ok := parseBudgetKey(k); !ok || p != "vision" || per != "2026-12-01..2026-12-15" || at != 80 {
		t.Fatalf("parsed %q %q %d %v", p, per, at, ok)
	}
}

func TestReachedAndGrouping(t *testing.T) {
	max := domain.Money(1<<63 - 1)
	for _, c := range []struct {
		spent, amount domain.Money
		pct           int
		want          bool
	}{
		{usd(4000), usd(5000), 80, true}, {usd(3999.99), usd(5000), 80, false}, {0, usd(5000), 50, false},
		{max, max, 100, true}, {max - 1, max, 100, false}, {max, max / 2, 150, true},
	} {
		if got := reached(c.spent, c.amount, c.pct); got != c.want {
			t.Errorf("reached(%d, %d, %d) = %v", c.spent, c.amount, c.pct, got)
		}
	}
	for in, want := range map[string]string{"0.50": "0.50", "999.00": "999.00", "1000.00": "1,000.00", "1234567.89": "1,234,567.89", "-12345.00": "-12,345.00"} {
		if got := groupDigits(in); got != want {
			t.Errorf("groupDigits(%q) = %q, want %q", in, got, want)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
