package main

import (
	"math"
	"time"

	"trainyard/internal/alerting"
	"trainyard/internal/alerts"
	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/metrics"
	"trainyard/internal/metrics/sample"
)

// observers tells both the Prometheus series and the alerter what the
// control loop does.
type observers struct {
	m *metrics.Metrics
	a *alerting.Alerter
}

func (o observers) Pass(took time.Duration) { o.m.Pass(took) }

// View tells the metrics the pools, the queued counts and the active
// attempts, and the alerter what entered and left the queue and the
// active attempts: each at a cost that follows what changed and what
// runs, not the queue.
func (o observers) View(v control.View) {
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

func (o observers) Placed(project, pool string, attempt int, waited time.Duration) {
	o.m.Placed(project, pool, attempt, waited)
}

func (o observers) AttemptEnded(job domain.Job, a domain.Attempt) {
	o.m.AttemptEnded(job.Project, job.Pool, a.State, a.Reason)
	o.a.AttemptEnded(job, a)
}

func (o observers) PreemptionHeld(job domain.Job, h domain.PreemptionHold) {
	o.a.PreemptionHeld(job, h)
}

func (o observers) PreemptionReleased(jobID int64) { o.a.PreemptionReleased(jobID) }

func (o observers) LogLimited(job domain.Job, attempt int, limit int64, at time.Time) {
	o.a.LogLimited(job, attempt, limit, at)
}

func (o observers) GrantsExpiring(notices []domain.GrantNotice) { o.a.GrantsExpiring(notices) }

// alertSamples turns the sampler's latest readings into the alerter's.
func alertSamples(latest []sample.Sample) []alerting.Sample {
	out := make([]alerting.Sample, 0, len(latest))
	for _, s := range latest {
		if !s.OK {
			continue
		}
		as := alerting.Sample{JobID: s.JobID, Attempt: s.Attempt,
			Sample: alerts.Sample{At: s.At, RSS: s.RSSBytes, MemoryLimit: s.MemoryLimit}}
		for _, g := range s.GPUs {
			u := g.Utilization / 100 // nvidia-smi reports percent
			if math.IsNaN(g.Utilization) {
				u = math.NaN()
			}
			as.GPUs = append(as.GPUs, alerts.GPUSample{Index: g.Index, Utilization: u})
		}
		out = append(out, as)
	}
	return out
}

// latestSample returns one running attempt's latest reading, for why.
func latestSample(s *sample.Sampler) func(int64, int) (domain.ResourceSample, bool) {
	return func(job int64, attempt int) (domain.ResourceSample, bool) {
		for _, x := range s.Latest() {
			if x.JobID != job || x.Attempt != attempt || !x.OK {
				continue
			}
			rs := domain.ResourceSample{At: x.At, CPUSeconds: x.CPUSeconds, RSSBytes: x.RSSBytes, MemoryLimit: x.MemoryLimit}
			for _, g := range x.GPUs {
				if math.IsNaN(g.Utilization) {
					continue
				}
				if rs.GPUUtil == nil {
					rs.GPUUtil = map[int]float64{}
				}
				rs.GPUUtil[g.Index] = g.Utilization / 100
			}
			return rs, true
		}
		return domain.ResourceSample{}, false
	}
}
