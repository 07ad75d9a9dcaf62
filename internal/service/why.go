package service

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"trainyard/internal/diagnose"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/logs"
	"trainyard/internal/store"
)

// Why explains a job's state from evidence.
type Why struct {
	Job      domain.Job
	Evidence []string
	Hint     string
	// Class and Summary classify a failure (package diagnose); empty for
	// jobs that did not fail.
	Class   diagnose.Class
	Summary string
}

// diagnoseLines is how many lines of a failed attempt's log are searched
// for the error.
const diagnoseLines = 200

// Explain returns why a job is where it is: the scheduler's pending reason
// with its numbers, or the failing attempt's reason, exit code and log tail.
func (s *JobService) Explain(ctx context.Context, p Principal, id int64) (Why, error) {
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
		} else if ahead, err := s.st.ListJobs(ctx, store.JobFilter{States: []domain.JobState{domain.JobQueued}, Ascending: true}); err == nil {
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
		if last != nil && last.State == domain.AttemptPreempted && last.Message != "" {
			// Why it left the slot it had (another job, a budget, an
			// expired compute grant): the pending reason that follows
			// says only what it waits for now.
			msg := last.Message
			if !strings.HasPrefix(msg, "preempted") {
				msg = "preempted: " + msg
			}
			w.Evidence = append(w.Evidence, fmt.Sprintf("attempt %d was %s", last.Number, msg))
		}
		if open, err := s.pools.PoolOpen(ctx, job.Pool); err == nil && open {
			w.Evidence = append(w.Evidence, fmt.Sprintf("pool %s is open (no project has a quota there): every project shares it by fair share, and higher priority goes first", job.Pool))
		}
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
	case domain.JobHeld:
		w.Evidence = append(w.Evidence, "it is held: the scheduler does not consider it until it is released")
		switch job.Reason {
		case domain.ReasonDependency:
			w.Evidence = append(w.Evidence, job.Message)
			w.Hint = "it is queued as soon as what it waits for ends as its after: asks, and fails (DependencyFailed) if that can no longer happen; cancel it to give up"
		case domain.ReasonSweepLimit:
			w.Evidence = append(w.Evidence, job.Message)
			w.Hint = fmt.Sprintf("it is queued when a running member of its sweep ends (sweep max_parallel); see the sweep with: trainyard sweep show %s", job.Spec.Labels[domain.SweepLabel])
		case domain.ReasonBudgetExceeded:
			w.Evidence = append(w.Evidence, job.Message)
			w.Hint = fmt.Sprintf("its project's budget holds it: raise the budget (trainyard budget set %s --amount …), shorten its policy.timeout and submit it again, or wait for the next period; releasing it only holds it again", job.Project)
		case domain.ReasonRetryStorm:
			w.Evidence = append(w.Evidence, job.Message)
			w.Hint = fmt.Sprintf("fix what makes these jobs fail (trainyard logs %d), then: trainyard release %d", id, id)
		default:
			w.Hint = fmt.Sprintf("release it to queue it again: trainyard release %d", id)
		}
	case domain.JobFailed:
		if job.Reason == domain.ReasonDependencyFailed {
			w.Evidence = append(w.Evidence, "it never ran: "+job.Message)
			w.Hint = "fix and re-run the job it depended on, then submit this one again with after: (or inputs' from_job) naming the new run"
			break
		}
		s.explainFailure(ctx, &w, last)
	case domain.JobRunning, domain.JobStarting:
		if last != nil {
			w.Evidence = append(w.Evidence, fmt.Sprintf("attempt %d is %s on %s", last.Number, last.State, orDash(last.Node)))
			w.Evidence = append(w.Evidence, s.runningFlags(ctx, job, *last)...)
			if job.State == domain.JobStarting && s.cfg.Waiting != nil {
				if note := s.cfg.Waiting(id, last.Number); note != "" {
					w.Evidence = append(w.Evidence, note)
					w.Hint = "the cluster cannot start it where the scheduler placed it yet, for the reason above: on Kubernetes, check the executor's tolerations and node selector against the nodes' taints and labels; on Slurm, jobs outside Trainyard may hold the nodes, or the partition, account or QoS limits it (squeue, scontrol show job); compare with trainyard pool show " + job.Pool + ", or cancel it"
				}
			}
		}
		if job.CancelRequested {
			w.Hint = "cancel was requested; the process is being stopped"
		}
	case domain.JobCanceled:
		w.Hint = fmt.Sprintf("run it again from the exact spec it had: trainyard rerun %d", id)
	}
	if last != nil && job.State != domain.JobFailed { // a failure's note is with its facts
		running := !last.State.Terminal()
		if note := s.logLimitNote(ctx, id, last.Number, running); note != "" {
			w.Evidence = append(w.Evidence, note)
		}
	}
	if job.State.Live() {
		if held := s.heldFromPreemption(ctx, id); held != "" {
			w.Evidence = append(w.Evidence, held)
			if w.Hint == "" && job.State != domain.JobQueued {
				w.Hint = "it keeps running: the scheduler does not preempt it until the hold ends"
			}
		}
	}
	if job.Attempts > 1 {
		w.Evidence = append(w.Evidence, fmt.Sprintf("%d attempts so far (policy.retries is %d)", job.Attempts, job.Spec.Policy.Retries))
	}
	if last != nil {
		if note := checkSkipNote(d.Events, last.Number); note != "" { // envcheck.go
			w.Evidence = append(w.Evidence, note)
		}
	}
	w.Evidence = append(w.Evidence, s.resumeNotes(ctx, id, job.Attempts)...)
	w.Evidence = append(w.Evidence, sizingNotes(d.Sizing, s.cfg.Currency)...)
	return w, nil
}

