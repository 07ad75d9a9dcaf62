package domain

import (
	"slices"
	"strings"
)

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

// Move is a job state change that the transition table allows, built
// only by the named moves below (MoveStart, MoveRun, ...): a change from
// one state to another that the table does not list cannot be expressed.
// The zero Move changes no state.
type Move struct {
	name string
	from []JobState
	to   JobState
}

// moves is the transition table: every state change a job can make, by
// name. CanTransition and the named moves read it; nothing else decides.
var moves = [...]Move{
	{"start", []JobState{JobQueued}, JobStarting},                                    // the scheduler placed it
	{"run", []JobState{JobStarting}, JobRunning},                                     // its attempt's process started
	{"requeue", []JobState{JobStarting, JobRunning}, JobQueued},                      // a retry, or preempted
	{"succeed", []JobState{JobStarting, JobRunning}, JobSucceeded},                   // its attempt exited 0
	{"fail", []JobState{JobStarting, JobRunning}, JobFailed},                         // its attempt failed, no retry left
	{"cancel", []JobState{JobQueued, JobHeld, JobStarting, JobRunning}, JobCanceled}, // by a user or an admin
	{"hold", []JobState{JobQueued}, JobHeld},                                         // kept out of scheduling
	{"release", []JobState{JobHeld}, JobQueued},                                      // back into the queue
	{"unmet", []JobState{JobHeld}, JobFailed},                                        // a dependency can never be met
}

func move(name string) Move {
	for _, m := range moves {
		if m.name == name {
			return m
		}
	}
	panic("domain: no move " + name)
}

// The named moves.
func MoveStart() Move   { return move("start") }
func MoveRun() Move     { return move("run") }
func MoveRequeue() Move { return move("requeue") }
func MoveSucceed() Move { return move("succeed") }
func MoveFail() Move    { return move("fail") }
func MoveCancel() Move  { return move("cancel") }
func MoveHold() Move    { return move("hold") }
func MoveRelease() Move { return move("release") }
func MoveUnmet() Move   { return move("unmet") }

// Moves lists every move of the table.
func Moves() []Move { return append([]Move(nil), moves[:]...) }

// IsZero reports whether m changes no state.
func (m Move) IsZero() bool { return m.to == "" }

// Name names the move ("start", "hold", ...); "" for the zero Move.
func (m Move) Name() string { return m.name }

// From lists the states the move leaves.
func (m Move) From() []JobState { return append([]JobState(nil), m.from...) }

// Leaves reports whether the move takes a job in state s (without the
// copy From makes).
func (m Move) Leaves(s JobState) bool { return slices.Contains(m.from, s) }

// To is the state the move reaches; "" for the zero Move.
func (m Move) To() JobState { return m.to }

// Only narrows m to those of states it leaves: a caller that read the job
// in state s moves it only from s. It never widens a move; one narrowed to
// no state matches no job.
func (m Move) Only(states ...JobState) Move {
	var from []JobState
	for _, s := range m.from {
		for _, t := range states {
			if s == t {
				from = append(from, s)
				break
			}
		}
	}
	m.from = from
	return m
}

func (m Move) String() string {
	if m.IsZero() {
		return "no move"
	}
	parts := make([]string, len(m.from))
	for i, s := range m.from {
		parts[i] = string(s)
	}
	return m.name + " (" + strings.Join(parts, "|") + " → " + string(m.to) + ")"
}

// CanTransition reports whether a job may move from one state to another:
// whether some move of the table takes it there.
func CanTransition(from, to JobState) bool {
	for _, m := range moves {
		if m.to == to && slices.Contains(m.from, from) {
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

// WastedStates are the ends of attempts whose spend bought nothing that
// lasts: preempted, failed, timed out or lost. A canceled attempt was
// stopped on purpose and a succeeded one finished its work.
var WastedStates = []AttemptState{AttemptPreempted, AttemptFailed, AttemptLost, AttemptTimedOut}

// Wasted reports whether s is one of WastedStates.
func (s AttemptState) Wasted() bool { return slices.Contains(WastedStates, s) }
