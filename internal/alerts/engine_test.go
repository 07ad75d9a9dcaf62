package alerts

import (
	"math"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func newEngine(t *testing.T, mutate func(*Config)) *Engine {
	t.Helper()
	var cfg Config
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatalf("NewEngine: %v", err)
	}
	return e
}

func job(id int64) JobRef {
	return JobRef{ID: id, Name: "resnet", Project: "vision", Pool: "standard", Owner: "alice"}
}

func at(d time.Duration) time.Time { return t0.Add(d) }

// summarize renders transitions as "status key" lines for comparison.
func summarize(ts []Transition) string {
	var s []string
	for _, t := range ts {
		s = append(s, string(t.Status)+" "+t.Key)
	}
	return strings.Join(s, "; ")
}

func expect(t *testing.T, step string, got []Transition, want string) {
	t.Helper()
	if s := summarize(got); s != want {
		t.Fatalf("%s: transitions = %q, want %q", step, s, want)
	}
}

func TestEventRulesFire(t *testing.T) {
	cases := []struct {
		name     string
		state    domain.AttemptState
		reason   domain.Reason
		msg      string
		key      string
		severity Severity
		summary  string
	}{
		{"entrypoint", domain.AttemptFailed, domain.ReasonEntrypointNotFound, `entrypoint "train.py" not found`,
			"start_failure/job=42", SeverityCritical, "job 42 (resnet) failed to start attempt 2: EntrypointNotFound: entrypoint \"train.py\" not found"},
		{"launch", domain.AttemptFailed, domain.ReasonLaunchFailed, "cannot open the log file", "start_failure/job=42", SeverityCritical, "LaunchFailed"},
		{"envcheck", domain.AttemptFailed, ReasonEnvironmentCheckFailed, "torch missing", "start_failure/job=42", SeverityCritical, "EnvironmentCheckFailed: torch missing"},
		{"preempted", domain.AttemptPreempted, domain.ReasonPreempted, "", "interruption/job=42", SeverityWarning, "job 42 (resnet) attempt 2 was preempted"},
		{"nodelost", domain.AttemptLost, domain.ReasonNodeLost, "node gpu-3 vanished", "interruption/job=42", SeverityWarning, "lost its node: NodeLost: node gpu-3 vanished"},
		{"lost", domain.AttemptLost, domain.ReasonNone, "", "interruption/job=42", SeverityWarning, "attempt 2 was lost"},
		{"stalled", domain.AttemptFailed, domain.ReasonStalled, "no training progress for health.stall (10m)", "stalled/job=42", SeverityCritical,
			"job 42 (resnet) stalled on attempt 2: no training progress for health.stall (10m) — it is queued to retry; see `trainyard why 42`"},
		{"health", domain.AttemptFailed, domain.ReasonHealthCheckFailed, "no progress", "stalled/job=42", SeverityCritical, "failed its health check on attempt 2"},
		{"artifact", domain.AttemptFailed, domain.ReasonArtifactWrite, "disk full", "artifact_write_failure/job=42", SeverityCritical, "could not write artifacts on attempt 2: disk full"},
		{"exitcode", domain.AttemptFailed, domain.ReasonExitCode, "exit 1", "", "", ""},
		{"oom", domain.AttemptFailed, domain.ReasonOOMKilled, "", "", "", ""},
		{"succeeded", domain.AttemptSucceeded, domain.ReasonCompleted, "", "", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEngine(t, nil)
			ts := e.Evaluate(Observation{Now: at(time.Minute), Ended: []EndedAttempt{{
				Job: job(42), Attempt: 2, State: c.state, Reason: c.reason, Message: c.msg,
				EndedAt: at(30 * time.Second), JobState: domain.JobQueued}}})
			if c.key == "" {
				expect(t, "ended", ts, "")
				return
			}
			expect(t, "ended", ts, "firing "+c.key)
			a := ts[0].Alert
			if a.Severity != c.severity || !strings.Contains(a.Summary, c.summary) {
				t.Errorf("alert = %s %q, want severity %s and summary containing %q", a.Severity, a.Summary, c.severity, c.summary)
			}
			want := Labels{Job: 42, JobName: "resnet", Attempt: 2, Project: "vision", Pool: "standard", Owner: "alice"}
			if a.Labels != want || !a.FiredAt.Equal(at(time.Minute)) {
				t.Errorf("labels = %+v fired %v, want %+v fired %v", a.Labels, a.FiredAt, want, at(time.Minute))
			}
		})
	}
}

func TestDisabledRuleDoesNotFire(t *testing.T) {
	off := false
	e := newEngine(t, func(c *Config) { c.Rules.Stalled.Enabled = &off })
	ts := e.Evaluate(Observation{Now: t0, Ended: []EndedAttempt{{Job: job(1), Attempt: 1, State: domain.AttemptFailed,
		Reason: domain.ReasonStalled, EndedAt: t0, JobState: domain.JobFailed}}})
	expect(t, "disabled", ts, "")
}