// resumeNotes says which checkpoint the latest attempt resumed from and
// which checkpoints resuming skips, set aside after a failed resume.
func (s *JobService) resumeNotes(ctx context.Context, id int64, latest int) []string {
	recs, err := s.st.ListCheckpoints(ctx, id, false)
	if err != nil {
		return nil
	}
	var out []string
	for _, r := range recs {
		if latest > 0 && r.ResumedBy == latest {
			out = append(out, fmt.Sprintf("attempt %d resumed from checkpoint %s (written by attempt %d)", latest, r.Name, r.Attempt))
		}
	}
	for _, r := range recs {
		if r.Suspect != "" {
			out = append(out, fmt.Sprintf("checkpoint %s is set aside, so resuming skips it: %s", r.Name, r.Suspect))
		}
	}
	return out
}

// heldFromPreemption says until when and why the control loop holds the
// job from preemption, from its firing preemption_thrash alert (stored, so
// every replica can tell), or "" when it is not held or the rule is off.
func (s *JobService) heldFromPreemption(ctx context.Context, id int64) string {
	firing, err := s.st.ListAlerts(ctx, store.AlertFilter{State: domain.AlertFiring, JobID: id})
	if err != nil {
		return ""
	}
	for _, a := range firing {
		if a.Rule == ruleThrash {
			return a.Summary
		}
	}
	return ""
}

// logLimitNote says, when an attempt's log reached its limit, how much of
// it was dropped (so far, while running); "" otherwise. It reads the
// attempt's log directory once.
func (s *JobService) logLimitNote(ctx context.Context, jobID int64, attempt int, running bool) string {
	st, err := s.cfg.Files.LogState(ctx, executor.Ref{JobID: jobID, Attempt: attempt})
	if err != nil || !st.Limited {
		return ""
	}
	limit, dropped := st.Limit, st.Dropped
	lim := "its limit"
	if limit > 0 {
		lim = "its limit of " + logs.HumanSize(limit)
	}
	const fix = "raise policy.log_limit, or print less"
	switch {
	case dropped == 0 && running:
		return fmt.Sprintf("the log of attempt %d reached %s: from here on it keeps its head and only the newest lines (%s)", attempt, lim, fix)
	case running:
		return fmt.Sprintf("the log of attempt %d reached %s: %s between its head and its tail was dropped so far (%s)", attempt, lim, logs.HumanSize(dropped), fix)
	}
	return fmt.Sprintf("the log of attempt %d reached %s: %s between its head and its tail was dropped (%s)", attempt, lim, logs.HumanSize(dropped), fix)
}

// ruleThrash is the alert rule the preemption guard fires (package alerts).
const ruleThrash = "preemption_thrash"

