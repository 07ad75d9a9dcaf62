package alerts

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"trainyard/internal/domain"
)

// ReasonEnvironmentCheckFailed is the reason of an attempt whose environment
// failed its pre-start check; it counts as a start failure.
const ReasonEnvironmentCheckFailed = domain.Reason("EnvironmentCheckFailed")

// Observation is what the caller saw at Now. Queued and Running are complete
// snapshots: an alert about a job no longer queued, or an attempt no longer
// running, resolves. Ended lists only the attempts that ended since the
// previous Evaluate.
type Observation struct {
	Now time.Time
	// Queued lists every job now in state queued, unless QueueKept.
	Queued []QueuedJob
	// QueueKept says that the queue is the one the engine keeps from
	// QueueChanged, and Queued is ignored: a caller that knows what
	// entered and left the queue tells only that.
	QueueKept bool
	// Running lists every attempt now in state running (not starting), with
	// its latest resource sample if there is one.
	Running []RunningAttempt
	// Ended lists attempts that ended since the previous evaluation.
	Ended []EndedAttempt
	// Succeeded and Canceled list jobs known to have succeeded or been
	// canceled; their event alerts resolve. Passing every job of
	// Engine.EventJobs that is now in such a state is enough.
	Succeeded []int64
	Canceled  []int64
	// Held lists every job now held from preemption (the control loop's
	// preemption guard); a job no longer listed resolves its alert.
	Held []HeldJob
	// LogLimited lists active attempts whose log reached its limit. Each
	// fires log_truncated once; the alert resolves when its attempt is
	// in neither LogLimited nor Running (the attempt ended).
	LogLimited []LimitedLog
	// Budgets lists the spend of every budget in force, when BudgetsSeen:
	// an alert about a budget not listed (or listed with another period)
	// resolves. BudgetsSeen false: budgets were not read, and their alerts
	// stay as they are.
	Budgets     []BudgetUse
	BudgetsSeen bool
	// Reports lists the weekly report due now, when ReportsSeen: it fires
	// once; the report of a week no longer listed resolves quietly.
	Reports     []Report
	ReportsSeen bool
	// Expiring lists every running attempt whose compute grant ends soon
	// and whose end will preempt it, when ExpiringSeen: an alert about an
	// attempt not listed resolves. ExpiringSeen false: not known, and
	// those alerts stay as they are.
	Expiring     []ExpiringGrant
	ExpiringSeen bool
}

// ExpiringGrant is a running attempt that holds capacity only compute
// grant Grant gives its project, which ends at Until.
type ExpiringGrant struct {
	Job     JobRef
	Attempt int
	Grant   int64
	Extra   domain.Limits
	Until   time.Time
}

// LimitedLog is an attempt whose log reached its limit At: the log keeps
// its first half and a rolling tail. Limit is 0 when unknown; Dropped is
// how many bytes were dropped so far (0: none yet, or unknown).
type LimitedLog struct {
	Job     JobRef
	Attempt int
	Limit   int64
	Dropped int64
	At      time.Time
}

// HeldJob is a job held from preemption because it was preempted too often.
type HeldJob struct {
	Job  JobRef
	Hold domain.PreemptionHold
}

// QueuedJob is a job waiting in the queue since QueuedSince (its submit
// time, or when it was queued again after a retry or preemption).
type QueuedJob struct {
	Job         JobRef
	QueuedSince time.Time
}

// RunningAttempt is a running attempt and its latest sample (nil if none
// yet). For runaway: when it started and last reported progress (zero:
// not known, or none yet), and how long it is expected to take (zero:
// unknown) from how many earlier runs.
type RunningAttempt struct {
	Job            JobRef
	Attempt        int
	Sample         *Sample
	StartedAt      time.Time
	LastProgressAt time.Time
	Expected       time.Duration
	ExpectedRuns   int
}

// Sample is one resource reading of a running attempt.
type Sample struct {
	At time.Time
	// RSS and MemoryLimit are in bytes; MemoryLimit 0 means unknown, and
	// then memory_near_limit does not apply.
	RSS         int64
	MemoryLimit int64
	// GPUs holds each assigned GPU's utilisation; a GPU that does not report
	// it is left out or has a NaN Utilization.
	GPUs []GPUSample
}

