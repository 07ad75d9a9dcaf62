package control

import (
	"context"
	"fmt"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// RetryStorm pauses the retries of a group of similar jobs (one project's
// jobs of one name) once Failures of their attempts failed within Window:
// the job whose failure reaches it, and each of the group's that fails
// while the window still holds that many, is held with reason RetryStorm
// instead of retried, until someone releases it. Zero Failures: off.
type RetryStorm struct {
	Failures int
	Window   time.Duration
}

// DefaultRetryStorm is the server's guard unless configured: 10 failed
// attempts of a project's jobs of one name within 10 minutes.
var DefaultRetryStorm = RetryStorm{Failures: 10, Window: 10 * time.Minute}

// storms counts failed attempts by group and keeps the holds the loop owes.
// Loop goroutine only.
type storms struct {
	cfg      RetryStorm
	failures map[string][]time.Time // by group, oldest first, within the window
	holds    map[int64]string       // job → hold message, applied once its requeue is recorded
}

func newStorms(cfg RetryStorm) *storms {
	return &storms{cfg: cfg, failures: map[string][]time.Time{}, holds: map[int64]string{}}
}

// failed counts a failed attempt of job at and reports whether its retry
// is to be paused, with the hold message.
func (s *storms) failed(job domain.Job, at time.Time) (string, bool) {
	if s.cfg.Failures <= 0 {
		return "", false
	}
	key := job.Project + "/" + job.Name
	ts := s.failures[key]
	cut := 0
	for cut < len(ts) && at.Sub(ts[cut]) >= s.cfg.Window {
		cut++
	}
	ts = append(ts[cut:], at)
	s.failures[key] = ts
	for k, v := range s.failures { // forget quiet groups
		if len(v) > 0 && at.Sub(v[len(v)-1]) >= s.cfg.Window {
			delete(s.failures, k)
		}
	}
	if len(ts) < s.cfg.Failures {
		return "", false
	}
	msg := fmt.Sprintf("retries paused: %d attempts of project %s's jobs named %q failed within %s (a retry storm); fix the cause, then: trainyard release %d",
		len(ts), job.Project, job.Name, domain.FormatDuration(s.cfg.Window), job.ID)
	s.holds[job.ID] = msg
	return msg, true
}

// stormHold is the change that holds a job whose retries a storm paused.
func stormHold(id int64, msg string, at time.Time) store.Change {
	return store.Change{JobID: id, Move: domain.MoveHold().Only(domain.JobQueued),
		Reason: domain.ReasonRetryStorm, Message: msg, Actor: actorScheduler, At: at}
}

// holdPaused applies the holds of jobs whose requeue was just recorded,
// before any pass could start them again (both run on the loop goroutine).
func (c *Controller) holdPaused(ctx context.Context, holds []store.Change) {
	if len(holds) == 0 {
		return
	}
	errs, err := c.cfg.Store.Apply(ctx, holds)
	if err != nil {
		c.log.Error("hold the jobs of a retry storm; they retry instead", "err", err)
		return
	}
	for i, h := range holds {
		if errs[i] != nil {
			c.log.Error("hold a job of a retry storm; it retries instead", "job", h.JobID, "err", errs[i])
			continue
		}
		c.log.Warn("retries paused by a retry storm", "job", h.JobID, "why", h.Message)
	}
}