// explainFailure classifies a failed job from its last attempt's exit facts
// and log. The attempt's facts are always evidence; the log lines that
// decided the class follow, or, when no line did, the log's last lines.
func (s *JobService) explainFailure(ctx context.Context, w *Why, last *domain.Attempt) {
	job := w.Job
	ev := diagnose.Evidence{JobID: job.ID, State: job.State, Reason: job.Reason, Message: job.Message,
		Resources: job.Spec.Resources, Env: job.Spec.Env, Entrypoint: job.Spec.Entrypoint}
	if last != nil {
		ev.Attempt, ev.ExitCode, ev.MaxRSS = last.Number, last.ExitCode, last.Usage.MaxRSS
		if last.Reason != "" {
			ev.Reason, ev.Message = last.Reason, last.Message
		}
		ev.Signal = diagnose.SignalFromMessage(ev.Message)
		ev.LogTail, _ = s.tailLines(ctx, job.ID, last.Number, diagnoseLines)
		w.Evidence = append(w.Evidence, attemptFacts(*last)...)
		if e, ok := s.cfg.Files.LogsExpired(ctx, job.ID); ok {
			w.Evidence = append(w.Evidence, "the log expired under the server's log retention ("+logs.RetentionString(e.Retention)+"); the diagnosis rests on the exit facts alone")
		}
		if note := s.logLimitNote(ctx, job.ID, last.Number, false); note != "" {
			w.Evidence = append(w.Evidence, note)
		}
	}
	d := diagnose.Classify(ev)
	w.Class, w.Summary, w.Hint = d.Class, d.Summary, d.Hint
	redundant := ev.ExitCode != nil && ev.Message == fmt.Sprintf("exited with code %d", *ev.ExitCode) // the facts say it
	if ev.Message != "" && !redundant && !strings.Contains(d.Summary, ev.Message) {
		w.Evidence = append(w.Evidence, "exit: "+ev.Message)
	}
	for _, l := range d.Evidence {
		w.Evidence = append(w.Evidence, "log | "+l)
	}
	if len(d.Evidence) == 0 && last != nil {
		if tail := s.logTail(ctx, job.ID, last.Number, 10); tail != "" {
			w.Evidence = append(w.Evidence, tail)
		}
	}
}

// runningFlags points out what looks wrong with a running attempt: no
// progress (stalled, or none since it started), idle GPUs, memory near its
// limit, or training far slower than the job's earlier attempts.
func (s *JobService) runningFlags(ctx context.Context, job domain.Job, a domain.Attempt) []string {
	h, err := s.st.AttemptHealth(ctx, job.ID, a.Number)
	if err != nil || h.StartedAt.IsZero() {
		return nil
	}
	r := diagnose.Running{JobID: job.ID, Attempt: a.Number, Now: s.cfg.Clock.Now(), StartedAt: h.StartedAt,
		LastProgressAt: h.LastProgressAt, FirstProgress: job.Spec.Health.FirstProgress.D(), Stall: job.Spec.Health.Stall.D(),
		GPUs: job.Spec.Resources.GPUs}
	if s.cfg.LatestSample != nil {
		if rs, ok := s.cfg.LatestSample(job.ID, a.Number); ok {
			r.Sample = &rs
		}
	}
	if a.Number > 1 {
		r.Rate, r.EarlierRate = s.stepRates(ctx, job.ID, a.Number)
	}
	var out []string
	for _, f := range diagnose.RunningFlags(r) {
		out = append(out, f.Text)
	}
	return out
}

// rateWindow is how far back an attempt's recent training speed looks.
const rateWindow = 10 * time.Minute

// stepRates returns the training speed of the attempt (over its last
// rateWindow) and the best speed of the job's earlier attempts, in steps
// per second, from one metric series ("loss" when reported, else the first
// key); zeros when unknown.
func (s *JobService) stepRates(ctx context.Context, jobID int64, attempt int) (now, earlier float64) {
	series, err := s.st.QueryMetrics(ctx, jobID, "", 0)
	if err != nil || len(series) == 0 {
		return 0, 0
	}
	key := "loss"
	if _, ok := series[key]; !ok {
		key = slices.Sorted(maps.Keys(series))[0]
	}
	byAttempt := map[int][]domain.MetricPoint{}
	for _, p := range series[key] {
		byAttempt[p.Attempt] = append(byAttempt[p.Attempt], p)
	}
	for n, pts := range byAttempt {
		if n == attempt {
			now = diagnose.StepRate(pts, rateWindow)
		} else if n < attempt {
			earlier = max(earlier, diagnose.StepRate(pts, 0))
		}
	}
	return now, earlier
}

// logTail is the program's last n lines of output (the supervisor's own
// notes left out: the attempt's facts already say them), as one evidence
// entry, or "" when it printed nothing.
func (s *JobService) logTail(ctx context.Context, id int64, attempt, n int) string {
	lines, err := s.tailLines(ctx, id, attempt, n*4)
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
func (s *JobService) queueEntry(ctx context.Context, job domain.Job) (domain.QueueEntry, bool) {
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

// tailLines is the last n lines of an attempt's log, the supervisor's
// included, read through the executor.
func (s *JobService) tailLines(ctx context.Context, id int64, attempt, n int) ([]logs.Line, error) {
	var b bytes.Buffer
	err := s.cfg.Files.Logs(ctx, executor.Ref{JobID: id, Attempt: attempt}, executor.LogQuery{Tail: n, Timestamps: true}, &b)
	if err != nil {
		return nil, err
	}
	var out []logs.Line
	for l := range bytes.Lines(b.Bytes()) {
		if l = bytes.TrimSuffix(l, []byte("\n")); len(l) > 0 {
			out = append(out, logs.ParseLine(l))
		}
	}
	return out, nil
}
