package alerts

import (
	"fmt"
	"strconv"
	"time"

	"trainyard/internal/domain"
)

// Rule names one alerting rule. Its spelling is part of every dedupe key and
// of the webhook body; it never changes once released.
type Rule string

const (
	RuleQueuedTooLong        Rule = "queued_too_long"
	RuleStartFailure         Rule = "start_failure"
	RuleInterruption         Rule = "interruption"
	RuleStalled              Rule = "stalled"
	RuleIdleGPU              Rule = "idle_gpu"
	RuleMemoryNearLimit      Rule = "memory_near_limit"
	RuleArtifactWriteFailure Rule = "artifact_write_failure"
	RulePreemptionThrash     Rule = "preemption_thrash"
	RuleLogTruncated         Rule = "log_truncated"
	// RuleRunaway fires while an attempt runs far past what the same
	// user's successful runs of the job's name took, without progress.
	RuleRunaway Rule = "runaway"
	// RuleGrantExpiring fires while a running attempt holds capacity only
	// a compute grant that ends soon gives its project.
	RuleGrantExpiring Rule = "grant_expiring"
	// RuleBudgetThreshold is about a project, not a job: Labels.Job is 0.
	RuleBudgetThreshold Rule = "budget_threshold"
	// RuleTest marks the notification Dispatcher.Test sends.
	RuleTest Rule = "test"
)

// Rules lists every alerting rule in a stable order.
func Rules() []Rule {
	return []Rule{RuleQueuedTooLong, RuleStartFailure, RuleInterruption, RuleStalled,
		RuleIdleGPU, RuleMemoryNearLimit, RuleArtifactWriteFailure, RulePreemptionThrash, RuleLogTruncated,
		RuleBudgetThreshold, RuleSpendRate, RuleRunaway, RuleGrantExpiring, RuleWeeklyReport}
}

// eventRule reports whether r fires on an ended attempt (and so resolves when
// the job runs again, finishes well, or resolve_after passes).
func (r Rule) eventRule() bool {
	switch r {
	case RuleStartFailure, RuleInterruption, RuleStalled, RuleArtifactWriteFailure:
		return true
	}
	return false
}

// event reports whether a is an event alert: one of an event rule, or
// the idle_gpu alert of a job its pool's idle stop ended (keyed by the job
// alone, where the condition's key names the attempt).
func (a Alert) event() bool {
	return a.Rule.eventRule() || a.Rule == RuleIdleGPU && a.Key == Key(RuleIdleGPU, a.Labels.Job, 0)
}

// Severity ranks alerts: info < warning < critical.
type Severity string

const (
	SeverityInfo     Severity = "info"
	SeverityWarning  Severity = "warning"
	SeverityCritical Severity = "critical"
)

// Severities lists the severities from lowest to highest.
func Severities() []Severity { return []Severity{SeverityInfo, SeverityWarning, SeverityCritical} }

// Valid reports whether s is a known severity.
func (s Severity) Valid() bool { return s.rank() > 0 }

// AtLeast reports whether s is as severe as min or more.
func (s Severity) AtLeast(min Severity) bool { return s.rank() >= min.rank() }

func (s Severity) rank() int {
	switch s {
	case SeverityInfo:
		return 1
	case SeverityWarning:
		return 2
	case SeverityCritical:
		return 3
	}
	return 0
}

// Status is where an alert stands: firing until resolved. StatusTest marks a
// test notification, which is never stored.
type Status string

const (
	StatusFiring   Status = "firing"
	StatusResolved Status = "resolved"
	StatusTest     Status = "test"
)

// Labels identify what an alert is about. Attempt is 0 for a queued job;
// Job is 0 for an alert about a project (budget_threshold).
type Labels struct {
	Job     int64  `json:"job"`
	JobName string `json:"job_name"`
	Attempt int    `json:"attempt,omitempty"`
	Project string `json:"project"`
	Pool    string `json:"pool"`
	Owner   string `json:"owner"`
}

// Alert is one alert instance. Key is its dedupe key: while an alert with a
// key is firing, the same condition never fires again. The caller persists
// alerts as they are (every field is plain data) and hands the firing ones
// back to Engine.Restore after a restart.
type Alert struct {
	Key      string   `json:"key"`
	Rule     Rule     `json:"rule"`
	Severity Severity `json:"severity"`
	Status   Status   `json:"status"`
	// Summary says what happened and what to do, in one line.
	Summary string `json:"summary"`
	// Resolution says why the alert resolved; empty while firing.
	Resolution string    `json:"resolution,omitempty"`
	Labels     Labels    `json:"labels"`
	FiredAt    time.Time `json:"fired_at"`
	ResolvedAt time.Time `json:"resolved_at,omitzero"`
}

// Transition is an alert that fired or resolved during one Engine.Evaluate;
// Alert.Status tells which. Send each to a Dispatcher and persist it.
type Transition struct {
	Alert
}

// Notification is what a Channel sends: a transition, or a test
// (Alert.Status == StatusTest).
type Notification struct {
	Alert
}

// Key returns the dedupe key of rule for a job, and for an attempt when
// attempt > 0: "stalled/job=42", "idle_gpu/job=42/attempt=2".
func Key(rule Rule, job int64, attempt int) string {
	k := string(rule) + "/job=" + strconv.FormatInt(job, 10)
	if attempt > 0 {
		k += "/attempt=" + strconv.Itoa(attempt)
	}
	return k
}

// JobRef names a job in observations and labels.
type JobRef struct {
	ID      int64
	Name    string
	Project string
	Pool    string
	Owner   string
	// RerunOf is the job this one re-runs (trainyard rerun); 0: none.
	// Seeing a rerun resolves the event alerts of the job it re-runs.
	RerunOf int64
}

// RefOf returns the JobRef of a stored job (its submitter is the owner).
func RefOf(j domain.Job) JobRef {
	return JobRef{ID: j.ID, Name: j.Name, Project: j.Project, Pool: j.Pool, Owner: j.Submitter, RerunOf: j.RerunOf}
}

func (r JobRef) labels(attempt int) Labels {
	return Labels{Job: r.ID, JobName: r.Name, Attempt: attempt, Project: r.Project, Pool: r.Pool, Owner: r.Owner}
}

// title is "job 42 (resnet)", or "job 42" when the name is unknown, or
// "project vision" for an alert about no job.
func (l Labels) title() string {
	if l.Job == 0 && l.Project != "" {
		return "project " + l.Project
	}
	if l.JobName == "" {
		return fmt.Sprintf("job %d", l.Job)
	}
	return fmt.Sprintf("job %d (%s)", l.Job, l.JobName)
}