func TestEventAlertFiresOnceAndResolvesOnce(t *testing.T) {
	e := newEngine(t, nil)
	stall := func(n int, end time.Duration) EndedAttempt {
		return EndedAttempt{Job: job(42), Attempt: n, State: domain.AttemptFailed, Reason: domain.ReasonStalled,
			EndedAt: at(end), JobState: domain.JobQueued}
	}
	expect(t, "first stall", e.Evaluate(Observation{Now: at(time.Minute), Ended: []EndedAttempt{stall(1, 0)}}), "firing stalled/job=42")
	// The same key while firing: a starting attempt that stalls again before running.
	expect(t, "repeat", e.Evaluate(Observation{Now: at(2 * time.Minute), Ended: []EndedAttempt{stall(1, 0)}}), "")
	expect(t, "quiet", e.Evaluate(Observation{Now: at(3 * time.Minute)}), "")
	// The same attempt still running does not resolve it; a newer one does.
	ts := e.Evaluate(Observation{Now: at(4 * time.Minute), Running: []RunningAttempt{{Job: job(42), Attempt: 2}}})
	expect(t, "running again", ts, "resolved stalled/job=42")
	if r := ts[0]; !r.ResolvedAt.Equal(at(4*time.Minute)) || !r.FiredAt.Equal(at(time.Minute)) || r.Resolution != "job 42 (resnet) is running again (attempt 2)" {
		t.Errorf("resolved alert = %+v", r.Alert)
	}
	expect(t, "after resolve", e.Evaluate(Observation{Now: at(5 * time.Minute), Running: []RunningAttempt{{Job: job(42), Attempt: 2}}}), "")
	if len(e.Active()) != 0 {
		t.Errorf("Active = %v, want none", e.Active())
	}
	// A new stall after recovery fires again.
	expect(t, "second stall", e.Evaluate(Observation{Now: at(6 * time.Minute), Ended: []EndedAttempt{stall(2, 5*time.Minute)}}), "firing stalled/job=42")
}

func TestEventAlertResolution(t *testing.T) {
	preempted := EndedAttempt{Job: job(7), Attempt: 1, State: domain.AttemptPreempted, Reason: domain.ReasonPreempted,
		EndedAt: t0, JobState: domain.JobQueued}
	cases := []struct {
		name string
		obs  Observation
		want string // resolution, or "" when it keeps firing
	}{
		{"running again", Observation{Now: at(time.Hour), Running: []RunningAttempt{{Job: job(7), Attempt: 2}}}, "job 7 (resnet) is running again (attempt 2)"},
		{"succeeded", Observation{Now: at(time.Hour), Succeeded: []int64{7}}, "job 7 (resnet) succeeded"},
		{"canceled", Observation{Now: at(time.Hour), Canceled: []int64{7}}, "job 7 (resnet) was canceled"},
		{"ended succeeded", Observation{Now: at(time.Hour), Ended: []EndedAttempt{{Job: job(7), Attempt: 2,
			State: domain.AttemptSucceeded, Reason: domain.ReasonCompleted, EndedAt: at(time.Hour), JobState: domain.JobSucceeded}}}, "job 7 (resnet) succeeded"},
		{"other job", Observation{Now: at(time.Hour), Succeeded: []int64{8}, Running: []RunningAttempt{{Job: job(8), Attempt: 3}}}, ""},
		{"started and ended", Observation{Now: at(time.Hour), Ended: []EndedAttempt{{Job: job(7), Attempt: 2, State: domain.AttemptFailed,
			Reason: "ExitedNonZero", EndedAt: at(time.Hour), JobState: domain.JobFailed, Started: true}}}, "job 7 (resnet) started again (attempt 2)"},
		{"ended without starting", Observation{Now: at(time.Hour), Ended: []EndedAttempt{{Job: job(7), Attempt: 2, State: domain.AttemptFailed,
			Reason: "ExitedNonZero", EndedAt: at(time.Hour), JobState: domain.JobFailed}}}, ""},
		{"re-run queued", Observation{Now: at(time.Hour), Queued: []QueuedJob{{Job: JobRef{ID: 9, RerunOf: 7}, QueuedSince: at(time.Hour)}}}, "job 7 (resnet) was re-run as job 9"},
		{"re-run ended", Observation{Now: at(time.Hour), Ended: []EndedAttempt{{Job: JobRef{ID: 9, RerunOf: 7}, Attempt: 1, State: domain.AttemptSucceeded,
			EndedAt: at(time.Hour), JobState: domain.JobSucceeded, Started: true}}}, "job 7 (resnet) was re-run as job 9"},
		{"re-run of another job", Observation{Now: at(time.Hour), Running: []RunningAttempt{{Job: JobRef{ID: 9, RerunOf: 8}, Attempt: 1}}}, ""},
		{"before resolve_after", Observation{Now: at(24*time.Hour - time.Second)}, ""},
		{"resolve_after", Observation{Now: at(24 * time.Hour)}, "resolve_after (24h) passed without job 7 (resnet) running again"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEngine(t, nil)
			expect(t, "fire", e.Evaluate(Observation{Now: t0, Ended: []EndedAttempt{preempted}}), "firing interruption/job=7")
			ts := e.Evaluate(c.obs)
			if c.want == "" {
				expect(t, "keep", ts, "")
				if len(e.Active()) != 1 {
					t.Fatalf("Active = %v, want the interruption alert", e.Active())
				}
				return
			}
			expect(t, "resolve", ts, "resolved interruption/job=7")
			if ts[0].Resolution != c.want {
				t.Errorf("resolution = %q, want %q", ts[0].Resolution, c.want)
			}
		})
	}
}

