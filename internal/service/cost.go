package service

import (
	"context"
	"fmt"
	"strings"
	"time"

	"trainyard/internal/authz"
	"trainyard/internal/cost"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// CostService reports what attempts cost: their allocation at their
// pool's rates over the time they held it (internal/cost).
type CostService struct {
	*core
	st BudgetStore
}

// CostStore is what a spend report reads: the attempt history and the
// pools' rates.
type CostStore interface {
	AttemptSpans(ctx context.Context, since time.Time) ([]store.AttemptSpan, error)
	RunningSpans(ctx context.Context) ([]store.AttemptSpan, error)
	SpendTotals(ctx context.Context, q store.SpendQuery) ([]store.SpendRow, error)
	ReportTotals(ctx context.Context, q store.ReportQuery) (store.ReportTotals, error)
	ListPools(ctx context.Context) ([]domain.Pool, error)
	ListStorageDays(ctx context.Context, from, to time.Time) ([]domain.StorageDay, error) // storage.go
	RateHistory(ctx context.Context, pools ...string) ([]store.RateChange, error)
}

var _ CostStore = store.Store(nil)

// DefaultCostWindow is how far back a report looks when the caller names
// no start.
const DefaultCostWindow = 30 * 24 * time.Hour

// CostQuery selects a spend report.
type CostQuery struct {
	Project string // "": every project the caller may read
	// Since starts the window; zero: Window before now, or the default.
	Since  time.Time
	Window time.Duration
	By     string // one of cost.Groupings; "": project
}

// CostReport is spend over a window, by group (see cost.Summary).
type CostReport = cost.Summary

// CostLine is one group's spend (see cost.Line).
type CostLine = cost.Line

// CostGroupings are the values CostQuery.By accepts.
func CostGroupings() []string { return cost.Groupings }

// Report prices every attempt of the projects p may read (or of
// q.Project) that held resources in the window, grouped as q asks.
// Spend is a project's, so every role in a project reads all of it.
func (s *CostService) Report(ctx context.Context, p Principal, q CostQuery) (CostReport, error) {
	now := s.cfg.Clock.Now()
	var errs domain.FieldErrors
	if q.By == "" {
		q.By = "project"
	}
	if cost.CheckBy(q.By) != nil {
		errs.Add("by", "cannot group by %q; choose one of %s", q.By, strings.Join(cost.Groupings, ", "))
	}
	since := windowStart(&errs, q.Since, q.Window, now, DefaultCostWindow)
	if err := errs.Err(); err != nil {
		return CostReport{}, err
	}
	if err := s.authorize(ctx, p, authz.CostRead, authz.Resource{Kind: "cost", Project: q.Project}); err != nil {
		return CostReport{}, err
	}
	vis := authz.VisibleCost(p)
	ledger, err := store.Ledger(ctx, s.st)
	if err != nil {
		return CostReport{}, err
	}
	if q.By != "day" {
		return s.reportTotals(ctx, q, vis, ledger, since, now)
	}
	// By day an attempt is split at each midnight it ran across: priced
	// from its span.
	spans, err := s.st.AttemptSpans(ctx, since)
	if err != nil {
		return CostReport{}, fmt.Errorf("read attempt history: %w", err)
	}
	all := store.CostSpans(spans)
	in := all[:0]
	for _, sp := range all {
		if q.Project != "" && sp.Project != q.Project || !vis.Sees(sp.Project, "") {
			continue
		}
		in = append(in, sp)
	}
	return cost.Report(in, ledger, now, since, q.By), nil
}

// reportTotals is Report summed by the database, for every grouping but
// day: it reads a row per group and resource shape, not per attempt, its
// time split where rates changed in the window so that each piece has one
// price.
func (s *CostService) reportTotals(ctx context.Context, q CostQuery, vis authz.Visible, ledger cost.Ledger, since, now time.Time) (CostReport, error) {
	splits := ledger.Changes(since, now)
	sq := store.SpendQuery{Since: since, Until: now, By: q.By, AllProjects: vis.All, Projects: vis.Projects, Splits: splits}
	if q.Project != "" {
		sq.AllProjects, sq.Projects = false, nil
		if vis.Sees(q.Project, "") {
			sq.Projects = []string{q.Project}
		}
	}
	rows, err := s.st.SpendTotals(ctx, sq)
	if err != nil {
		return CostReport{}, fmt.Errorf("sum attempt history: %w", err)
	}
	return store.PriceSpend(rows, splits, ledger, since, now, q.By)
}

// windowStart is the start of a report's window ending at end: since, or
// window before end, or def before end; a negative window or a start
// after end is an error on errs, naming the since field.
func windowStart(errs *domain.FieldErrors, since time.Time, window time.Duration, end time.Time, def time.Duration) time.Time {
	example := fmt.Sprintf("%dd", int(def/(24*time.Hour))) // the default, as users write it: 30d
	switch {
	case window < 0:
		errs.Add("since", "must be a positive duration such as %s or 12h (got %s)", example, window)
	case since.IsZero() && window > 0:
		since = end.Add(-window)
	case since.IsZero():
		since = end.Add(-def)
	}
	if since.After(end) {
		errs.Add("since", "%s is in the future; name a past time or a duration such as %s", since.Format(time.RFC3339), example)
	}
	return since
}
