package service

import (
	"context"
	"errors"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/logs"
	"trainyard/internal/store"
)

// DefaultLogRetention is how long the logs of a finished job are kept when
// the server config does not say.
const DefaultLogRetention = 30 * 24 * time.Hour

// retentionPage is how many finished jobs one store read returns.
const retentionPage = 500

// ExpireLogs deletes the attempt directories (logs, working directories) of
// every job that finished more than keep ago, leaving a record so that
// reading those logs says they expired. Job rows, events and audit records
// are never touched. It returns how many jobs' logs it deleted; keep <= 0
// deletes nothing.
func (s *ArtifactService) ExpireLogs(ctx context.Context, keep time.Duration) (int, error) {
	if keep <= 0 {
		return 0, nil
	}
	now := s.cfg.Clock.Now()
	cutoff := now.Add(-keep)
	n := 0
	var errs []error
	f := store.JobFilter{States: []domain.JobState{domain.JobSucceeded, domain.JobFailed, domain.JobCanceled}, Limit: retentionPage}
	for {
		jobs, err := s.st.ListJobs(ctx, f)
		if err != nil {
			return n, err
		}
		for _, j := range jobs {
			if j.FinishedAt.IsZero() || j.FinishedAt.After(cutoff) {
				continue
			}
			removed, err := s.cfg.Files.ExpireLogs(ctx, j.ID, executor.LogExpiry{DeletedAt: now, Retention: keep})
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if removed {
				n++
			}
		}
		if len(jobs) < retentionPage {
			return n, errors.Join(errs...)
		}
		f.BeforeID = jobs[len(jobs)-1].ID
	}
}

// RunLogRetention expires logs once now and again on every tick until ctx
// ends (the server ticks daily). Failures are logged and retried on the next
// tick; done, if set, is called after each pass (tests wait on it).
func (s *ArtifactService) RunLogRetention(ctx context.Context, keep time.Duration, ticks <-chan time.Time, done func(expired int)) {
	if keep <= 0 {
		return
	}
	for {
		n, err := s.ExpireLogs(ctx, keep)
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("log retention: some logs could not be deleted; retrying at the next pass", "err", err)
		}
		if n > 0 {
			s.cfg.Logger.Info("log retention: deleted the logs of finished jobs", "jobs", n, "retention", logs.RetentionString(keep))
		}
		if done != nil {
			done(n)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
	}
}
