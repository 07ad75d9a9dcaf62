package alerts

import (
	"strings"
	"testing"
	"time"
)

// Due names the latest scheduled send at or before now and the week
// before it; the schedule is in UTC.
func TestReportDue(t *testing.T) {
	r := ReportRule{Day: "monday", At: "09:00"}
	utc := func(d, h, m int) time.Time { return time.Date(2026, 12, d, h, m, 0, 0, time.UTC) }
	for _, tt := range []struct {
		now         time.Time
		week, since string
	}{
		{utc(7, 9, 0), "2026-W49", "2026-11-30T09:00:00Z"},  // at the send
		{utc(7, 8, 59), "2026-W48", "2026-11-23T09:00:00Z"}, // just before it
		{utc(6, 23, 0), "2026-W48", "2026-11-23T09:00:00Z"}, // Sunday
		{utc(2, 12, 0), "2026-W48", "2026-11-23T09:00:00Z"}, // Wednesday
		{time.Date(2026, 12, 7, 11, 0, 0, 0, time.FixedZone("CET", 3600)), "2026-W49", "2026-11-30T09:00:00Z"},
	} {
		week, since, until := r.Due(tt.now)
		if week != tt.week || since.Format(time.RFC3339) != tt.since || until.Sub(since) != 7*24*time.Hour {
			t.Errorf("Due(%s) = %s, %s..%s; want %s from %s", tt.now, week, since, until, tt.week, tt.since)
		}
	}
	fri := ReportRule{Day: "friday", At: "17:30"}
	if week, _, until := fri.Due(utc(7, 9, 0)); until != utc(4, 17, 30) || week != "2026-W48" {
		t.Errorf("friday 17:30 due = %s %s", week, until)
	}
}

// The weekly report is off unless enabled, and a bad schedule names the
// field and the fix.
func TestReportRuleConfig(t *testing.T) {
	var c Config
	c.Defaults()
	if c.Rules.WeeklyReport.On() || c.Rules.WeeklyReport.Day != "monday" || c.Rules.WeeklyReport.At != "09:00" || c.Rules.WeeklyReport.By != "project" {
		t.Errorf("defaults = %+v", c.Rules.WeeklyReport)
	}
	c.Rules.WeeklyReport = ReportRule{Day: "mon", At: "9am", By: "user"}
	c.Defaults()
	err := c.Validate()
	for _, want := range []string{`alerts.rules.weekly_report.day: "mon" is not a day`, `alerts.rules.weekly_report.at: "9am" is not a time of day; use HH:MM`,
		`alerts.rules.weekly_report.by: "user" cannot group the report; use project or pool`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v; want %q", err, want)
		}
	}
}

// A listed report fires once; the report of a week no longer listed
// resolves quietly.
func TestEngineWeeklyReport(t *testing.T) {
	on := true
	var c Config
	c.Rules.WeeklyReport.Enabled = &on
	e, err := NewEngine(c)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	obs := Observation{Now: now, ReportsSeen: true, Reports: []Report{{Week: "2026-W49", Summary: "3 jobs"}}}
	if ts := e.Evaluate(obs); len(ts) != 1 || ts[0].Key != "weekly_report/week=2026-W49" || ts[0].Summary != "3 jobs" || ts[0].Quiet() {
		t.Fatalf("first evaluation = %+v", ts)
	}
	if ts := e.Evaluate(obs); len(ts) != 0 {
		t.Fatalf("second evaluation = %+v; want nothing", ts)
	}
	obs.Reports = []Report{{Week: "2026-W50"}} // not written yet
	if ts := e.Evaluate(obs); len(ts) != 1 || ts[0].Status != StatusResolved || !ts[0].Quiet() {
		t.Fatalf("next week = %+v; want the old report resolved quietly", ts)
	}
}

// spend_rate fires while a project's running jobs cost more per hour than
// its budget's limit, with the numbers, and resolves once they do not.
func TestEngineSpendRate(t *testing.T) {
	e, err := NewEngine(Config{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	u := BudgetUse{Project: "vision", Period: "2026-12", Amount: 5000 * 1_000_000, Rate: 52 * 1_000_000, MaxRate: 40 * 1_000_000,
		Action: "block", Currency: "USD"}
	obs := Observation{Now: now, BudgetsSeen: true, Budgets: []BudgetUse{u, {Project: "nlp", Rate: 10, MaxRate: 0}}}
	ts := e.Evaluate(obs)
	if len(ts) != 1 || ts[0].Key != "spend_rate/project=vision" || ts[0].Severity != SeverityWarning || ts[0].Labels.Project != "vision" ||
		!strings.HasPrefix(ts[0].Summary, "project vision's running jobs cost 52.00 USD an hour, above its budget's limit of 40.00 USD an hour: its new jobs wait") {
		t.Fatalf("evaluation = %+v", ts)
	}
	if ts := e.Evaluate(obs); len(ts) != 0 {
		t.Fatalf("again = %+v; want nothing", ts)
	}
	obs.Budgets[0].Rate = 30 * 1_000_000
	if ts := e.Evaluate(obs); len(ts) != 1 || ts[0].Status != StatusResolved {
		t.Fatalf("under the limit = %+v; want it resolved", ts)
	}
}
