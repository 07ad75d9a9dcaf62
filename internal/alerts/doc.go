// Package alerts raises alerts about jobs and project budgets and delivers
// them to channels.
//
// Rules (each can be turned off with `enabled: false`):
//
//	queued_too_long         a job waited in the queue for `after` (1h)      warning
//	start_failure           an attempt ended EntrypointNotFound, LaunchFailed
//	                        or EnvironmentCheckFailed                         critical
//	interruption            an attempt was preempted, lost or lost its node  warning
//	stalled                 an attempt ended Stalled or HealthCheckFailed    critical
//	idle_gpu                a GPU under `below` (0.05) busy for `for` (15m);  warning
//	                        or, keyed by the job, an attempt ended Idle
//	                        (its pool's idle stop)
//	memory_near_limit       RSS over `above` (0.9) of the limit for `for` (2m) warning
//	artifact_write_failure  an attempt ended ArtifactWriteFailed             critical
//	preemption_thrash       the control loop holds a job from preemption     warning
//	                        (preempted too often: a preemption loop)
//	log_truncated           an attempt's log reached its limit (once per     warning
//	                        attempt)
//	budget_threshold        a project's spend reached a threshold of its     warning,
//	                        budget (once per period and threshold)          critical at 100%
//	runaway                 an attempt ran past `factor` (3) × its expected  warning
//	                        duration with no progress for `quiet` (1h)
//	grant_expiring          a running attempt holds capacity only a compute  warning
//	                        grant gives, and the grant ends soon
//
// Each alert has a dedupe key (Key: "stalled/job=42",
// "idle_gpu/job=42/attempt=2"); while it fires, the same condition does not
// fire again. Condition alerts (queued_too_long, idle_gpu,
// memory_near_limit, runaway, grant_expiring, preemption_thrash,
// log_truncated) resolve when the
// condition clears, the job leaves the queue / the attempt stops running,
// or the hold ends. A budget_threshold alert
// ("budget_threshold/project=vision/period=2026-12/at=80", about a project:
// its Labels.Job is 0) resolves when the spend is under the threshold again
// (the budget was raised), the period ends or the budget is gone. Event alerts (start_failure,
// interruption, stalled, artifact_write_failure) resolve when the job has a
// newer attempt that started (running, or ended after starting), is re-run
// (trainyard rerun), succeeds or is canceled, or after resolve_after (24h);
// a job that failed for good and is not re-run keeps its alert until then,
// unless someone acknowledges it (trainyard alerts ack: it is not notified
// again).
//
// The package has three parts:
//
//   - Config: the `alerts:` section of the server config, YAML-tagged. The
//     caller unmarshals it, then calls Defaults and Validate (errors name
//     the field path, e.g. "alerts.channels[1].url: ...").
//   - Engine: pure and deterministic (no clock, goroutines or I/O). Each
//     Evaluate takes an Observation with the time and returns the
//     Transitions (alerts that fired or resolved).
//   - Dispatcher: sends transitions to Channels (Webhook with a generic JSON
//     or Slack body, and Log for the server log), retrying with exponential
//     backoff, and reports each delivery through callbacks.
//
// Wiring, in the server:
//
//	cfg.Alerts.Defaults()
//	if err := cfg.Alerts.Validate(); err != nil { return err }
//	eng, _ := alerts.NewEngine(cfg.Alerts)
//	eng.Restore(firingAlertsFromStore)              // nothing is re-sent
//	routes, _ := alerts.NewRoutes(cfg.Alerts, logger, nil)
//	disp := alerts.NewDispatcher(routes, alerts.DispatcherOptions{
//		Now:         clock.Now,
//		Delivery:    cfg.Alerts.Delivery,
//		Logger:      logger,
//		OnDelivered: func(key, channel string, s alerts.Status) { /* store it */ },
//		OnGaveUp:    func(key, channel string, s alerts.Status, err error) { /* store it */ },
//	})
//	go disp.Run(ctx)
//	disp.Submit(undeliveredTransitionsFromStore...) // resend what a restart cut off
//
// and in the control loop, every few seconds (from one goroutine):
//
//	obs := alerts.Observation{Now: clock.Now(), Queued: ..., Running: ..., Ended: ..., Held: ..., LogLimited: ...,
//		Budgets: ..., BudgetsSeen: true}
//	for _, id := range eng.EventJobs() { /* add id to obs.Succeeded or obs.Canceled if so */ }
//	ts := eng.Evaluate(obs)
//	/* persist ts (upsert by Key), then */ disp.Submit(ts...)
//
// RefOf and EndedOf build observation parts from domain.Job and
// domain.Attempt; GPU utilisation in Sample is a 0–1 ratio. For
// `trainyard alerts test CHANNEL`, the API calls Dispatcher.Test.
//
// URLs and header values of channels may hold tokens: errors, logs and the
// String methods show a webhook only as scheme://host (see RedactURL).
package alerts