func TestFailedJobKeepsAlertUntilResolveAfter(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.ResolveAfter = domain.Duration(2 * time.Hour) })
	end := EndedAttempt{Job: job(5), Attempt: 3, State: domain.AttemptFailed, Reason: domain.ReasonArtifactWrite,
		Message: "write /out: no space left on device", EndedAt: t0, JobState: domain.JobFailed}
	ts := e.Evaluate(Observation{Now: t0, Ended: []EndedAttempt{end}})
	expect(t, "fire", ts, "firing artifact_write_failure/job=5")
	if !strings.Contains(ts[0].Summary, "the job failed; see `trainyard why 5`") {
		t.Errorf("summary %q does not say the job failed", ts[0].Summary)
	}
	expect(t, "1h later", e.Evaluate(Observation{Now: at(time.Hour)}), "")
	expect(t, "2h later", e.Evaluate(Observation{Now: at(2 * time.Hour)}), "resolved artifact_write_failure/job=5")
}

func TestStaleOrFinishedEndingsDoNotFire(t *testing.T) {
	e := newEngine(t, nil)
	ts := e.Evaluate(Observation{Now: at(48 * time.Hour), Ended: []EndedAttempt{
		{Job: job(1), Attempt: 1, State: domain.AttemptLost, EndedAt: t0, JobState: domain.JobQueued},
		{Job: job(2), Attempt: 1, State: domain.AttemptPreempted, Reason: domain.ReasonPreempted, EndedAt: at(48 * time.Hour), JobState: domain.JobCanceled},
	}})
	expect(t, "stale and canceled", ts, "")
}

// The queue the engine keeps from what entered and left it judges as a
// whole queue would: jobs fire once past the threshold, oldest or not, a
// job that leaves resolves, one queued again waits afresh, and a re-run
// in the queue resolves its original's event alert.
func TestQueuedTooLongFromChanges(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.Rules.QueuedTooLong.After = domain.Duration(30 * time.Minute) })
	kept := func(d time.Duration) Observation { return Observation{Now: at(d), QueueKept: true} }
	e.QueueChanged([]QueuedJob{{Job: job(10), QueuedSince: at(20 * time.Minute)}, {Job: job(9), QueuedSince: t0}, {Job: job(11)}}, nil)
	expect(t, "29m", e.Evaluate(kept(29*time.Minute)), "")
	expect(t, "30m", e.Evaluate(kept(30*time.Minute)), "firing queued_too_long/job=9")
	expect(t, "40m", e.Evaluate(kept(40*time.Minute)), "")
	e.QueueChanged([]QueuedJob{{Job: job(12), QueuedSince: at(5 * time.Minute)}}, nil) // told late: past already
	expect(t, "50m", e.Evaluate(kept(50*time.Minute)), "firing queued_too_long/job=10; firing queued_too_long/job=12")
	// Job 9 left; job 10 ran and is queued again (a retry); 12 stays.
	e.QueueChanged([]QueuedJob{{Job: job(10), QueuedSince: at(51 * time.Minute)}}, []int64{9, 404})
	expect(t, "51m", e.Evaluate(kept(51*time.Minute)), "resolved queued_too_long/job=10; resolved queued_too_long/job=9")
	if e.Queued(9) || !e.Queued(10) || !e.Queued(11) {
		t.Errorf("queued: 9 %v, 10 %v, 11 %v; want false, true, true", e.Queued(9), e.Queued(10), e.Queued(11))
	}
	expect(t, "81m", e.Evaluate(kept(81*time.Minute)), "firing queued_too_long/job=10")
	// A full observation replaces the kept queue.
	expect(t, "full", e.Evaluate(Observation{Now: at(82 * time.Minute), Queued: []QueuedJob{{Job: job(12), QueuedSince: at(5 * time.Minute)}}}),
		"resolved queued_too_long/job=10")

	// A stalled job's alert resolves once its re-run is queued.
	e = newEngine(t, nil)
	e.Evaluate(Observation{Now: t0, QueueKept: true, Ended: []EndedAttempt{{Job: job(7), Attempt: 1, State: domain.AttemptFailed,
		Reason: domain.ReasonStalled, EndedAt: t0, JobState: domain.JobFailed}}})
	rerun := job(8)
	rerun.RerunOf = 7
	e.QueueChanged([]QueuedJob{{Job: rerun, QueuedSince: at(time.Minute)}}, nil)
	expect(t, "re-run", e.Evaluate(kept(time.Minute)), "resolved stalled/job=7")
}

func TestFireAndResolveInOneEvaluation(t *testing.T) {
	e := newEngine(t, nil)
	ts := e.Evaluate(Observation{Now: at(time.Minute),
		Ended:   []EndedAttempt{{Job: job(3), Attempt: 1, State: domain.AttemptLost, Reason: domain.ReasonNodeLost, EndedAt: t0, JobState: domain.JobQueued}},
		Running: []RunningAttempt{{Job: job(3), Attempt: 2}}})
	expect(t, "both", ts, "firing interruption/job=3; resolved interruption/job=3")
}

