package alerting

import (
	"context"
	"time"

	"trainyard/internal/alerts"
)

// expectedRefresh is how long what a submitter's runs of a name took is
// trusted before it is read again: it changes only when one succeeds.
const expectedRefresh = 10 * time.Minute

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
// when each started and last reported progress (one read of the active
// attempts' health), and how long it is expected to take: the longest of
// its submitter's last successful runs of the same job name (up to
// store.UsageRuns of them; of so few, the nearest-rank p90 is the
// longest), read at most every expectedRefresh per name. With the rule
// off, or nothing running, it reads nothing.
func (a *Alerter) runawayFacts(ctx context.Context, now time.Time, running []alerts.RunningAttempt) {
	if !a.cfg.Alerts.Rules.Runaway.On() || len(running) == 0 {
		return
	}
	hs, err := a.cfg.Store.ActiveHealth(ctx)
	if err != nil {
		a.log.Warn("runaway rule skipped this round: read attempt health", "err", err)
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
	live := make(map[runKey]bool, len(running))
	for i := range running {
		r := &running[i]
		h, ok := health[ref{r.Job.ID, r.Attempt}]
		if !ok {
			continue
		}
		r.StartedAt, r.LastProgressAt = hs[h].StartedAt, hs[h].LastProgressAt
		k := runKey{r.Job.Owner, r.Job.Name}
		live[k] = true
		e, ok := a.expected[k]
		if !ok || now.Sub(e.at) >= expectedRefresh || now.Before(e.at) {
			runs, err := a.cfg.Store.RecentUsage(ctx, k.submitter, k.name)
			if err != nil {
				a.log.Warn("runaway rule: read earlier runs", "submitter", k.submitter, "name", k.name, "err", err)
				continue
			}
			e = expectation{at: now, runs: len(runs)}
			for _, u := range runs {
				e.d = max(e.d, u.Ran)
			}
			a.expected[k] = e
		}
		r.Expected, r.ExpectedRuns = e.d, e.runs
	}
	for k := range a.expected { // forget names nothing runs of
		if !live[k] {
			delete(a.expected, k)
		}
	}
}
