package domain

// Reason is a stable, machine-readable cause attached to a state. Messages carry
// the human detail; reasons never change spelling once released.
type Reason string

const (
	ReasonNone               Reason = ""
	ReasonSubmitted          Reason = "Submitted"
	ReasonScheduled          Reason = "Scheduled"
	ReasonStarted            Reason = "Started"
	ReasonCompleted          Reason = "Completed"
	ReasonExitCode           Reason = "ExitCode"
	ReasonEntrypointNotFound Reason = "EntrypointNotFound"
	ReasonOOMKilled          Reason = "OOMKilled"
	ReasonTimeout            Reason = "Timeout"
	ReasonPreempted          Reason = "Preempted"
	ReasonHealthCheckFailed  Reason = "HealthCheckFailed"
	ReasonStalled            Reason = "Stalled"
	ReasonNodeLost           Reason = "NodeLost"
	ReasonLaunchFailed       Reason = "LaunchFailed"
	ReasonArtifactWrite      Reason = "ArtifactWriteFailed"
	ReasonBudgetExceeded     Reason = "BudgetExceeded"
	ReasonQuotaExceeded      Reason = "QuotaExceeded"
	ReasonNoCapacity         Reason = "NoCapacity"
	ReasonWaitingForCapacity Reason = "WaitingForResources"
	ReasonBackoff            Reason = "RetryBackoff"
	ReasonCanceledByUser     Reason = "CanceledByUser"
	ReasonHeld               Reason = "Held"     // kept out of scheduling by a user or an admin
	ReasonReleased           Reason = "Released" // back in the queue after a hold
	ReasonRetrying           Reason = "Retrying"
	ReasonRetryStorm         Reason = "RetryStorm" // retries paused: many similar jobs failed at once

	// ReasonEnvironmentCheckFailed: the environment's check command failed
	// before the entrypoint started (envs: see Environment.Check).
	ReasonEnvironmentCheckFailed Reason = "EnvironmentCheckFailed"

	// ReasonDependency: held until the jobs and sweeps of its spec's
	// after: end as asked.
	ReasonDependency Reason = "Dependency"
	// ReasonDependencyFailed: failed without running, because a job or
	// sweep it depended on ended in a way that can never meet the
	// condition.
	ReasonDependencyFailed Reason = "DependencyFailed"
	// ReasonSweepLimit: a sweep member held while max_parallel of its
	// sweep's members are queued or running.
	ReasonSweepLimit Reason = "SweepLimit"
	// ReasonEarlyStopped: a sweep member stopped by its sweep's
	// early_stop rule; it ends succeeded.
	ReasonEarlyStopped Reason = "EarlyStopped"

	// ReasonIdle: the job was stopped because every GPU it held stayed
	// under its pool's idle_stop threshold for the whole window (Pool.IdleStop).
	ReasonIdle Reason = "Idle"
)