func TestQueuedTooLong(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.Rules.QueuedTooLong.After = domain.Duration(30 * time.Minute) })
	q := []QueuedJob{{Job: job(9), QueuedSince: t0}, {Job: job(10), QueuedSince: at(20 * time.Minute)}}
	expect(t, "29m", e.Evaluate(Observation{Now: at(29 * time.Minute), Queued: q}), "")
	ts := e.Evaluate(Observation{Now: at(30 * time.Minute), Queued: q})
	expect(t, "30m", ts, "firing queued_too_long/job=9")
	want := "job 9 (resnet) has been queued for 30m (over 30m) in pool standard, project vision — see `trainyard why 9`"
	if ts[0].Summary != want || ts[0].Labels.Attempt != 0 || ts[0].Severity != SeverityWarning {
		t.Errorf("alert = %+v, want summary %q", ts[0].Alert, want)
	}
	expect(t, "40m", e.Evaluate(Observation{Now: at(40 * time.Minute), Queued: q}), "")
	expect(t, "50m", e.Evaluate(Observation{Now: at(50 * time.Minute), Queued: q}), "firing queued_too_long/job=10")
	// Job 9 started; job 10 is still waiting.
	ts = e.Evaluate(Observation{Now: at(55 * time.Minute), Queued: q[1:]})
	expect(t, "job 9 left", ts, "resolved queued_too_long/job=9")
	if ts[0].Resolution != "job 9 (resnet) is no longer waiting in the queue" {
		t.Errorf("resolution = %q", ts[0].Resolution)
	}
	expect(t, "queue empty", e.Evaluate(Observation{Now: at(56 * time.Minute)}), "resolved queued_too_long/job=10")
	expect(t, "nothing left", e.Evaluate(Observation{Now: at(57 * time.Minute)}), "")
}

func sample(at time.Time, rss, limit int64, utils ...float64) *Sample {
	s := &Sample{At: at, RSS: rss, MemoryLimit: limit}
	for i, u := range utils {
		s.GPUs = append(s.GPUs, GPUSample{Index: i, Utilization: u})
	}
	return s
}

func TestIdleGPUHoldsForBeforeFiring(t *testing.T) {
	e := newEngine(t, nil) // below 0.05 for 15m
	run := func(now time.Duration, utils ...float64) []Transition {
		return e.Evaluate(Observation{Now: at(now), Running: []RunningAttempt{{Job: job(42), Attempt: 2,
			Sample: sample(at(now), 1, 0, utils...)}}})
	}
	expect(t, "idle starts", run(0, 0.01, 0.9), "")
	expect(t, "14m59s", run(15*time.Minute-time.Second, 0.02, 0.9), "")
	// A busy sample resets the hold.
	expect(t, "busy", run(15*time.Minute, 0.5, 0.9), "")
	expect(t, "idle again", run(16*time.Minute, 0.0, 0.9), "")
	expect(t, "30m59s", run(31*time.Minute-time.Second, 0.0, 0.9), "")
	ts := run(31*time.Minute, 0.0, 0.01)
	expect(t, "held 15m", ts, "firing idle_gpu/job=42/attempt=2")
	want := "job 42 (resnet) attempt 2: GPUs 0,1 were under 5% busy for 15m — check the input pipeline, or cancel it to free the GPUs (`trainyard cancel 42`)"
	if ts[0].Summary != want {
		t.Errorf("summary = %q, want %q", ts[0].Summary, want)
	}
	expect(t, "still idle", run(40*time.Minute, 0.0, 0.0), "")
	// NaN (not reported) tells nothing: the alert stays.
	expect(t, "unknown", run(41*time.Minute, math.NaN()), "")
	ts = run(42*time.Minute, 0.3, 0.2)
	expect(t, "busy again", ts, "resolved idle_gpu/job=42/attempt=2")
	if ts[0].Resolution != "GPU utilisation is back above 5%" {
		t.Errorf("resolution = %q", ts[0].Resolution)
	}
	expect(t, "stays resolved", run(43*time.Minute, 0.3, 0.2), "")
}

func TestMemoryNearLimit(t *testing.T) {
	e := newEngine(t, nil) // above 0.9 for 2m
	const gib = 1 << 30
	run := func(now time.Duration, rss int64, s bool) []Transition {
		r := RunningAttempt{Job: job(42), Attempt: 1}
		if s {
			r.Sample = sample(at(now), rss, 32*gib)
		}
		return e.Evaluate(Observation{Now: at(now), Running: []RunningAttempt{r}})
	}
	expect(t, "90% is not above", run(0, 32*gib*9/10, true), "")
	expect(t, "over", run(time.Minute, 31*gib, true), "")
	expect(t, "no sample", run(2*time.Minute, 0, false), "")
	ts := run(3*time.Minute, 31*gib, true)
	expect(t, "held 2m", ts, "firing memory_near_limit/job=42/attempt=1")
	want := "job 42 (resnet) attempt 1 uses 31GiB of its 32GiB memory limit (96.9%, over 90% for 2m) and may be OOM-killed — raise resources.memory or lower the batch size"
	if ts[0].Summary != want {
		t.Errorf("summary = %q, want %q", ts[0].Summary, want)
	}
	expect(t, "still high", run(4*time.Minute, 32*gib, true), "")
	// The attempt ended: the alert resolves.
	ts = e.Evaluate(Observation{Now: at(5 * time.Minute)})
	expect(t, "ended", ts, "resolved memory_near_limit/job=42/attempt=1")
	if ts[0].Resolution != "attempt 1 of job 42 (resnet) is no longer running" {
		t.Errorf("resolution = %q", ts[0].Resolution)
	}
}

