package alerting

import (
	"context"
	"slices"
	"time"

	"trainyard/internal/alerts"
)

// expectedRefresh is how long what a submitter's runs of a name took is
// trusted before it is read again: it changes only when one succeeds.
const expectedRefresh = 10 * time.Minute

// expectedRuns is how many of a submitter's latest successful runs of a
// name the expected duration is the p90 of.
const expectedRuns = 20

// runawayEvery is how often at most running attempts are judged for the
// runaway rule: a tenth of a minute per hour of its quiet time (10s at
// the default hour), at least a second. The rule is about hours; the
// alerter wakes at every attempt end, which with many short jobs is many
// times a second, and each judgement reads every running attempt's
// health.
func runawayEvery(quiet time.Duration) time.Duration {
	return max(time.Second, min(10*time.Second, quiet/360))
}

// runKey names a submitter's jobs of one name.
type runKey struct{ submitter, name string }

// expectation is how long a submitter's runs of a name are expected to
// take (0: no successful run to go by), from how many runs, as read at.
type expectation struct {
	d    time.Duration
	runs int
	at   time.Time
}

// runawayFacts fills what the runaway rule judges running attempts by:
// how long each is expected to take, the p90 (nearest rank) of its
// submitter's last expectedRuns successful runs of the same job name,
// read at most every expectedRefresh per name (of a few runs the p90 is
// the longest); and, when one has an expected duration, when each
// started and last reported progress (one read of the active attempts'
// health). An attempt without an expected duration is never a runaway,
// so with none (nor the rule on, nor anything running) the health is not
// read: an alerter woken at every attempt end of many short jobs of new
// names reads nothing.
func (a *Alerter) runawayFacts(ctx context.Context, now time.Time, running []alerts.RunningAttempt) {
	rule := a.cfg.Alerts.Rules.Runaway
	if !rule.On() || len(running) == 0 {
		return
	}
	// Judged a moment ago: leave every attempt unjudged (Expected 0), so
	// none fires and none resolves until the next judgement.
	if last := a.runawayAt; !last.IsZero() && !now.Before(last) && now.Sub(last) < runawayEvery(rule.Quiet.D()) {
		return
	}
	a.runawayAt = now
	live := make(map[runKey]bool, len(running))
	expected := false // whether any attempt has an expected duration
	for i := range running {
		r := &running[i]
		k := runKey{r.Job.Owner, r.Job.Name}
		live[k] = true
		e, ok := a.expected[k]
		if !ok || now.Sub(e.at) >= expectedRefresh || now.Before(e.at) {
			runs, err := a.cfg.Store.RecentRuns(ctx, k.submitter, k.name, expectedRuns)
			if err != nil {
				a.log.Warn("runaway rule: read earlier runs", "submitter", k.submitter, "name", k.name, "err", err)
				continue
			}
			e = expectation{at: now, runs: len(runs), d: p90(runs)}
			a.expected[k] = e
		}
		r.Expected, r.ExpectedRuns = e.d, e.runs
		expected = expected || e.d > 0
	}
	for k := range a.expected { // forget names nothing runs of
		if !live[k] {
			delete(a.expected, k)
		}
	}
	if !expected {
		return
	}
	hs, err := a.cfg.Store.ActiveHealth(ctx)
	if err != nil {
		a.log.Warn("runaway rule skipped this round: read attempt health", "err", err)
		for i := range running { // judged on nothing: none fires, none resolves
			running[i].Expected = 0
		}
		return
	}
	type ref struct {
		job     int64
		attempt int
	}
	health := make(map[ref]int, len(hs))
	for i, h := range hs {
		health[ref{h.JobID, h.Attempt}] = i
	}
	for i := range running {
		r := &running[i]
		if h, ok := health[ref{r.Job.ID, r.Attempt}]; ok {
			r.StartedAt, r.LastProgressAt = hs[h].StartedAt, hs[h].LastProgressAt
		}
	}
}

// p90 is the nearest-rank 90th percentile of ds (0 when empty): the
// smallest value at least 90% of them do not exceed.
func p90(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)*9+9)/10-1] // ceil(0.9 n) - 1
}
