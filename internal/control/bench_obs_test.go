package control_test

import (
	"io"
	"log/slog"
	"time"

	"trainyard/internal/alerting"
	"trainyard/internal/alerts"
	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/metrics"
)

// benchObservers tells the metrics and the alerter what the loop does,
// as the server's wiring does (cmd/trainyard).
type benchObservers struct {
	m *metrics.Metrics
	a *alerting.Alerter
}

func (o benchObservers) Pass(took time.Duration) { o.m.Pass(took) }

func (o benchObservers) View(v control.View) {
	active := func(yield func(domain.Job, domain.Attempt) bool) {
		for _, a := range v.Active {
			if !yield(a.Job, a.Attempt) {
				return
			}
		}
	}
	queued := make(map[metrics.PoolProject]int, len(v.Queued))
	for k, n := range v.Queued {
		queued[metrics.PoolProject{Pool: k.Pool, Project: k.Project}] = n
	}
	o.m.View(v.Pools, queued, active)
	entered := make([]alerts.QueuedJob, len(v.Entered))
	for i, q := range v.Entered {
		entered[i] = alerts.QueuedJob{Job: alerts.JobRef{ID: q.ID, Name: q.Name, Project: q.Project, Pool: q.Pool, Owner: q.Submitter, RerunOf: q.RerunOf},
			QueuedSince: q.Since}
	}
	o.a.Queue(entered, v.Left, v.Reset)
	o.a.Active(active)
}

func (o benchObservers) Placed(project, pool string, attempt int, waited time.Duration) {
	o.m.Placed(project, pool, attempt, waited)
}

func (o benchObservers) AttemptEnded(job domain.Job, a domain.Attempt) {
	o.m.AttemptEnded(job.Project, job.Pool, a.State, a.Reason)
	o.a.AttemptEnded(job, a)
}

func (o benchObservers) PreemptionHeld(job domain.Job, h domain.PreemptionHold) {
	o.a.PreemptionHeld(job, h)
}
func (o benchObservers) PreemptionReleased(id int64) { o.a.PreemptionReleased(id) }
func (o benchObservers) LogLimited(job domain.Job, attempt int, limit int64, at time.Time) {
	o.a.LogLimited(job, attempt, limit, at)
}
func (o benchObservers) GrantsExpiring(n []domain.GrantNotice) { o.a.GrantsExpiring(n) }

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