func TestShortHoldAndUnknownLimit(t *testing.T) {
	e := newEngine(t, func(c *Config) {
		c.Rules.IdleGPU.For = domain.Duration(time.Second)
		c.Rules.MemoryNearLimit.For = domain.Duration(time.Second)
	})
	r := func(now time.Duration) []Transition {
		// RSS far above a limit of 0 (unknown): no memory alert.
		return e.Evaluate(Observation{Now: at(now), Running: []RunningAttempt{{Job: job(1), Attempt: 1, Sample: sample(at(now), 1<<40, 0, 0)}}})
	}
	expect(t, "first", r(0), "")
	expect(t, "after 1s", r(time.Second), "firing idle_gpu/job=1/attempt=1")
}

func TestRestoreDoesNotResend(t *testing.T) {
	e := newEngine(t, nil)
	q := []QueuedJob{{Job: job(9), QueuedSince: t0}}
	run := RunningAttempt{Job: job(4), Attempt: 1, Sample: sample(at(3*time.Hour), 1, 0, 0.0)}
	expect(t, "idle starts", e.Evaluate(Observation{Now: at(time.Hour), Running: []RunningAttempt{{Job: job(4), Attempt: 1, Sample: sample(at(time.Hour), 1, 0, 0.0)}}}), "")
	expect(t, "fire", e.Evaluate(Observation{Now: at(2 * time.Hour), Queued: q, Running: []RunningAttempt{{Job: job(4), Attempt: 1, Sample: sample(at(2*time.Hour), 1, 0, 0.0)}},
		Ended: []EndedAttempt{{Job: job(5), Attempt: 1, State: domain.AttemptFailed, Reason: domain.ReasonStalled, EndedAt: at(time.Hour), JobState: domain.JobFailed}}}),
		"firing stalled/job=5; firing queued_too_long/job=9; firing idle_gpu/job=4/attempt=1")
	saved := e.Active()

	// A new engine after a restart, given the same world.
	e2 := newEngine(t, nil)
	e2.Restore(append(saved, Alert{Key: "x", Status: StatusResolved}))
	if got := e2.Active(); len(got) != 3 || got[0].Key != "idle_gpu/job=4/attempt=1" || got[1].Key != "queued_too_long/job=9" || got[2].Key != "stalled/job=5" {
		t.Fatalf("Active after Restore = %v", got)
	}
	if ids := e2.EventJobs(); len(ids) != 1 || ids[0] != 5 {
		t.Errorf("EventJobs = %v, want [5]", ids)
	}
	expect(t, "same world", e2.Evaluate(Observation{Now: at(3 * time.Hour), Queued: q, Running: []RunningAttempt{run},
		Ended: []EndedAttempt{{Job: job(5), Attempt: 1, State: domain.AttemptFailed, Reason: domain.ReasonStalled, EndedAt: at(time.Hour), JobState: domain.JobFailed}}}), "")
	ts := e2.Evaluate(Observation{Now: at(4 * time.Hour), Succeeded: []int64{5}})
	expect(t, "all clear", ts, "resolved stalled/job=5; resolved queued_too_long/job=9; resolved idle_gpu/job=4/attempt=1")
	if !ts[0].FiredAt.Equal(at(2 * time.Hour)) {
		t.Errorf("restored FiredAt = %v, want %v", ts[0].FiredAt, at(2*time.Hour))
	}
}

func TestDisablingRuleResolvesRestoredAlert(t *testing.T) {
	off := false
	e := newEngine(t, func(c *Config) { c.Rules.QueuedTooLong.Enabled = &off })
	e.Restore([]Alert{{Key: "queued_too_long/job=9", Rule: RuleQueuedTooLong, Status: StatusFiring, Labels: Labels{Job: 9}}})
	ts := e.Evaluate(Observation{Now: t0, Queued: []QueuedJob{{Job: job(9), QueuedSince: t0.Add(-48 * time.Hour)}}})
	expect(t, "disabled", ts, "resolved queued_too_long/job=9")
	if ts[0].Resolution != "rule queued_too_long was disabled" {
		t.Errorf("resolution = %q", ts[0].Resolution)
	}
}

func TestEvaluateIsDeterministic(t *testing.T) {
	obs := Observation{Now: at(2 * time.Hour),
		Queued: []QueuedJob{{Job: job(3), QueuedSince: t0}, {Job: job(1), QueuedSince: t0}, {Job: job(2), QueuedSince: t0}},
		Ended: []EndedAttempt{
			{Job: job(8), Attempt: 1, State: domain.AttemptLost, EndedAt: at(time.Hour), JobState: domain.JobQueued},
			{Job: job(6), Attempt: 1, State: domain.AttemptFailed, Reason: domain.ReasonLaunchFailed, EndedAt: at(time.Hour), JobState: domain.JobFailed},
		}}
	want := "firing start_failure/job=6; firing interruption/job=8; firing queued_too_long/job=1; firing queued_too_long/job=2; firing queued_too_long/job=3"
	for i := 0; i < 5; i++ {
		expect(t, "run", newEngine(t, nil).Evaluate(obs), want)
	}
}

