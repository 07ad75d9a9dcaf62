package store

import (
	"context"
	"fmt"
	"time"

	"trainyard/internal/cost"
	"trainyard/internal/domain"
)

// CostSpans turns attempt spans into what package cost prices.
func CostSpans(spans []AttemptSpan) []cost.Span {
	out := make([]cost.Span, len(spans))
	for i, sp := range spans {
		out[i] = cost.Span{JobID: sp.JobID, Attempt: sp.Attempt, Project: sp.Project, Pool: sp.Pool,
			User: sp.Submitter, JobName: sp.JobName, Resources: sp.Resources,
			Start: sp.StartedAt, End: sp.FinishedAt, State: sp.State, Timeout: sp.Timeout.D()}
	}
	return out
}

// Ledger reads the rate history of the named pools (of every pool when
// none is named) as package cost prices time with it.
func Ledger(ctx context.Context, h interface {
	RateHistory(ctx context.Context, pools ...string) ([]RateChange, error)
}, pools ...string) (cost.Ledger, error) {
	changes, err := h.RateHistory(ctx, pools...)
	if err != nil {
		return cost.Ledger{}, fmt.Errorf("read rate history: %w", err)
	}
	var l cost.Ledger
	for _, c := range changes {
		l.Add(c.Pool, c.From, c.Rates)
	}
	return l, nil
}

// PriceSpend prices the database's spend sums of a window [since, now]
// split at splits (SpendQuery.Splits): each row's pieces at the rates l
// had in force from each piece's start, rounded once per row.
func PriceSpend(rows []SpendRow, splits []time.Time, l cost.Ledger, since, now time.Time, by string) (cost.Summary, error) {
	totals := make([]cost.Totals, len(rows))
	for i, r := range rows {
		if len(r.HeldIn) != len(splits)+1 {
			return cost.Summary{}, fmt.Errorf("sum attempt history: %d pieces of held time for a window split in %d", len(r.HeldIn), len(splits)+1)
		}
		pieces := make([]cost.Piece, len(r.HeldIn))
		for k, held := range r.HeldIn {
			pieces[k] = cost.Piece{From: since, Held: held}
			if k > 0 {
				pieces[k].From = splits[k-1]
			}
		}
		totals[i] = cost.Totals{Group: r.Group, Pool: r.Pool, Resources: r.Resources, Waste: r.Waste,
			Attempts: r.Attempts, Running: r.Running, Held: r.Held, Pieces: pieces}
	}
	return cost.ReportTotals(totals, l, now, since, by), nil
}

// BudgetHistory is what BudgetUses reads.
type BudgetHistory interface {
	SpendTotals(ctx context.Context, q SpendQuery) ([]SpendRow, error)
	RunningSpans(ctx context.Context) ([]AttemptSpan, error)
	RateHistory(ctx context.Context, pools ...string) ([]RateChange, error)
}

// BudgetUses prices each of bs in force at now, by project; a budget not
// in force has no entry, and nothing is read when none is. The database
// sums each period's spend (one SpendTotals per distinct period start,
// for all the projects whose period starts then, priced as trainyard cost
// prices it); the running attempts, read on the state index, add their
// rate and what they may still cost. Nothing is read per finished
// attempt.
func BudgetUses(ctx context.Context, h BudgetHistory, bs []domain.Budget, now time.Time) (map[string]cost.Use, error) {
	uses := make(map[string]cost.Use, len(bs))
	starts := map[time.Time][]string{} // period start → projects
	for _, b := range bs {
		if from, to, name, ok := b.Window(now); ok {
			uses[b.Project] = cost.Use{Budget: b, Period: name, From: from, To: to}
			starts[from] = append(starts[from], b.Project)
		}
	}
	if len(uses) == 0 {
		return nil, nil
	}
	l, err := Ledger(ctx, h)
	if err != nil {
		return nil, err
	}
	for from, projects := range starts {
		splits := l.Changes(from, now)
		rows, err := h.SpendTotals(ctx, SpendQuery{Since: from, Until: now, By: "project", Projects: projects, Splits: splits})
		if err != nil {
			return nil, fmt.Errorf("sum attempt history: %w", err)
		}
		sum, err := PriceSpend(rows, splits, l, from, now, "project")
		if err != nil {
			return nil, err
		}
		for _, line := range sum.Lines {
			if u, ok := uses[line.Group]; ok && u.From.Equal(from) {
				u.Spent = line.Cost
				uses[line.Group] = u
			}
		}
	}
	spans, err := h.RunningSpans(ctx)
	if err != nil {
		return nil, fmt.Errorf("read running attempts: %w", err)
	}
	running := CostSpans(spans)
	for p, u := range uses {
		u.AddRunning(running, l, now)
		uses[p] = u
	}
	return uses, nil
}
