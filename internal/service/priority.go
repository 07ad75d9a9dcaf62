package service

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/scheduler"
	"trainyard/internal/store"
)

// SetPriority changes the priority class of a waiting (queued or held)
// job: the class the scheduler orders its pool's queue by. The spec keeps
// the class the job was submitted with; the job's current one is
// domain.Job.Priority. The new class must be one the job's project may
// use in its pool, by the rule submit applies (the quota's max priority,
// the pool's classes). The change is audited with the class before and
// after, recorded as an event of the job (reason PriorityChanged), and
// wakes the scheduler. Setting the class the job has changes nothing; a
// job that has started or ended cannot change (the class only orders
// waiting jobs). Who may: as for hold (authz.JobPriority).
func (s *JobService) SetPriority(ctx context.Context, p Principal, id int64, prio domain.Priority) (domain.Job, error) {
	if prio.Rank() < 0 {
		msg := fmt.Sprintf("%q is not a priority class; use one of low, normal, high, urgent", prio)
		if prio == "" {
			msg = "is empty; give one of low, normal, high, urgent"
		}
		return domain.Job{}, domain.FieldErrors{{Path: "priority", Message: msg}}
	}
	for i := range 3 {
		job, err := s.st.GetJob(ctx, id)
		if err != nil {
			return domain.Job{}, jobErr(id, err)
		}
		if i == 0 { // a job's project and submitter never change
			if err := s.authorize(ctx, p, authz.JobPriority, jobResource(job)); err != nil {
				return domain.Job{}, err
			}
		}
		old := job.Priority
		if old == "" {
			old = domain.PriorityNormal
		}
		if old == prio {
			return job, nil
		}
		if job.State != domain.JobQueued && job.State != domain.JobHeld {
			return domain.Job{}, notReprioritizable(job)
		}
		if err := s.pools.admitPriority(ctx, job, prio); err != nil {
			return domain.Job{}, err
		}
		rec := s.audited(ctx, p, authz.JobPriority, "job/"+strconv.FormatInt(id, 10),
			map[string]any{"priority": old}, map[string]any{"priority": prio})
		errs, err := s.st.Apply(ctx, []store.Change{{JobID: id, In: []domain.JobState{domain.JobQueued, domain.JobHeld},
			Priority: prio, Reason: domain.ReasonPriorityChanged, Message: fmt.Sprintf("priority %s → %s by %s", old, prio, p.Subject),
			Actor: p.Actor(), At: s.cfg.Clock.Now(), Audit: &rec}})
		if err != nil {
			return domain.Job{}, fmt.Errorf("change the priority of job %d: %w", id, err)
		}
		if errors.Is(errs[0], domain.ErrConflict) {
			continue // it started or changed meanwhile: look again
		}
		if errs[0] != nil {
			return domain.Job{}, jobErr(id, errs[0])
		}
		s.cfg.Wake()
		return s.st.GetJob(ctx, id)
	}
	return domain.Job{}, domain.Errorf(domain.ErrConflict, "job %d kept changing state; try again", id)
}

// notReprioritizable explains why job's priority cannot change now.
func notReprioritizable(job domain.Job) error {
	if job.State.Terminal() {
		return domain.Errorf(domain.ErrConflict, "job %d already %s; a priority only orders waiting (queued or held) jobs", job.ID, job.State)
	}
	return domain.Errorf(domain.ErrConflict, "job %d is %s; a priority change only affects the scheduling of waiting (queued or held) jobs, and this one has been placed already", job.ID, job.State)
}

// admitPriority checks that job's project may use class prio in the
// job's pool, by the rule submit applies (scheduler.AdmitPriority).
func (s *PoolService) admitPriority(ctx context.Context, job domain.Job, prio domain.Priority) error {
	v, err := s.admission(ctx)
	if err != nil {
		return err
	}
	pool, ok := v.pools[job.Pool]
	if !ok {
		return domain.Errorf(domain.ErrConflict, "job %d's pool %s no longer exists; its priority cannot be checked (cancel the job and submit it to another pool)", job.ID, job.Pool)
	}
	now := s.cfg.Clock.Now()
	var quota *domain.Quota
	for _, q := range domain.EffectiveQuotas(v.quotas[job.Project+"/"+job.Pool], v.grants, now) {
		if q.Project == job.Project && q.Pool == job.Pool {
			quota = &q
		}
	}
	msg, above := scheduler.AdmitPriority(pool, quota, v.open(job.Pool, now), job.Project, prio)
	if above {
		msg += ": choose a lower class, or ask an admin to raise the quota's max priority"
	}
	if msg != "" {
		return domain.FieldErrors{{Path: "priority", Message: msg}}
	}
	return nil
}