// GPUSample is one GPU's utilisation, the share of time a kernel ran (0–1).
type GPUSample struct {
	Index       int
	Utilization float64
}

// EndedAttempt is an attempt that ended, and the state its job was left in.
type EndedAttempt struct {
	Job      JobRef
	Attempt  int
	State    domain.AttemptState
	Reason   domain.Reason
	Message  string
	EndedAt  time.Time
	JobState domain.JobState
	// Started says the attempt got as far as running its program.
	Started bool
}

// EndedOf builds an EndedAttempt from a stored job (after the attempt ended)
// and the ended attempt.
func EndedOf(j domain.Job, a domain.Attempt) EndedAttempt {
	return EndedAttempt{Job: RefOf(j), Attempt: a.Number, State: a.State, Reason: a.Reason,
		Message: a.Message, EndedAt: a.FinishedAt, JobState: j.State, Started: !a.StartedAt.IsZero()}
}

// Engine turns observations into alert transitions. It is deterministic: it
// reads no clock, starts no goroutines and does no I/O; the same sequence of
// calls gives the same transitions. It is not safe for concurrent use: call
// it from one loop.
type Engine struct {
	cfg     Config
	active  map[string]Alert     // firing alerts by key
	holding map[string]time.Time // duration conditions: key → true since
	queue   queuedJobs           // the queued jobs (queued.go)
	// idleStopped are the firing idle_gpu alerts of attempts the idle
	// stop ended, so their resolution says so.
	idleStopped map[string]bool
}

// NewEngine returns an engine for cfg, after Defaults and Validate on a copy.
func NewEngine(cfg Config) (*Engine, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Engine{cfg: cfg, active: map[string]Alert{}, holding: map[string]time.Time{}, idleStopped: map[string]bool{},
		queue: newQueued()}, nil
}

// Restore loads alerts that were firing before a restart, so they are neither
// sent again nor lost: they resolve like any other. Alerts not firing are
// ignored. Call it once, before the first Evaluate.
func (e *Engine) Restore(active []Alert) {
	for _, a := range active {
		if a.Status == StatusFiring && a.Key != "" {
			e.active[a.Key] = a
		}
	}
}