func TestKeyAndRefOf(t *testing.T) {
	if k := Key(RuleIdleGPU, 42, 2); k != "idle_gpu/job=42/attempt=2" {
		t.Errorf("Key = %q", k)
	}
	if k := Key(RuleStalled, 42, 0); k != "stalled/job=42" {
		t.Errorf("Key = %q", k)
	}
	j := domain.Job{ID: 4, Name: "n", Project: "p", Pool: "q", Submitter: "bob", State: domain.JobQueued, RerunOf: 3}
	a := domain.Attempt{JobID: 4, Number: 2, State: domain.AttemptLost, Reason: domain.ReasonNodeLost, Message: "m", FinishedAt: t0,
		StartedAt: t0.Add(-time.Minute)}
	got := EndedOf(j, a)
	want := EndedAttempt{Job: JobRef{ID: 4, Name: "n", Project: "p", Pool: "q", Owner: "bob", RerunOf: 3}, Attempt: 2,
		State: domain.AttemptLost, Reason: domain.ReasonNodeLost, Message: "m", EndedAt: t0, JobState: domain.JobQueued, Started: true}
	if got != want {
		t.Errorf("EndedOf = %+v, want %+v", got, want)
	}
}

// A job held from preemption fires one alert naming it, how often it was
// preempted within what window, for which jobs and until when; the alert
// resolves once the job is no longer held.
func TestPreemptionThrash(t *testing.T) {
	e := newEngine(t, nil)
	hold := domain.PreemptionHold{JobID: 42, Count: 4, Window: 30 * time.Minute, At: t0, Until: at(time.Hour), For: []int64{7, 9}}
	held := []HeldJob{{Job: job(42), Hold: hold}}
	ts := e.Evaluate(Observation{Now: at(time.Second), Held: held})
	expect(t, "held", ts, "firing preemption_thrash/job=42")
	want := "job 42 (resnet) was preempted 4 times in 30m, for jobs 7, 9; it is held from preemption until 2025-03-01 13:00:00 UTC" +
		" — a preemption loop is likely: check the server log and `trainyard why 7`"
	if a := ts[0]; a.Summary != want || a.Severity != SeverityWarning || a.Labels.Job != 42 || a.Labels.Project != "vision" {
		t.Errorf("alert = %+v, want summary %q", a.Alert, want)
	}
	expect(t, "still held", e.Evaluate(Observation{Now: at(time.Minute), Held: held}), "")
	other := HeldJob{Job: job(43), Hold: domain.PreemptionHold{JobID: 43, Count: 5, Window: time.Hour, Until: at(2 * time.Hour)}}
	ts = e.Evaluate(Observation{Now: at(2 * time.Minute), Held: append(held, other)})
	expect(t, "another held", ts, "firing preemption_thrash/job=43")
	if !strings.Contains(ts[0].Summary, "was preempted 5 times in 1h; it is held") || !strings.Contains(ts[0].Summary, "`trainyard why 43`") {
		t.Errorf("without known beneficiaries: %q", ts[0].Summary)
	}
	ts = e.Evaluate(Observation{Now: at(time.Hour), Held: []HeldJob{other}})
	expect(t, "hold ended", ts, "resolved preemption_thrash/job=42")
	if ts[0].Resolution != "job 42 (resnet) is no longer held from preemption" {
		t.Errorf("resolution = %q", ts[0].Resolution)
	}
	expect(t, "held again", e.Evaluate(Observation{Now: at(2 * time.Hour), Held: held}), "firing preemption_thrash/job=42; resolved preemption_thrash/job=43")

	off := false
	e = newEngine(t, func(c *Config) { c.Rules.PreemptionThrash.Enabled = &off })
	expect(t, "disabled", e.Evaluate(Observation{Now: t0, Held: held}), "")
}

// A start failure of a job that failed for good resolves when the job is
// re-run, not 24 h later.
func TestStartFailureResolvesOnRerun(t *testing.T) {
	e := newEngine(t, nil)
	end := EndedAttempt{Job: job(7), Attempt: 1, State: domain.AttemptFailed, Reason: domain.ReasonEntrypointNotFound,
		EndedAt: t0, JobState: domain.JobFailed}
	expect(t, "fire", e.Evaluate(Observation{Now: t0, Ended: []EndedAttempt{end}}), "firing start_failure/job=7")
	expect(t, "later", e.Evaluate(Observation{Now: at(time.Hour)}), "")
	ts := e.Evaluate(Observation{Now: at(2 * time.Hour), Running: []RunningAttempt{{Job: JobRef{ID: 12, Name: "resnet", RerunOf: 7}, Attempt: 1}}})
	expect(t, "re-run", ts, "resolved start_failure/job=7")
	if ts[0].Resolution != "job 7 (resnet) was re-run as job 12" {
		t.Errorf("resolution = %q", ts[0].Resolution)
	}
}

