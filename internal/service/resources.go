package service

import (
	"context"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
)

// ResourceHistory returns the resource readings kept of one attempt of a
// job (0: its latest), oldest first: CPU, memory and GPU use while it runs
// and for a while after it ended. It is read as the job is (JobRead). Nil
// when none are kept: the attempt was never read, ended long ago, or this
// server samples nothing (Config.SampleHistory is nil).
func (s *JobService) ResourceHistory(ctx context.Context, p Principal, jobID int64, attempt int) ([]domain.ResourceSample, error) {
	job, err := s.st.GetJob(ctx, jobID)
	if err != nil {
		return nil, jobErr(jobID, err)
	}
	if err := s.authorize(ctx, p, authz.JobRead, jobResource(job)); err != nil {
		return nil, err
	}
	if attempt == 0 {
		attempt = job.Attempts
	}
	switch {
	case attempt < 0 || attempt > job.Attempts:
		return nil, domain.Errorf(domain.ErrNotFound, "job %d has no attempt %d (it has %d); see: trainyard show %d", jobID, attempt, job.Attempts, jobID)
	case attempt == 0 || s.cfg.SampleHistory == nil:
		return nil, nil // never started, or nothing sampled
	}
	return s.cfg.SampleHistory(jobID, attempt), nil
}
