package store

import (
	"context"
	"fmt"
	"time"

	"trainyard/internal/cost"
	"trainyard/internal/domain"
)

// History is what pricing reads: the attempt spans and the pools' rates.
type History interface {
	AttemptSpans(ctx context.Context, since time.Time) ([]AttemptSpan, error)
	ListPools(ctx context.Context) ([]domain.Pool, error)
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

// PoolRates reads every pool's rates, by pool.
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

// PricedHistory reads the attempts that held resources since since, as
// package cost prices them, and every pool's rates.
func PricedHistory(ctx context.Context, h History, since time.Time) ([]cost.Span, map[string]domain.Rates, error) {
	spans, err := h.AttemptSpans(ctx, since)
	if err != nil {
		return nil, nil, fmt.Errorf("read attempt history: %w", err)
	}
	rates, err := PoolRates(ctx, h)
	if err != nil {
		return nil, nil, err
	}
	return CostSpans(spans), rates, nil
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
	spans, rates, err := PricedHistory(ctx, h, since)
	if err != nil {
		return nil, err
	}
	uses := make(map[string]cost.Use, len(bs))
	for _, b := range bs {
		if u, ok := cost.BudgetUse(b, spans, rates, now); ok {
			uses[b.Project] = u
		}
	}
	return uses, nil
}
