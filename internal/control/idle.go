package control

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/metrics/sample"
	"trainyard/internal/store"
)

// GPUSampler is what the idle stop and the GPU use recorded on ended
// attempts read: the latest resource sample of each running attempt (the
// metrics sampler, sample.Sampler).
type GPUSampler interface {
	Latest() []sample.Sample
}

// idleRun is what the idle stop knows of one running attempt: since when
// every GPU it holds has read idle (zero: not idle now), the reading it
// last judged, and the busiest idle reading since then, for the message.
type idleRun struct {
	since time.Time
	last  time.Time
	peak  float64 // percent
}

// checkIdle stops the running jobs whose GPUs all stayed under their
// pool's idle_stop threshold for its whole window. It reads only the
// sampler's latest samples (one per running attempt), so its cost follows
// the running jobs, not the queue; pools without an idle stop cost
// nothing.
//
// A job is judged by its GPUs alone: one that reports training progress
// while its GPUs idle (a CPU-bound input pipeline) wastes them just the
// same and is stopped too. Every assigned GPU must read idle: a job
// using some of its GPUs is not idle, and a reading that is missing
// (NaN, or the GPU left out) starts the window again, as does a gap
// between readings longer than a third of it, so a stalled sampler or a
// restart never stops a job on stale evidence.
func (c *Controller) checkIdle(ctx context.Context, pools []domain.Pool, byID map[int64]domain.Job) {
	if c.cfg.GPUSamples == nil {
		return
	}
	var stops map[string]domain.IdleStop
	for _, p := range pools {
		if p.IdleStop.On() {
			if stops == nil {
				stops = map[string]domain.IdleStop{}
			}
			stops[p.Name] = p.IdleStop
		}
	}
	if stops == nil {
		clear(c.idle)
		return
	}
	seen := make(map[executor.Ref]bool, len(c.idle))
	for _, s := range c.cfg.GPUSamples.Latest() {
		if len(s.GPUs) == 0 && len(s.Target.GPUs) == 0 {
			continue // holds no GPU
		}
		j, ok := byID[s.JobID]
		if !ok || j.State != domain.JobRunning || j.Attempts != s.Attempt || j.CancelRequested || j.PreemptRequested {
			continue
		}
		stop, ok := stops[j.Pool]
		if !ok {
			continue
		}
		ref := executor.Ref{JobID: s.JobID, Attempt: s.Attempt}
		if c.healthStopped[ref] || c.finishing[ref] || c.stopping[ref] {
			continue
		}
		seen[ref] = true
		r := c.idle[ref]
		if r == nil {
			r = &idleRun{}
			c.idle[ref] = r
		}
		if !s.At.After(r.last) {
			continue // judged already
		}
		util, idle := allIdle(s, stop.Below)
		switch {
		case !idle:
			r.since, r.peak = time.Time{}, 0
		case r.since.IsZero() || s.At.Sub(r.last) > stop.For.D()/3:
			r.since, r.peak = s.At, util
		default:
			r.peak = max(r.peak, util)
		}
		r.last = s.At
		if r.since.IsZero() || s.At.Sub(r.since) < stop.For.D() {
			continue
		}
		c.stopIdle(ctx, j, ref, s, stop, r)
	}
	for ref := range c.idle {
		if !seen[ref] {
			delete(c.idle, ref)
		}
	}
}

// allIdle reports whether every GPU assigned to the sampled attempt read
// under below (a 0–1 ratio), and the highest reading among them in
// percent.
func allIdle(s sample.Sample, below float64) (peak float64, idle bool) {
	if len(s.GPUs) == 0 || len(s.GPUs) < len(s.Target.GPUs) {
		return 0, false // a GPU not read: not known to be idle
	}
	for _, g := range s.GPUs {
		if math.IsNaN(g.Utilization) || g.Utilization >= below*100 {
			return 0, false
		}
		peak = max(peak, g.Utilization)
	}
	return peak, true
}

// stopIdle records why the attempt is stopped, as a health check does, so
// that its end is a failure with reason Idle (events.go: never retried),
// and stops it.
func (c *Controller) stopIdle(ctx context.Context, j domain.Job, ref executor.Ref, s sample.Sample, stop domain.IdleStop, r *idleRun) {
	idx := make([]string, len(s.GPUs))
	for i, g := range s.GPUs {
		idx[i] = strconv.Itoa(g.Index)
	}
	gpus := "GPU " + idx[0]
	if len(idx) > 1 {
		gpus = "GPUs " + strings.Join(idx, ",")
	}
	msg := fmt.Sprintf("stopped as idle: %s stayed under %s utilisation (at most %s) for %s, pool %s's idle_stop (below %g for %s); not retried, as a retry would idle them again",
		gpus, pctText(stop.Below*100), pctText(r.peak), domain.FormatDuration(s.At.Sub(r.since).Truncate(time.Second)),
		j.Pool, stop.Below, stop.For)
	if err := c.cfg.Store.MarkHealthFailed(ctx, ref.JobID, ref.Attempt, domain.ReasonIdle, msg); err != nil {
		if !errors.Is(err, store.ErrConflict) {
			c.log.Warn("record an idle stop", "attempt", ref.String(), "err", err)
		}
		return
	}
	c.log.Info("stopping a job whose GPUs are idle", "attempt", ref.String(), "pool", j.Pool, "idle_since", r.since)
	c.healthStopped[ref] = true
	delete(c.idle, ref)
	c.stop(ctx, ref, executor.StopRequest{Reason: domain.ReasonIdle, Message: "idle GPUs (pool idle_stop)"})
}

// pctText writes a percentage with at most one decimal: 5%, 2.5%.
func pctText(p float64) string {
	return strconv.FormatFloat(math.Round(p*10)/10, 'f', -1, 64) + "%"
}

// gpuUse is what running attempts used of their GPUs so far, as the
// sampler counted it (sample.Sample.GPUSeconds), read from it once for
// a batch of attempt ends.
type gpuUse struct {
	read    bool
	seconds map[executor.Ref]float64
}

// of is the GPU-seconds of one attempt; 0 without a sampler or readings.
func (g *gpuUse) of(s GPUSampler, jobID int64, attempt int) float64 {
	if s == nil {
		return 0
	}
	if !g.read {
		g.read = true
		g.seconds = map[executor.Ref]float64{}
		for _, smp := range s.Latest() {
			g.seconds[executor.Ref{JobID: smp.JobID, Attempt: smp.Attempt}] = smp.GPUSeconds
		}
	}
	return g.seconds[executor.Ref{JobID: jobID, Attempt: attempt}]
}
