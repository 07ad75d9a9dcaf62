package alerts

import (
	"fmt"
	"time"
)

// RuleWeeklyReport sends a review of the past week through the channels
// once a week. It is about no job: Labels.Job is 0.
const RuleWeeklyReport Rule = "weekly_report"

// ReportRule is weekly_report: off unless `enabled: true`; the review of
// the seven days before each Day at At (UTC), grouped By.
type ReportRule struct {
	RuleBase `yaml:",inline"`
	Day      string `yaml:"day,omitempty" json:"day,omitempty"` // monday (default) … sunday
	At       string `yaml:"at,omitempty" json:"at,omitempty"`   // "09:00" (default), UTC
	By       string `yaml:"by,omitempty" json:"by,omitempty"`   // project (default) or pool
}

// On reports whether the weekly report is enabled: only when set so.
func (r ReportRule) On() bool { return r.Enabled != nil && *r.Enabled }

// Weekly report defaults.
const (
	DefaultReportDay = "monday"
	DefaultReportAt  = "09:00"
	DefaultReportBy  = "project"
)

var weekdays = map[string]time.Weekday{"sunday": time.Sunday, "monday": time.Monday, "tuesday": time.Tuesday,
	"wednesday": time.Wednesday, "thursday": time.Thursday, "friday": time.Friday, "saturday": time.Saturday}

// check reports the first invalid field of a rule that passed Defaults.
func (r ReportRule) check(bad func(path, format string, args ...any)) {
	if _, ok := weekdays[r.Day]; !ok {
		bad("rules.weekly_report.day", "%q is not a day; use monday … sunday", r.Day)
	}
	if _, err := time.Parse("15:04", r.At); err != nil {
		bad("rules.weekly_report.at", "%q is not a time of day; use HH:MM in UTC, e.g. 09:00", r.At)
	}
	if r.By != "project" && r.By != "pool" {
		bad("rules.weekly_report.by", "%q cannot group the report; use project or pool", r.By)
	}
}

// Due returns the latest scheduled send at or before now and the week it
// reviews, [at-7d, at), named by its ISO week ("2026-W48"). The rule must
// have passed Validate.
func (r ReportRule) Due(now time.Time) (name string, since, until time.Time) {
	now = now.UTC()
	hm, _ := time.Parse("15:04", r.At)
	until = time.Date(now.Year(), now.Month(), now.Day(), hm.Hour(), hm.Minute(), 0, 0, time.UTC)
	until = until.AddDate(0, 0, -((int(until.Weekday()) - int(weekdays[r.Day]) + 7) % 7))
	if until.After(now) {
		until = until.AddDate(0, 0, -7)
	}
	since = until.AddDate(0, 0, -7)
	y, w := since.ISOWeek()
	return fmt.Sprintf("%d-W%02d", y, w), since, until
}

// ReportKey is the dedupe key of the weekly report of a week:
// "weekly_report/week=2026-W48".
func ReportKey(week string) string { return string(RuleWeeklyReport) + "/week=" + week }

// Report is a weekly review due to be sent: Observation.Reports. Summary
// is its text; it may be empty when the report's alert is already firing
// (restored after a restart), since it then does not fire again.
type Report struct {
	Week    string
	Summary string
}

// evaluateReports fires the weekly report of each listed week not sent
// yet, and resolves (silently: see Transition.Quiet) the reports of weeks
// no longer listed. Left alone when the observation did not list reports.
func (e *Engine) evaluateReports(out []Transition, obs Observation) []Transition {
	if !obs.ReportsSeen {
		return out
	}
	listed := map[string]bool{}
	for _, r := range obs.Reports {
		key := ReportKey(r.Week)
		listed[key] = true
		if _, firing := e.active[key]; firing || r.Summary == "" || !e.cfg.Rules.WeeklyReport.On() {
			continue
		}
		out = append(out, e.fire(Alert{Key: key, Rule: RuleWeeklyReport, Severity: e.cfg.Rules.WeeklyReport.Severity,
			Summary: r.Summary}, obs.Now))
	}
	for _, a := range e.Active() {
		if a.Rule == RuleWeeklyReport && !listed[a.Key] {
			out = append(out, e.resolve(a.Key, obs.Now, "the next week's report replaced it"))
		}
	}
	return out
}

// Quiet reports whether t is sent to no channel: a weekly report resolves
// when the next one is sent, and nobody needs to hear of that.
func (t Transition) Quiet() bool { return t.Rule == RuleWeeklyReport && t.Status == StatusResolved }
