package control

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// Early stopping of sweep members (a sweep's early_stop, the median rule):
// every earlyStopEvery the loop looks at the sweeps with running members
// whose definition asks for it, and stops each running member whose best
// value of the objective's metric by its latest step is worse than the
// median of the other members' mean values up to that step. A stopped
// member ends succeeded with reason EarlyStopped (events.go).

// earlyStopEvery is how often the loop applies early-stop rules.
const earlyStopEvery = 10 * time.Second

// earlyStopPoints bounds the points read of one member's series: enough to
// take a mean at any step.
const earlyStopPoints = 1000

// earlyStops is what the loop keeps between looks: the series of members
// that ended, which never change, per sweep.
type earlyStops struct {
	at    time.Time
	ended map[int64]map[int64][]domain.MetricPoint // sweep → job → series
}

// checkEarlyStop applies the early-stop rules when due.
func (c *Controller) checkEarlyStop(ctx context.Context, now time.Time) {
	if now.Before(c.early.at) {
		return
	}
	c.early.at = now.Add(earlyStopEvery)
	sweeps, err := c.cfg.Store.RunningSweeps(ctx)
	if err != nil {
		c.log.Error("list the sweeps with running members", "err", err)
		return
	}
	keep := make(map[int64]map[int64][]domain.MetricPoint, len(sweeps))
	for _, id := range sweeps {
		sw, err := c.cfg.Store.GetSweep(ctx, id)
		if err != nil {
			c.log.Error("read a sweep to stop its poor members", "sweep", id, "err", err)
			continue
		}
		if sw.Spec.EarlyStop == nil || sw.Objective == nil || !sw.CanceledAt.IsZero() {
			continue
		}
		ended := c.early.ended[id]
		if ended == nil {
			ended = map[int64][]domain.MetricPoint{}
		}
		keep[id] = ended
		if err := c.stopPoorMembers(ctx, sw, ended, now); err != nil {
			c.log.Error("stop the poor members of a sweep", "sweep", id, "err", err)
		}
	}
	c.early.ended = keep // the sweeps without running members are let go
}

// stopPoorMembers applies sw's median rule to its running members.
func (c *Controller) stopPoorMembers(ctx context.Context, sw domain.Sweep, ended map[int64][]domain.MetricPoint, now time.Time) error {
	members, err := c.cfg.Store.ListJobs(ctx, store.JobFilter{Sweep: sw.ID})
	if err != nil {
		return err
	}
	obj, rule := *sw.Objective, *sw.Spec.EarlyStop
	series := make(map[int64][]domain.MetricPoint, len(members))
	var running []domain.Job
	for _, m := range members {
		if m.StartedAt.IsZero() {
			continue // never ran: reported nothing
		}
		if pts, ok := ended[m.ID]; ok {
			series[m.ID] = pts
			continue
		}
		got, err := c.cfg.Store.QueryMetrics(ctx, m.ID, obj.Metric, earlyStopPoints)
		if err != nil {
			return err
		}
		pts := got[obj.Metric]
		slices.SortStableFunc(pts, func(a, b domain.MetricPoint) int { return cmp.Compare(a.Step, b.Step) })
		series[m.ID] = pts
		switch {
		case m.State.Terminal():
			ended[m.ID] = pts
		case m.State == domain.JobRunning && !m.CancelRequested:
			running = append(running, m)
		}
	}
	var stops []store.Change
	for _, m := range running {
		if why := medianVerdict(m.ID, series, obj, rule); why != "" {
			stops = append(stops, store.Change{JobID: m.ID, In: []domain.JobState{domain.JobRunning}, RequestCancel: true,
				SetReason: true, Reason: domain.ReasonEarlyStopped, Message: "early stopped (sweep " + strconv.FormatInt(sw.ID, 10) + "): " + why,
				Actor: actorScheduler, At: now})
		}
	}
	if len(stops) == 0 {
		return nil
	}
	if _, err := c.cfg.Store.Apply(ctx, stops); err != nil {
		return err
	}
	c.Wake()
	return nil
}

// medianVerdict says why member id should stop under the median rule, or
// "" when it should go on: its best value by its latest step is worse than
// the median of the other members' means up to that step, among those
// that reported that far (at least rule.MinMembers of them).
func medianVerdict(id int64, series map[int64][]domain.MetricPoint, obj domain.Objective, rule domain.EarlyStop) string {
	own := series[id]
	if len(own) == 0 {
		return ""
	}
	step := own[len(own)-1].Step
	if step < rule.MinSteps {
		return ""
	}
	best := own[0].Value
	for _, p := range own[1:] {
		if obj.Better(p.Value, best) {
			best = p.Value
		}
	}
	var means []float64
	for other, pts := range series {
		if other == id || len(pts) == 0 || pts[len(pts)-1].Step < step {
			continue
		}
		var sum float64
		n := 0
		for _, p := range pts {
			if p.Step > step {
				break
			}
			sum += p.Value
			n++
		}
		if n > 0 {
			means = append(means, sum/float64(n))
		}
	}
	minMembers := max(rule.MinMembers, 1)
	if len(means) < minMembers {
		return ""
	}
	slices.Sort(means)
	median := means[len(means)/2]
	if len(means)%2 == 0 {
		median = (means[len(means)/2-1] + means[len(means)/2]) / 2
	}
	if !obj.Better(median, best) {
		return ""
	}
	return fmt.Sprintf("its best %s by step %d, %s, is worse than %s, the median of %d other members' means up to that step",
		obj.Metric, step, fmtValue(best), fmtValue(median), len(means))
}

func fmtValue(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