// An attempt whose log reached its limit fires log_truncated once, naming
// the job, the limit and what was dropped, and saying what to do; the
// alert stays while the attempt runs and resolves when it ends.
func TestLogTruncated(t *testing.T) {
	e := newEngine(t, nil)
	g := LimitedLog{Job: job(42), Attempt: 2, Limit: 1 << 30, At: t0}
	running := []RunningAttempt{{Job: job(42), Attempt: 2}}
	ts := e.Evaluate(Observation{Now: at(time.Second), Running: running, LogLimited: []LimitedLog{g}})
	expect(t, "limited", ts, "firing log_truncated/job=42/attempt=2")
	want := "job 42 (resnet) attempt 2: the log reached its limit of 1GiB; only its first 512MiB and the newest lines are kept" +
		" — lower the job's log volume, or raise policy.log_limit (up to the pool's log_limit); see `trainyard logs 42`"
	if a := ts[0]; a.Summary != want || a.Severity != SeverityWarning || a.Labels.Attempt != 2 || a.Labels.Owner != "alice" {
		t.Errorf("alert = %+v, want summary %q", a.Alert, want)
	}
	// Reported again (a reattach), or listed only as running: no new alert.
	expect(t, "again", e.Evaluate(Observation{Now: at(time.Minute), Running: running, LogLimited: []LimitedLog{g}}), "")
	expect(t, "running", e.Evaluate(Observation{Now: at(2 * time.Minute), Running: running}), "")
	// Another attempt of the same job is another alert; what was dropped
	// so far is named when known.
	g3 := LimitedLog{Job: job(42), Attempt: 3, Limit: 4 << 20, Dropped: 1288490189, At: at(time.Hour)}
	ts = e.Evaluate(Observation{Now: at(time.Hour), LogLimited: []LimitedLog{g3}})
	expect(t, "next attempt", ts, "firing log_truncated/job=42/attempt=3; resolved log_truncated/job=42/attempt=2")
	if !strings.Contains(ts[0].Summary, "reached its limit of 4MiB; only its first 2MiB and the newest lines are kept, 1.2GiB dropped so far — ") {
		t.Errorf("summary = %q", ts[0].Summary)
	}
	if r := ts[1].Resolution; r != "attempt 2 of job 42 (resnet) is no longer running; its log keeps its head and tail (`trainyard logs 42`)" {
		t.Errorf("resolution = %q", r)
	}
	// An unknown limit is said so.
	e = newEngine(t, nil)
	ts = e.Evaluate(Observation{Now: t0, LogLimited: []LimitedLog{{Job: job(7), Attempt: 1}}})
	if len(ts) != 1 || !strings.Contains(ts[0].Summary, "the log reached its limit; only its first half and the newest lines are kept —") {
		t.Errorf("unknown limit: %+v", ts)
	}

	off := false
	e = newEngine(t, func(c *Config) { c.Rules.LogTruncated.Enabled = &off })
	expect(t, "disabled", e.Evaluate(Observation{Now: t0, Running: running, LogLimited: []LimitedLog{g}}), "")
}

// The idle stop and the idle_gpu alert do not fight: the attempt's
// condition alert resolves naming the stop — at once, or at the next
// observation when the one reporting the end still lists the attempt as
// running — and the stop fires its own idle_gpu alert keyed by the job,
// an event alert that outlives the attempt and resolves when the job is
// re-run.
func TestIdleStopResolvesTheConditionAndFiresOnce(t *testing.T) {
	for _, stillListed := range []bool{false, true} {
		e := newEngine(t, nil) // below 0.05 for 15m
		running := func(now time.Duration) Observation {
			return Observation{Now: at(now), Running: []RunningAttempt{{Job: job(42), Attempt: 1, Sample: sample(at(now), 1, 0, 0.01)}}}
		}
		expect(t, "idle starts", e.Evaluate(running(0)), "")
		expect(t, "held 15m", e.Evaluate(running(15*time.Minute)), "firing idle_gpu/job=42/attempt=1")
		msg := "stopped as idle: GPU 0 stayed under 5% utilisation (at most 1%) for 30m, pool standard's idle_stop (below 0.05 for 30m)"
		ended := Observation{Now: at(30 * time.Minute), Ended: []EndedAttempt{{Job: job(42), Attempt: 1, State: domain.AttemptFailed,
			Reason: domain.ReasonIdle, Message: msg, EndedAt: at(30 * time.Minute), JobState: domain.JobFailed, Started: true}}}
		var ts, resolved []Transition
		if stillListed {
			ended.Running = running(30 * time.Minute).Running
			ts = e.Evaluate(ended)
			expect(t, "stopped, still listed", ts, "firing idle_gpu/job=42")
			resolved = e.Evaluate(Observation{Now: at(30*time.Minute + 5*time.Second)})
			expect(t, "gone", resolved, "resolved idle_gpu/job=42/attempt=1")
		} else {
			ts = e.Evaluate(ended)
			expect(t, "stopped", ts, "firing idle_gpu/job=42; resolved idle_gpu/job=42/attempt=1")
			resolved = ts[1:]
		}
		if want := "job 42 (resnet) was stopped on attempt 1, its GPUs idle: " + msg; !strings.HasPrefix(ts[0].Summary, want) ||
			!strings.Contains(ts[0].Summary, "trainyard rerun 42") || ts[0].Severity != SeverityWarning {
			t.Errorf("stop alert = %s %q, want it to start %q and name the rerun", ts[0].Severity, ts[0].Summary, want)
		}
		if r := resolved[0].Resolution; !strings.Contains(r, "stopped by its pool's idle stop (see idle_gpu/job=42)") {
			t.Errorf("condition resolution = %q", r)
		}
		if len(e.idleStopped) != 0 {
			t.Errorf("idleStopped keeps %v after the resolution", e.idleStopped)
		}
		expect(t, "stays firing", e.Evaluate(Observation{Now: at(31 * time.Minute)}), "")
		if ids := e.EventJobs(); len(ids) != 1 || ids[0] != 42 {
			t.Errorf("EventJobs = %v, want [42]", ids)
		}
		rerun := job(43)
		rerun.RerunOf = 42
		expect(t, "re-run", e.Evaluate(Observation{Now: at(32 * time.Minute), Queued: []QueuedJob{{Job: rerun, QueuedSince: at(32 * time.Minute)}}}),
			"resolved idle_gpu/job=42")
	}
}