// Active returns the firing alerts, sorted by key.
func (e *Engine) Active() []Alert {
	out := make([]Alert, 0, len(e.active))
	for _, a := range e.active {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b Alert) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// EventJobs returns, sorted, the jobs with a firing event alert. The caller
// can look up their state to fill Observation.Succeeded and Canceled.
func (e *Engine) EventJobs() []int64 {
	var ids []int64
	for _, a := range e.active {
		if a.event() && !slices.Contains(ids, a.Labels.Job) {
			ids = append(ids, a.Labels.Job)
		}
	}
	slices.Sort(ids)
	return ids
}

// Evaluate applies one observation and returns the alerts that fired or
// resolved, in a stable order: fired event alerts, then resolutions of event
// alerts, then queued, then running-attempt, then preemption-hold, then
// log-limit, then ending-grant, then budget alerts, each sorted by key.
func (e *Engine) Evaluate(obs Observation) []Transition {
	var out []Transition
	now := obs.Now
	rules := e.cfg.Rules
	if !obs.QueueKept {
		e.queue.set(obs.Queued)
	}

	// Alerts of rules disabled since they fired.
	for _, a := range e.Active() {
		if !e.ruleOn(a.Rule) {
			out = append(out, e.resolve(a.Key, now, "rule "+string(a.Rule)+" was disabled"))
		}
	}

	// Ended attempts fire event alerts.
	ended := slices.Clone(obs.Ended)
	slices.SortStableFunc(ended, func(a, b EndedAttempt) int {
		if c := a.EndedAt.Compare(b.EndedAt); c != 0 {
			return c
		}
		if a.Job.ID != b.Job.ID {
			return cmpInt(a.Job.ID, b.Job.ID)
		}
		return a.Attempt - b.Attempt
	})
	for _, a := range ended {
		rule, sev := e.classify(a)
		if rule == "" || a.JobState == domain.JobSucceeded || a.JobState == domain.JobCanceled {
			continue
		}
		if !a.EndedAt.IsZero() && now.Sub(a.EndedAt) >= e.cfg.ResolveAfter.D() {
			continue // older than resolve_after: it would resolve at once
		}
		key := Key(rule, a.Job.ID, 0)
		if _, firing := e.active[key]; firing {
			continue
		}
		out = append(out, e.fire(Alert{Key: key, Rule: rule, Severity: sev,
			Summary: eventSummary(rule, a), Labels: a.Job.labels(a.Attempt)}, now))
	}

	// Event alerts resolve when the job runs again (or an attempt after
	// the one that fired ended having started), is re-run, succeeds or is
	// canceled, or after resolve_after.
	runningAttempt := map[int64]int{} // job → highest running attempt
	for _, r := range obs.Running {
		runningAttempt[r.Job.ID] = max(runningAttempt[r.Job.ID], r.Attempt)
	}
	finished := map[int64]string{}
	for _, id := range obs.Succeeded {
		finished[id] = "succeeded"
	}
	for _, id := range obs.Canceled {
		finished[id] = "was canceled"
	}
	for _, a := range ended {
		switch a.JobState {
		case domain.JobSucceeded:
			finished[a.Job.ID] = "succeeded"
		case domain.JobCanceled:
			finished[a.Job.ID] = "was canceled"
		}
	}
	startedAttempt := map[int64]int{} // job → highest ended attempt that had started
	for _, a := range ended {
		if a.Started {
			startedAttempt[a.Job.ID] = max(startedAttempt[a.Job.ID], a.Attempt)
		}
	}
	rerunAs := map[int64]int64{} // job → its first rerun seen
	rerun := func(r JobRef) {
		if r.RerunOf != 0 && (rerunAs[r.RerunOf] == 0 || r.ID < rerunAs[r.RerunOf]) {
			rerunAs[r.RerunOf] = r.ID
		}
	}
	for _, r := range e.queue.reruns { // the queued jobs that re-run another
		rerun(r)
	}
	for _, r := range obs.Running {
		rerun(r.Job)
	}
	for _, a := range ended {
		rerun(a.Job)
	}
	for _, a := range e.Active() {
		if !a.event() {
			continue
		}
		job := a.Labels.title()
		switch n, m := runningAttempt[a.Labels.Job], startedAttempt[a.Labels.Job]; {
		case n > a.Labels.Attempt:
			out = append(out, e.resolve(a.Key, now, fmt.Sprintf("%s is running again (attempt %d)", job, n)))
		case m > a.Labels.Attempt:
			out = append(out, e.resolve(a.Key, now, fmt.Sprintf("%s started again (attempt %d)", job, m)))
		case rerunAs[a.Labels.Job] != 0:
			out = append(out, e.resolve(a.Key, now, fmt.Sprintf("%s was re-run as job %d", job, rerunAs[a.Labels.Job])))
		case finished[a.Labels.Job] != "":
			out = append(out, e.resolve(a.Key, now, fmt.Sprintf("%s %s", job, finished[a.Labels.Job])))
		case now.Sub(a.FiredAt) >= e.cfg.ResolveAfter.D():
			out = append(out, e.resolve(a.Key, now, fmt.Sprintf("resolve_after (%s) passed without %s running again", e.cfg.ResolveAfter, job)))
		}
	}

	// Queued too long: only the jobs that came past the threshold since
	// the last evaluation are looked at (the oldest first), not the queue.
	after := rules.QueuedTooLong.After.D()
	if rules.QueuedTooLong.On() {
		past := e.queue.pastDue(now.Add(-after))
		slices.SortFunc(past, func(a, b QueuedJob) int { return cmpInt(a.Job.ID, b.Job.ID) })
		for _, q := range past {
			key := Key(RuleQueuedTooLong, q.Job.ID, 0)
			if _, firing := e.active[key]; firing {
				continue
			}
			l := q.Job.labels(0)
			out = append(out, e.fire(Alert{Key: key, Rule: RuleQueuedTooLong, Severity: rules.QueuedTooLong.Severity,
				Summary: fmt.Sprintf("%s has been queued for %s (over %s) in pool %s, project %s — see `trainyard why %d`",
					l.title(), fmtDur(now.Sub(q.QueuedSince)), fmtDur(after), orDash(l.Pool), orDash(l.Project), l.Job),
				Labels: l}, now))
		}
	}
	for _, a := range e.Active() {
		if a.Rule != RuleQueuedTooLong {
			continue
		}
		if q, ok := e.queue.jobs[a.Labels.Job]; !ok || !rules.QueuedTooLong.On() || q.QueuedSince.IsZero() || now.Sub(q.QueuedSince) < after {
			out = append(out, e.resolve(a.Key, now, a.Labels.title()+" is no longer waiting in the queue"))
		}
	}

	// Duration conditions of running attempts.
	running := slices.Clone(obs.Running)
	slices.SortStableFunc(running, func(a, b RunningAttempt) int {
		if a.Job.ID != b.Job.ID {
			return cmpInt(a.Job.ID, b.Job.ID)
		}
		return a.Attempt - b.Attempt
	})
	seen := map[string]bool{}
	for _, r := range running {
		idleKey := Key(RuleIdleGPU, r.Job.ID, r.Attempt)
		memKey := Key(RuleMemoryNearLimit, r.Job.ID, r.Attempt)
		seen[idleKey], seen[memKey] = true, true
		if rules.Runaway.On() {
			key := Key(RuleRunaway, r.Job.ID, r.Attempt)
			seen[key] = true
			out = e.runaway(out, key, r, now)
		}
		if r.Sample == nil {
			continue // nothing new to judge by: keep the state as it is
		}
		at := r.Sample.At
		if at.IsZero() {
			at = now
		}
		l := r.Job.labels(r.Attempt)
		if rules.IdleGPU.On() {
			idle, known := idleGPUs(r.Sample.GPUs, rules.IdleGPU.Below)
			if known {
				out = e.hold(out, idleKey, len(idle) > 0, at, now, rules.IdleGPU, func(held time.Duration) Alert {
					return Alert{Rule: RuleIdleGPU, Severity: rules.IdleGPU.Severity, Labels: l,
						Summary: fmt.Sprintf("%s attempt %d: %s under %s busy for %s — check the input pipeline, or cancel it to free the GPUs (`trainyard cancel %d`)",
							l.title(), l.Attempt, gpuList(idle), pct(rules.IdleGPU.Below), fmtDur(held), l.Job)}
				}, "GPU utilisation is back above "+pct(rules.IdleGPU.Below))
			}
		}
		if rules.MemoryNearLimit.On() && r.Sample.MemoryLimit > 0 {
			ratio := float64(r.Sample.RSS) / float64(r.Sample.MemoryLimit)
			s := r.Sample
			out = e.hold(out, memKey, ratio > rules.MemoryNearLimit.Above, at, now, rules.MemoryNearLimit, func(held time.Duration) Alert {
				return Alert{Rule: RuleMemoryNearLimit, Severity: rules.MemoryNearLimit.Severity, Labels: l,
					Summary: fmt.Sprintf("%s attempt %d uses %s of its %s memory limit (%s, over %s for %s) and may be OOM-killed — raise resources.memory or lower the batch size",
						l.title(), l.Attempt, domain.ByteSize(s.RSS), domain.ByteSize(s.MemoryLimit), pct(ratio), pct(rules.MemoryNearLimit.Above), fmtDur(held))}
			}, "memory use is back under "+pct(rules.MemoryNearLimit.Above)+" of the limit")
		}
	}
	// The idle_gpu alerts of attempts the idle stop ended, remembered
	// until they resolve: the attempt may still be listed as running in
	// the observation that reports its end.
	for _, a := range ended {
		if k := Key(RuleIdleGPU, a.Job.ID, a.Attempt); a.Reason == domain.ReasonIdle && e.active[k].Key != "" {
			e.idleStopped[k] = true
		}
	}
	for _, a := range e.Active() {
		if (a.Rule == RuleIdleGPU || a.Rule == RuleMemoryNearLimit || a.Rule == RuleRunaway) && !seen[a.Key] && !a.event() {
			why := fmt.Sprintf("attempt %d of %s is no longer running", a.Labels.Attempt, a.Labels.title())
			if e.idleStopped[a.Key] {
				why = fmt.Sprintf("attempt %d of %s was stopped by its pool's idle stop (see %s)", a.Labels.Attempt, a.Labels.title(), Key(RuleIdleGPU, a.Labels.Job, 0))
			}
			out = append(out, e.resolve(a.Key, now, why))
		}
	}
	for k := range e.idleStopped {
		if _, firing := e.active[k]; !firing {
			delete(e.idleStopped, k)
		}
	}
	for key := range e.holding {
		if !seen[key] {
			delete(e.holding, key)
		}
	}

	// Jobs held from preemption.
	held := map[string]bool{}
	if rules.PreemptionThrash.On() {
		jobs := slices.Clone(obs.Held)
		slices.SortStableFunc(jobs, func(a, b HeldJob) int { return cmpInt(a.Job.ID, b.Job.ID) })
		for _, h := range jobs {
			key := Key(RulePreemptionThrash, h.Job.ID, 0)
			held[key] = true
			if _, firing := e.active[key]; firing {
				continue
			}
			l := h.Job.labels(0)
			out = append(out, e.fire(Alert{Key: key, Rule: RulePreemptionThrash, Severity: rules.PreemptionThrash.Severity,
				Summary: thrashSummary(l, h.Hold), Labels: l}, now))
		}
	}
	for _, a := range e.Active() {
		if a.Rule == RulePreemptionThrash && !held[a.Key] {
			out = append(out, e.resolve(a.Key, now, a.Labels.title()+" is no longer held from preemption"))
		}
	}

	// Logs that reached their limit: once per attempt, while it is active.
	live := map[string]bool{}
	for _, r := range obs.Running {
		live[Key(RuleLogTruncated, r.Job.ID, r.Attempt)] = true
	}
	limited := slices.Clone(obs.LogLimited)
	slices.SortStableFunc(limited, func(a, b LimitedLog) int {
		if a.Job.ID != b.Job.ID {
			return cmpInt(a.Job.ID, b.Job.ID)
		}
		return a.Attempt - b.Attempt
	})
	for _, g := range limited {
		key := Key(RuleLogTruncated, g.Job.ID, g.Attempt)
		live[key] = true
		if _, firing := e.active[key]; firing || !rules.LogTruncated.On() {
			continue
		}
		l := g.Job.labels(g.Attempt)
		out = append(out, e.fire(Alert{Key: key, Rule: RuleLogTruncated, Severity: rules.LogTruncated.Severity,
			Summary: truncatedSummary(l, g), Labels: l}, now))
	}
	for _, a := range e.Active() {
		if a.Rule == RuleLogTruncated && !live[a.Key] {
			out = append(out, e.resolve(a.Key, now, fmt.Sprintf("attempt %d of %s is no longer running; its log keeps its head and tail (`trainyard logs %d`)",
				a.Labels.Attempt, a.Labels.title(), a.Labels.Job)))
		}
	}
	out = e.evaluateExpiring(out, obs)
	out = e.evaluateBudgets(out, obs)
	out = e.evaluateSpendRates(out, obs)
	return e.evaluateReports(out, obs)
}

// evaluateExpiring fires grant_expiring once per listed attempt and
// resolves the alerts of attempts no longer listed.
func (e *Engine) evaluateExpiring(out []Transition, obs Observation) []Transition {
	if !obs.ExpiringSeen {
		return out
	}
	now := obs.Now
	listed := map[string]bool{}
	if rule := e.cfg.Rules.GrantExpiring; rule.On() {
		exp := slices.Clone(obs.Expiring)
		slices.SortStableFunc(exp, func(a, b ExpiringGrant) int {
			if a.Job.ID != b.Job.ID {
				return cmpInt(a.Job.ID, b.Job.ID)
			}
			return cmpInt(a.Grant, b.Grant)
		})
		for _, g := range exp {
			key := Key(RuleGrantExpiring, g.Job.ID, g.Attempt)
			if listed[key] {
				continue // one alert per attempt, for the first grant ending
			}
			listed[key] = true
			if _, firing := e.active[key]; firing {
				continue
			}
			l := g.Job.labels(g.Attempt)
			out = append(out, e.fire(Alert{Key: key, Rule: RuleGrantExpiring, Severity: rule.Severity, Labels: l,
				Summary: fmt.Sprintf("%s attempt %d runs on compute grant %d (%s for project %s in pool %s), which expires at %s (in %s): it will be preempted then and wait for the project's quota — save a checkpoint, or ask for more time (`trainyard quota request`)",
					l.title(), g.Attempt, g.Grant, extraText(g.Extra), orDash(l.Project), orDash(l.Pool),
					g.Until.UTC().Format("2006-01-02 15:04:05 UTC"), fmtDur(max(g.Until.Sub(now), 0)))}, now))
		}
	}
	running := map[string]bool{}
	for _, r := range obs.Running {
		running[Key(RuleGrantExpiring, r.Job.ID, r.Attempt)] = true
	}
	for _, a := range e.Active() {
		if a.Rule != RuleGrantExpiring || listed[a.Key] {
			continue
		}
		why := fmt.Sprintf("attempt %d of %s is no longer running", a.Labels.Attempt, a.Labels.title())
		if running[a.Key] {
			why = fmt.Sprintf("%s no longer runs beyond its project's quota on an ending grant", a.Labels.title())
		}
		out = append(out, e.resolve(a.Key, now, why))
	}
	return out
}

// extraText writes what a grant adds: "+4 GPUs, +16 CPUs".
func extraText(l domain.Limits) string {
	var parts []string
	if l.GPUs > 0 {
		parts = append(parts, fmt.Sprintf("+%d GPUs", l.GPUs))
	}
	if l.CPUs > 0 {
		parts = append(parts, fmt.Sprintf("+%g CPUs", l.CPUs))
	}
	if l.Memory > 0 {
		parts = append(parts, "+"+l.Memory.String()+" memory")
	}
	if l.Jobs > 0 {
		parts = append(parts, fmt.Sprintf("+%d jobs", l.Jobs))
	}
	if len(parts) == 0 {
		return "extra capacity"
	}
	return strings.Join(parts, ", ")
}

// runaway fires while the attempt has run past Factor times its expected
// duration without progress for Quiet, and resolves once it progresses
// again (or ends). An attempt whose expected duration is unknown (no
// successful run to go by) is never a runaway.
func (e *Engine) runaway(out []Transition, key string, r RunningAttempt, now time.Time) []Transition {
	rule := e.cfg.Rules.Runaway
	_, firing := e.active[key]
	if r.Expected <= 0 || r.StartedAt.IsZero() {
		return out
	}
	ran := now.Sub(r.StartedAt)
	last := r.StartedAt
	if r.LastProgressAt.After(last) {
		last = r.LastProgressAt
	}
	quiet := now.Sub(last)
	limit := time.Duration(rule.Factor * float64(r.Expected))
	cond := ran > limit && quiet >= rule.Quiet.D()
	switch {
	case cond && !firing:
		l := r.Job.labels(r.Attempt)
		progress := "no training progress reported since it started"
		if r.LastProgressAt.After(r.StartedAt) {
			progress = "no training progress for " + fmtDur(quiet)
		}
		expected := fmt.Sprintf("the %s its user's last successful run of this name took", fmtDur(r.Expected))
		if r.ExpectedRuns > 1 {
			expected = fmt.Sprintf("the %s (p90) of its user's last %d successful runs of this name", fmtDur(r.Expected), r.ExpectedRuns)
		}
		out = append(out, e.fire(Alert{Key: key, Rule: RuleRunaway, Severity: rule.Severity, Labels: l,
			Summary: fmt.Sprintf("%s attempt %d has run %s, over %g× %s, with %s — it may hang: check `trainyard logs %d`, or cancel it (`trainyard cancel %d`)",
				l.title(), l.Attempt, fmtDur(ran), rule.Factor, expected, progress, l.Job, l.Job)}, now))
	case !cond && firing && quiet < rule.Quiet.D():
		out = append(out, e.resolve(key, now, "it reports training progress again"))
	}
	return out
}

// truncatedSummary says whose log reached what limit, what is kept and
// what to do.
func truncatedSummary(l Labels, g LimitedLog) string {
	limit := "its limit"
	kept := "its first half and the newest lines"
	if g.Limit > 0 {
		limit = "its limit of " + humanSize(g.Limit)
		kept = "its first " + humanSize(g.Limit/2) + " and the newest lines"
	}
	dropped := ""
	if g.Dropped > 0 {
		dropped = ", " + humanSize(g.Dropped) + " dropped so far"
	}
	return fmt.Sprintf("%s attempt %d: the log reached %s; only %s are kept%s — lower the job's log volume, or raise policy.log_limit (up to the pool's log_limit); see `trainyard logs %d`",
		l.title(), l.Attempt, limit, kept, dropped, l.Job)
}

// thrashSummary names the held job, how often it was preempted within what
// window and for which jobs, and until when it is held.
func thrashSummary(l Labels, h domain.PreemptionHold) string {
	see := l.Job
	for _, id := range h.For {
		if id != 0 {
			see = id // the first beneficiary: why did it not start?
			break
		}
	}
	return fmt.Sprintf("%s was %s; it is held from preemption until %s — a preemption loop is likely: check the server log and `trainyard why %d`",
		l.title(), h.Cause(), h.Until.UTC().Format("2006-01-02 15:04:05 UTC"), see)
}

// hold tracks a duration condition under key: it fires once the condition has
// held for rule.For, and resolves a firing alert once the condition clears.
func (e *Engine) hold(out []Transition, key string, cond bool, at, now time.Time, rule ThresholdRule, build func(held time.Duration) Alert, cleared string) []Transition {
	if !cond {
		delete(e.holding, key)
		if _, firing := e.active[key]; firing {
			out = append(out, e.resolve(key, now, cleared))
		}
		return out
	}
	if _, firing := e.active[key]; firing {
		return out
	}
	since, ok := e.holding[key]
	if !ok || at.Before(since) {
		since = at
		e.holding[key] = since
	}
	if held := at.Sub(since); held >= rule.For.D() {
		a := build(held)
		a.Key = key
		delete(e.holding, key)
		out = append(out, e.fire(a, now))
	}
	return out
}

// Firing reports whether the alert of key is firing.
func (e *Engine) Firing(key string) bool {
	_, ok := e.active[key]
	return ok
}

func (e *Engine) fire(a Alert, now time.Time) Transition {
	a.Status, a.FiredAt = StatusFiring, now
	e.active[a.Key] = a
	return Transition{a}
}

func (e *Engine) resolve(key string, now time.Time, why string) Transition {
	a := e.active[key]
	delete(e.active, key)
	a.Status, a.ResolvedAt, a.Resolution = StatusResolved, now, why
	return Transition{a}
}

func (e *Engine) ruleOn(r Rule) bool {
	rs := e.cfg.Rules
	switch r {
	case RuleQueuedTooLong:
		return rs.QueuedTooLong.On()
	case RuleStartFailure:
		return rs.StartFailure.On()
	case RuleInterruption:
		return rs.Interruption.On()
	case RuleStalled:
		return rs.Stalled.On()
	case RuleIdleGPU:
		return rs.IdleGPU.On()
	case RuleMemoryNearLimit:
		return rs.MemoryNearLimit.On()
	case RuleArtifactWriteFailure:
		return rs.ArtifactWriteFailure.On()
	case RulePreemptionThrash:
		return rs.PreemptionThrash.On()
	case RuleLogTruncated:
		return rs.LogTruncated.On()
	case RuleBudgetThreshold:
		return rs.BudgetThreshold.On()
	case RuleSpendRate:
		return rs.SpendRate.On()
	case RuleWeeklyReport:
		return rs.WeeklyReport.On()
	case RuleRunaway:
		return rs.Runaway.On()
	case RuleGrantExpiring:
		return rs.GrantExpiring.On()
	}
	return false
}

// classify returns the enabled event rule an ended attempt fires, or "".
func (e *Engine) classify(a EndedAttempt) (Rule, Severity) {
	rs := e.cfg.Rules
	var rule Rule
	var base RuleBase
	switch {
	case a.Reason == domain.ReasonEntrypointNotFound || a.Reason == domain.ReasonLaunchFailed || a.Reason == ReasonEnvironmentCheckFailed:
		rule, base = RuleStartFailure, rs.StartFailure.RuleBase
	case a.Reason == domain.ReasonArtifactWrite:
		rule, base = RuleArtifactWriteFailure, rs.ArtifactWriteFailure.RuleBase
	case a.Reason == domain.ReasonStalled || a.Reason == domain.ReasonHealthCheckFailed:
		rule, base = RuleStalled, rs.Stalled.RuleBase
	case a.Reason == domain.ReasonIdle:
		// The idle stop's own alert, under the idle_gpu rule (its switch
		// and severity), keyed by the job: the attempt's condition alert
		// resolves as the attempt ends, this one says what was done.
		rule, base = RuleIdleGPU, rs.IdleGPU.RuleBase
	case a.State == domain.AttemptPreempted || a.State == domain.AttemptLost ||
		a.Reason == domain.ReasonPreempted || a.Reason == domain.ReasonNodeLost:
		rule, base = RuleInterruption, rs.Interruption.RuleBase
	default:
		return "", ""
	}
	if !base.On() {
		return "", ""
	}
	return rule, base.Severity
}

func eventSummary(rule Rule, a EndedAttempt) string {
	job := a.Job.labels(a.Attempt).title()
	msg := oneLine(a.Message)
	detail := string(a.Reason)
	if msg != "" {
		detail += ": " + msg
	}
	next := fmt.Sprintf("see `trainyard why %d`", a.Job.ID)
	switch a.JobState {
	case domain.JobQueued:
		next = "it is queued to retry; " + next
	case domain.JobFailed:
		next = "the job failed; " + next
	}
	switch rule {
	case RuleStartFailure:
		return fmt.Sprintf("%s failed to start attempt %d: %s — fix the entrypoint or environment and resubmit; %s", job, a.Attempt, detail, next)
	case RuleStalled:
		if a.Reason == domain.ReasonHealthCheckFailed {
			return fmt.Sprintf("%s failed its health check on attempt %d: %s — %s", job, a.Attempt, orReason(msg, a.Reason), next)
		}
		return fmt.Sprintf("%s stalled on attempt %d: %s — %s", job, a.Attempt, orReason(msg, a.Reason), next)
	case RuleInterruption:
		what := "interrupted"
		switch {
		case a.Reason == domain.ReasonPreempted || a.State == domain.AttemptPreempted:
			what = "was preempted"
		case a.Reason == domain.ReasonNodeLost:
			what = "lost its node"
		case a.State == domain.AttemptLost:
			what = "was lost"
		}
		return fmt.Sprintf("%s attempt %d %s: %s — %s", job, a.Attempt, what, detail, next)
	case RuleIdleGPU:
		return fmt.Sprintf("%s was stopped on attempt %d, its GPUs idle: %s — it is not retried; find what starves the GPUs, then rerun it (`trainyard rerun %d`); %s",
			job, a.Attempt, orReason(msg, a.Reason), a.Job.ID, next)
	case RuleArtifactWriteFailure:
		return fmt.Sprintf("%s could not write artifacts on attempt %d: %s — check free space and permissions of its output directory; %s", job, a.Attempt, orReason(msg, a.Reason), next)
	}
	return job + ": " + detail
}

// idleGPUs returns the GPUs under below, and whether any GPU reported a value.
func idleGPUs(gpus []GPUSample, below float64) (idle []int, known bool) {
	for _, g := range gpus {
		if math.IsNaN(g.Utilization) {
			continue
		}
		known = true
		if g.Utilization < below {
			idle = append(idle, g.Index)
		}
	}
	slices.Sort(idle)
	return idle, known
}

func gpuList(idx []int) string {
	s := make([]string, len(idx))
	for i, n := range idx {
		s[i] = fmt.Sprint(n)
	}
	if len(idx) == 1 {
		return "GPU " + s[0] + " was"
	}
	return "GPUs " + strings.Join(s, ",") + " were"
}

func pct(r float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.1f", r*100), "0"), ".") + "%"
}

// humanSize is n bytes to one decimal in the largest binary unit that
// fits: 512MiB, 1.2GiB (as the log's own marker lines write sizes).
func humanSize(n int64) string {
	v, unit := float64(n), "B"
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		if v < 1<<10 {
			break
		}
		v, unit = v/(1<<10), u
	}
	return strings.TrimSuffix(strconv.FormatFloat(v, 'f', 1, 64), ".0") + unit
}

func fmtDur(d time.Duration) string { return domain.FormatDuration(d.Truncate(time.Second)) }

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	const limit = 300
	if r := []rune(s); len(r) > limit {
		s = string(r[:limit]) + "…"
	}
	return s
}

func orReason(msg string, r domain.Reason) string {
	if msg == "" {
		return string(r)
	}
	return msg
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
