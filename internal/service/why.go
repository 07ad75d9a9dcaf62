package service

import (
	"context"
	"fmt"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/logs"
	"trainyard/internal/store"
)

// Why explains a job's state from evidence.
type Why struct {
	Job      domain.Job
	Evidence []string
	Hint     string
}

// Explain returns why a job is where it is: the scheduler's pending reason
// with its numbers, or the failing attempt's reason, exit code and log tail.
func (s *Service) Explain(ctx context.Context, p Principal, id int64) (Why, error) {
	d, err := s.Get(ctx, p, id)
	if err != nil {
		return Why{}, err
	}
	job := d.Job
	w := Why{Job: job}
	var last *domain.Attempt
	if n := len(d.Attempts); n > 0 {
		last = &d.Attempts[n-1]
	}
	switch job.State {
	case domain.JobQueued:
		if e, ok := s.queueEntry(ctx, job); ok {
			w.Evidence = append(w.Evidence, fmt.Sprintf("position %d in pool %s's queue", e.Position, e.Pool))
			if !e.EstimatedStart.IsZero() {
				w.Evidence = append(w.Evidence, fmt.Sprintf("estimated start %s, from the running jobs' time limits",
					e.EstimatedStart.UTC().Format("2006-01-02 15:04:05 UTC")))
			}
		} else if ahead, err := s.cfg.Store.ListJobs(ctx, store.JobFilter{States: []domain.JobState{domain.JobQueued}, Ascending: true}); err == nil {
			n := 0
			for _, j := range ahead {
				if j.ID == id {
					break
				}
				if j.Priority.Rank() >= job.Priority.Rank() {
					n++
				}
			}
			w.Evidence = append(w.Evidence, fmt.Sprintf("%d queued job(s) at the same or higher priority are ahead of it", n))
		}
		w.Evidence = append(w.Evidence, fmt.Sprintf("requests %s", describeResources(job.Spec.Resources)))
		switch job.Reason {
		case domain.ReasonQuotaExceeded:
			w.Hint = fmt.Sprintf("it starts when project %s's other jobs in pool %s finish; an admin can raise the quota: trainyard quota set %s %s ...", job.Project, job.Pool, job.Project, job.Pool)
		case domain.ReasonPreempted:
			w.Hint = "it was preempted and starts again, ahead of its class peers, from its latest checkpoint"
		case domain.ReasonNoCapacity:
			w.Hint = "the request can never fit the inventory; cancel it and resubmit with smaller resources (e.g. --set resources.gpus=1)"
		case domain.ReasonBackoff:
			w.Hint = "a previous attempt failed; it will be retried automatically"
		default:
			w.Hint = "it starts when running jobs free enough resources"
		}
	case domain.JobFailed:
		if last != nil {
			w.Evidence = append(w.Evidence, attemptFacts(*last)...)
			if tail := s.logTail(id, last.Number, 10); tail != "" {
				w.Evidence = append(w.Evidence, tail)
			}
		}
		w.Hint = failureHint(job, last)
	case domain.JobRunning, domain.JobStarting:
		if last != nil {
			w.Evidence = append(w.Evidence, fmt.Sprintf("attempt %d is %s on %s", last.Number, last.State, orDash(last.Node)))
		}
		if job.CancelRequested {
			w.Hint = "cancel was requested; the process is being stopped"
		}
	case domain.JobCanceled:
		w.Hint = "resubmit the same spec to run it again: trainyard submit FILE"
	}
	if job.Attempts > 1 {
		w.Evidence = append(w.Evidence, fmt.Sprintf("%d attempts so far (policy.retries is %d)", job.Attempts, job.Spec.Policy.Retries))
	}
	return w, nil
}

// logTail is the program's last n lines of output (the supervisor's own
// notes left out: the attempt's facts already say them), as one evidence
// entry, or "" when it printed nothing.
func (s *Service) logTail(id int64, attempt, n int) string {
	lines, err := logs.Tail(s.cfg.Logs.LogPath(id, attempt), n*4)
	if err != nil {
		return ""
	}
	var out []string
	for _, l := range lines {
		if l.Stream != logs.System {
			out = append(out, l.Stream+" | "+l.Text)
		}
	}
	if len(out) == 0 {
		return ""
	}
	out = out[max(len(out)-n, 0):]
	return fmt.Sprintf("last %d line(s) of output of attempt %d:\n%s", len(out), attempt, strings.Join(out, "\n"))
}

// attemptFacts are the numbers of an ended attempt: exit code, run time, node.
func attemptFacts(a domain.Attempt) []string {
	var facts []string
	if a.ExitCode != nil {
		facts = append(facts, fmt.Sprintf("attempt %d exited with code %d", a.Number, *a.ExitCode))
	}
	if !a.StartedAt.IsZero() && !a.FinishedAt.IsZero() {
		facts = append(facts, fmt.Sprintf("attempt %d ran for %s on %s", a.Number, domain.FormatDuration(a.FinishedAt.Sub(a.StartedAt).Round(time.Millisecond)), orDash(a.Node)))
	} else if a.StartedAt.IsZero() {
		facts = append(facts, fmt.Sprintf("attempt %d never started its program", a.Number))
	}
	return facts
}

func failureHint(job domain.Job, last *domain.Attempt) string {
	logsCmd := fmt.Sprintf("trainyard logs %d", job.ID)
	if last != nil {
		logsCmd = fmt.Sprintf("trainyard logs %d --attempt %d", job.ID, last.Number)
	}
	switch job.Reason {
	case domain.ReasonEntrypointNotFound:
		return fmt.Sprintf("the program could not be started: check the entrypoint %q is installed in environment %q and on PATH, or give an absolute path", strings.Join(job.Spec.Entrypoint, " "), job.Spec.Env)
	case domain.ReasonOOMKilled:
		return fmt.Sprintf("the process exceeded its memory limit of %s: raise resources.memory or lower the batch size", job.Spec.Resources.Memory)
	case domain.ReasonTimeout:
		return fmt.Sprintf("the attempt ran past policy.timeout (%s): raise it, or make the job re-entrant so it resumes from its checkpoint", job.Spec.Policy.Timeout)
	case domain.ReasonNodeLost:
		return "the machine or its supervisor went away; mark the job reentrant with retries so it is retried automatically"
	default:
		return "read the log for the error: " + logsCmd
	}
}

func describeResources(r domain.Resources) string {
	s := fmt.Sprintf("%g CPUs, %s memory", r.CPUs, r.Memory)
	if r.GPUs > 0 {
		s += fmt.Sprintf(", %d GPUs", r.GPUs)
	}
	if r.Nodes > 1 {
		s += fmt.Sprintf(" on each of %d nodes", r.Nodes)
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// queueEntry is the job's place in the scheduler's last queue, when known.
func (s *Service) queueEntry(ctx context.Context, job domain.Job) (domain.QueueEntry, bool) {
	if s.cfg.Queue == nil {
		return domain.QueueEntry{}, false
	}
	q, err := s.cfg.Queue(ctx, job.Pool)
	if err != nil {
		return domain.QueueEntry{}, false
	}
	for _, e := range q {
		if e.JobID == job.ID {
			return e, true
		}
	}
	return domain.QueueEntry{}, false
}
