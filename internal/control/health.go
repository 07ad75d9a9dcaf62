package control

import (
	"context"
	"errors"
	"fmt"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/store"
)

// maxUnstoredPoints bounds the metric points kept in memory while the
// store refuses them; beyond it the oldest are dropped (and logged).
const maxUnstoredPoints = 1_000_000

// progressed records an attempt's latest progress time in memory; the store
// is updated in handleEvents.
func (c *Controller) progressed(ref executor.Ref, at time.Time) bool {
	if at.After(c.progress[ref]) {
		c.progress[ref] = at
		return true
	}
	return false
}

// storePoints stores the metric points of Progress events, with those an
// earlier call could not store. Points stored before a restart are
// reported again by the executor and skipped by the store.
func (c *Controller) storePoints(ctx context.Context, points []domain.MetricPoint) {
	c.unstored = append(c.unstored, points...)
	if len(c.unstored) == 0 {
		return
	}
	if err := c.cfg.Store.AppendPoints(ctx, c.unstored); err != nil {
		if drop := len(c.unstored) - maxUnstoredPoints; drop > 0 {
			c.log.Error("metric points dropped: the store refuses them and too many wait", "dropped", drop, "err", err)
			c.unstored = append(c.unstored[:0], c.unstored[drop:]...)
			return
		}
		c.log.Warn("store metric points; trying again", "points", len(c.unstored), "err", err)
		return
	}
	c.unstored = c.unstored[:0]
}

// checkHealth stops attempts that missed their first progress or stalled,
// and returns how long until the nearest health deadline (max when none).
func (c *Controller) checkHealth(ctx context.Context, now time.Time, atts []domain.Attempt, byID map[int64]domain.Job, max time.Duration) time.Duration {
	next := max
	// Reports through the API reach the store, not this loop: merge the
	// stored progress times first, when any attempt has checks.
	for _, a := range atts {
		if ji, err := c.info(ctx, a.JobID); err == nil && (ji.spec.Health.FirstProgress > 0 || ji.spec.Health.Stall > 0) {
			if err := c.seedProgress(ctx); err != nil {
				c.log.Warn("health checks skipped this cycle", "err", err)
				return next
			}
			break
		}
	}
	for _, a := range atts {
		j, ok := byID[a.JobID]
		if !ok || a.State != domain.AttemptRunning || a.StartedAt.IsZero() || j.CancelRequested || j.PreemptRequested {
			continue
		}
		ref := executor.Ref{JobID: a.JobID, Attempt: a.Number}
		if c.healthStopped[ref] || c.finishing[ref] { // finishing: it has ended
			continue
		}
		ji, err := c.info(ctx, a.JobID)
		if err != nil {
			continue
		}
		h := ji.spec.Health
		if h.FirstProgress <= 0 && h.Stall <= 0 {
			continue
		}
		last := c.progress[ref]
		var deadline time.Time
		var reason domain.Reason
		var msg string
		switch {
		case last.IsZero() || last.Before(a.StartedAt):
			if h.FirstProgress <= 0 {
				continue
			}
			deadline, reason = a.StartedAt.Add(h.FirstProgress.D()), domain.ReasonHealthCheckFailed
			msg = fmt.Sprintf("no training progress reported within health.first_progress (%s) of the start", domain.FormatDuration(h.FirstProgress.D()))
		default:
			if h.Stall <= 0 {
				continue
			}
			deadline, reason = last.Add(h.Stall.D()), domain.ReasonStalled
			msg = fmt.Sprintf("no training progress for health.stall (%s); last progress at %s", domain.FormatDuration(h.Stall.D()), last.UTC().Format(time.RFC3339))
		}
		if wait := deadline.Sub(now); wait > 0 {
			next = min(next, wait)
			continue
		}
		if err := c.cfg.Store.MarkHealthFailed(ctx, ref.JobID, ref.Attempt, reason, msg); err != nil {
			if !errors.Is(err, store.ErrConflict) {
				c.log.Warn("record health failure", "attempt", ref.String(), "err", err)
			}
			continue
		}
		c.log.Info("stopping unhealthy attempt", "attempt", ref.String(), "reason", reason)
		c.healthStopped[ref] = true
		c.stop(ctx, ref, healthRequest(reason))
	}
	return next
}

// seedProgress merges the stored last progress times of active attempts
// (after a restart, and those reported through the API).
func (c *Controller) seedProgress(ctx context.Context) error {
	hs, err := c.cfg.Store.ActiveHealth(ctx)
	if err != nil {
		return fmt.Errorf("load attempt health: %w", err)
	}
	for _, h := range hs {
		ref := executor.Ref{JobID: h.JobID, Attempt: h.Attempt}
		c.progressed(ref, h.LastProgressAt)
	}
	return nil
}

// forgetAttempt drops the loop's memory of an ended attempt.
func (c *Controller) forgetAttempt(ref executor.Ref) {
	delete(c.progress, ref)
	delete(c.healthStopped, ref)
}
