package domain

// JobState is where a job is in its lifecycle. Only the control loop moves jobs
// between states, except for cancel of a queued or held job, which the service
// layer performs directly with a guarded update.
type JobState string

const (
	// JobQueued: accepted and waiting for the scheduler. A job also returns here
	// after a retryable attempt ends, with NextAttemptAt set to its backoff.
	JobQueued JobState = "queued"
	// JobHeld: kept out of scheduling by a user, an admin or a budget.
	JobHeld JobState = "held"
	// JobStarting: the scheduler placed it and an attempt is being launched.
	JobStarting JobState = "starting"
	// JobRunning: the attempt's process has started.
	JobRunning JobState = "running"
	// JobSucceeded: the last attempt exited 0. Terminal.
	JobSucceeded JobState = "succeeded"
	// JobFailed: the last attempt failed and no retry remains. Terminal.
	JobFailed JobState = "failed"
	// JobCanceled: canceled by a user or an admin. Terminal.
	JobCanceled JobState = "canceled"
)

// JobStates lists every job state in lifecycle order.
func JobStates() []JobState {
	return []JobState{JobQueued, JobHeld, JobStarting, JobRunning, JobSucceeded, JobFailed, JobCanceled}
}

// Valid reports whether s is a known job state.
func (s JobState) Valid() bool {
	for _, k := range JobStates() {
		if s == k {
			return true
		}
	}
	return false
}

// Terminal reports whether a job in state s never changes state again.
func (s JobState) Terminal() bool {
	return s == JobSucceeded || s == JobFailed || s == JobCanceled
}

// Active reports whether a job in state s holds resources (has a live attempt).
func (s JobState) Active() bool { return s == JobStarting || s == JobRunning }

// Live reports whether the scheduler tracks a job in state s: queued, or
// active.
func (s JobState) Live() bool { return s == JobQueued || s.Active() }

// LiveJobStates lists the states Live reports, in lifecycle order.
func LiveJobStates() []JobState { return []JobState{JobQueued, JobStarting, JobRunning} }

// jobTransitions is the legal transition table: from → allowed targets.
var jobTransitions = map[JobState][]JobState{
	JobQueued:   {JobStarting, JobHeld, JobCanceled, JobFailed},
	JobHeld:     {JobQueued, JobCanceled},
	JobStarting: {JobRunning, JobQueued, JobSucceeded, JobFailed, JobCanceled},
	JobRunning:  {JobQueued, JobSucceeded, JobFailed, JobCanceled},
}

// CanTransition reports whether a job may move from one state to another.
func CanTransition(from, to JobState) bool {
	for _, t := range jobTransitions[from] {
		if t == to {
			return true
		}
	}
	return false
}

// AttemptState is the observed state of one run of a job.
type AttemptState string

const (
	// AttemptStarting: created by the control loop; launch requested.
	AttemptStarting AttemptState = "starting"
	// AttemptRunning: the executor reported the process started.
	AttemptRunning AttemptState = "running"
	// AttemptSucceeded: exited 0.
	AttemptSucceeded AttemptState = "succeeded"
	// AttemptFailed: exited non-zero, could not start, or was OOM-killed.
	AttemptFailed AttemptState = "failed"
	// AttemptTimedOut: killed after exceeding policy.timeout.
	AttemptTimedOut AttemptState = "timed_out"
	// AttemptCanceled: stopped because its job was canceled.
	AttemptCanceled AttemptState = "canceled"
	// AttemptLost: its supervisor vanished without an exit record.
	AttemptLost AttemptState = "lost"
	// AttemptPreempted: stopped by the scheduler to make room.
	AttemptPreempted AttemptState = "preempted"
)

// Terminal reports whether the attempt has ended.
func (s AttemptState) Terminal() bool {
	return s != AttemptStarting && s != AttemptRunning
}
