// Package observe tells the metrics and the alerter what the control loop
// does: the one control.Observer the server wires, also used by the
// control loop's benchmarks so they measure what the server runs.
package observe

import (
	"time"

	"trainyard/internal/alerting"
	"trainyard/internal/alerts"
	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/metrics"
)

// Observers tells both the Prometheus series and the alerter what the
// control loop does: the server's control.Observer.
type Observers struct {
	M *metrics.Metrics
	A *alerting.Alerter
}

func (o Observers) Pass(took time.Duration) { o.M.Pass(took) }

// View tells the metrics the pools, the queued counts and the active
// attempts, and the alerter what entered and left the queue and the
// active attempts: each at a cost that follows what changed and what
// runs, not the queue.
func (o Observers) View(v control.View) {
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
	o.M.View(v.Pools, queued, active)
	entered := make([]alerts.QueuedJob, len(v.Entered))
	for i, q := range v.Entered {
		entered[i] = alerts.QueuedJob{Job: alerts.JobRef{ID: q.ID, Name: q.Name, Project: q.Project, Pool: q.Pool, Owner: q.Submitter, RerunOf: q.RerunOf},
			QueuedSince: q.Since}
	}
	o.A.Queue(entered, v.Left, v.Reset)
	o.A.Active(active)
}

func (o Observers) Placed(project, pool string, attempt int, waited time.Duration) {
	o.M.Placed(project, pool, attempt, waited)
}

func (o Observers) AttemptEnded(job domain.Job, a domain.Attempt) {
	o.M.AttemptEnded(job.Project, job.Pool, a.State, a.Reason)
	o.A.AttemptEnded(job, a)
}

func (o Observers) PreemptionHeld(job domain.Job, h domain.PreemptionHold) {
	o.A.PreemptionHeld(job, h)
}

func (o Observers) PreemptionReleased(jobID int64) { o.A.PreemptionReleased(jobID) }

func (o Observers) LogLimited(job domain.Job, attempt int, limit int64, at time.Time) {
	o.A.LogLimited(job, attempt, limit, at)
}

func (o Observers) GrantsExpiring(notices []domain.GrantNotice) { o.A.GrantsExpiring(notices) }
