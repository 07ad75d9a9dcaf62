package store

import (
	"context"
	"fmt"
	"time"

	"trainyard/internal/cost"
	"trainyard/internal/domain"
)

// History is what pricing reads: the attempt spans and the pools' rate
// history.
type History interface {
	AttemptSpans(ctx context.Context, since time.Time) ([]AttemptSpan, error)
	RateHistory(ctx context.Context, pools ...string) ([]RateChange, error)
}

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

// PoolRates reads every pool's rates now, by pool: what running attempts
// cost per hour. History is priced with the rates in force while it ran
// (Ledger), never with these.
func PoolRates(ctx context.Context, h interface {
	ListPools(ctx context.Context) ([]domain.Pool, error)
}) (map[string]domain.Rates, error) {
	pools, err := h.ListPools(ctx)
	if err != nil {
		return nil, fmt.Errorf("read pool rates: %w", err)
	}
	rates := make(map[string]domain.Rates, len(pools))
	for _, p := range pools {
		rates[p.Name] = p.Rates
	}
	return rates, nil
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

// PricedHistory reads the attempts that held resources since since, as
// package cost prices them, and every pool's rate history.
func PricedHistory(ctx context.Context, h History, since time.Time) ([]cost.Span, cost.Ledger, error) {
	spans, err := h.AttemptSpans(ctx, since)
	if err != nil {
		return nil, cost.Ledger{}, fmt.Errorf("read attempt history: %w", err)
	}
	l, err := Ledger(ctx, h)
	if err != nil {
		return nil, cost.Ledger{}, err
	}
	return CostSpans(spans), l, nil
}

// BudgetUses prices each of bs in force at now, by project, from one read
// of the history since the earliest of their periods; a budget not in
// force has no entry. Nothing is read when none is in force.
func BudgetUses(ctx context.Context, h History, bs []domain.Budget, now time.Time) (map[string]cost.Use, error) {
	var since time.Time
	for _, b := range bs {
		if from, _, _, ok := b.Window(now); ok && (since.IsZero() || from.Before(since)) {
			since = from
		}
	}
	if since.IsZero() {
		return nil, nil
	}
	spans, l, err := PricedHistory(ctx, h, since)
	if err != nil {
		return nil, err
	}
	uses := make(map[string]cost.Use, len(bs))
	for _, b := range bs {
		if u, ok := cost.BudgetUse(b, spans, l, now); ok {
			uses[b.Project] = u
		}
	}
	return uses, nil
}