// runaway fires only past factor × the expected duration and after quiet
// without progress, never without an expected duration, and resolves on
// progress or when the attempt ends.
func TestRunaway(t *testing.T) {
	e := newEngine(t, nil) // factor 3, quiet 1h
	run := func(now time.Duration, progress time.Duration, expected time.Duration) []Transition {
		r := RunningAttempt{Job: job(42), Attempt: 1, StartedAt: t0, Expected: expected, ExpectedRuns: 3}
		if progress > 0 {
			r.LastProgressAt = at(progress)
		}
		return e.Evaluate(Observation{Now: at(now), Running: []RunningAttempt{r}})
	}
	expect(t, "no history", run(24*time.Hour, 0, 0), "")
	expect(t, "within 3× 2h", run(6*time.Hour, 0, 2*time.Hour), "")
	expect(t, "past 3×, progress 30m ago", run(7*time.Hour, 6*time.Hour+30*time.Minute, 2*time.Hour), "")
	ts := run(7*time.Hour+30*time.Minute, 6*time.Hour+30*time.Minute, 2*time.Hour)
	expect(t, "past 3×, quiet 1h", ts, "firing runaway/job=42/attempt=1")
	if want := "job 42 (resnet) attempt 1 has run 7h30m, over 3× the 2h (p90) of its user's last 3 successful runs of this name, with no training progress for 1h"; !strings.HasPrefix(ts[0].Summary, want) {
		t.Errorf("summary = %q, want it to start %q", ts[0].Summary, want)
	}
	expect(t, "still quiet", run(8*time.Hour, 6*time.Hour+30*time.Minute, 2*time.Hour), "")
	expect(t, "progress", run(8*time.Hour+time.Minute, 8*time.Hour, 2*time.Hour), "resolved runaway/job=42/attempt=1")
	expect(t, "quiet again", run(9*time.Hour, 8*time.Hour, 2*time.Hour), "firing runaway/job=42/attempt=1")
	expect(t, "ended", e.Evaluate(Observation{Now: at(10 * time.Hour)}), "resolved runaway/job=42/attempt=1")
}

// grant_expiring fires once per attempt an ending grant will preempt,
// with the grant, its end and what to do; it resolves when the attempt
// is no longer listed, and an observation that does not know leaves it.
func TestGrantExpiring(t *testing.T) {
	e := newEngine(t, nil)
	until := at(time.Hour)
	exp := ExpiringGrant{Job: job(42), Attempt: 1, Grant: 7, Extra: domain.Limits{GPUs: 4}, Until: until}
	running := []RunningAttempt{{Job: job(42), Attempt: 1}}
	ts := e.Evaluate(Observation{Now: at(15 * time.Minute), Running: running, Expiring: []ExpiringGrant{exp}, ExpiringSeen: true})
	expect(t, "listed", ts, "firing grant_expiring/job=42/attempt=1")
	want := "job 42 (resnet) attempt 1 runs on compute grant 7 (+4 GPUs for project vision in pool standard), which expires at 2025-03-01 13:00:00 UTC (in 45m): it will be preempted then"
	if !strings.HasPrefix(ts[0].Summary, want) || ts[0].Labels.Owner != "alice" {
		t.Errorf("alert = %q for %q, want it to start %q, for alice", ts[0].Summary, ts[0].Labels.Owner, want)
	}
	expect(t, "listed again", e.Evaluate(Observation{Now: at(16 * time.Minute), Running: running, Expiring: []ExpiringGrant{exp}, ExpiringSeen: true}), "")
	expect(t, "not known", e.Evaluate(Observation{Now: at(17 * time.Minute), Running: running}), "")
	ts = e.Evaluate(Observation{Now: at(time.Hour), ExpiringSeen: true})
	expect(t, "preempted", ts, "resolved grant_expiring/job=42/attempt=1")
	if ts[0].Resolution != "attempt 1 of job 42 (resnet) is no longer running" {
		t.Errorf("resolution = %q", ts[0].Resolution)
	}
}
