package alerting

import (
	"context"
	"time"

	"trainyard/internal/alerts"
)

// ReportRetry is how long a weekly report that could not be written waits
// before it is tried again.
const ReportRetry = time.Minute

// weeklyReport is the report of one week as last written.
type weeklyReport struct {
	week    string
	summary string
	tried   time.Time // when writing it last failed
}

// weeklyReport returns the weekly report due at now, written (by
// Config.Review) once per week, and only when its alert is not already
// firing: after a restart the week's report is restored, not sent again.
// ok is false with the rule off or no Review. Called from Run's goroutine
// only.
func (a *Alerter) weeklyReport(ctx context.Context, now time.Time) (reports []alerts.Report, ok bool) {
	rule := a.cfg.Alerts.Rules.WeeklyReport
	if !rule.On() || a.cfg.Review == nil {
		return nil, false
	}
	week, since, until := rule.Due(now)
	due := alerts.Report{Week: week}
	switch {
	case a.engine.Firing(alerts.ReportKey(week)):
	case a.report.week == week && a.report.summary != "":
		due.Summary = a.report.summary
	case a.report.week == week && now.Sub(a.report.tried) < ReportRetry && !now.Before(a.report.tried):
	default:
		summary, err := a.cfg.Review(ctx, since, until, rule.By)
		a.report = weeklyReport{week: week, summary: summary}
		if err != nil {
			a.log.Warn("write the weekly report; trying again in a minute", "week", week, "err", err)
			a.report.summary, a.report.tried = "", now
		}
		due.Summary = a.report.summary
	}
	return []alerts.Report{due}, true
}
