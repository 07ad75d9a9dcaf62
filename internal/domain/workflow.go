package domain

import (
	"strconv"
	"strings"
	"time"
)

// DependOn is the condition a dependency waits for.
type DependOn string

const (
	// DependSucceeded: the job (every member of the sweep) succeeded.
	DependSucceeded DependOn = "succeeded"
	// DependEnded: the job (every member of the sweep) ended, however.
	DependEnded DependOn = "ended"
	// DependFailed: the job (some member of the sweep) failed or was
	// canceled: a clean-up or report step.
	DependFailed DependOn = "failed"
)

// DependOns lists the dependency conditions.
func DependOns() []DependOn { return []DependOn{DependSucceeded, DependEnded, DependFailed} }

// Dependency is one entry of a spec's after: the job (or sweep) this
// job waits for, and on what. Exactly one of Job and Sweep is set.
type Dependency struct {
	Job   int64    `json:"job,omitempty"`
	Sweep int64    `json:"sweep,omitempty"`
	On    DependOn `json:"on"`
}

// Target names what d waits for: "job 12" or "sweep 3".
func (d Dependency) Target() string {
	if d.Sweep != 0 {
		return "sweep " + strconv.FormatInt(d.Sweep, 10)
	}
	return "job " + strconv.FormatInt(d.Job, 10)
}

// Verdict is what a dependency's target says of it now.
type Verdict int

const (
	DependPending Verdict = iota // not decided yet
	DependMet                    // the condition holds
	DependNever                  // the condition can never hold
)

// Judge decides dependency d from its target's state: a job's state, or
// for a sweep the summary of its members (ended: every member ended;
// failed: some member failed or was canceled).
func (d Dependency) Judge(state JobState) Verdict {
	if !state.Terminal() {
		return DependPending
	}
	switch d.On {
	case DependSucceeded:
		if state == JobSucceeded {
			return DependMet
		}
		return DependNever
	case DependFailed:
		if state == JobSucceeded {
			return DependNever
		}
		return DependMet
	}
	return DependMet // ended
}

// SweepState sums up a sweep's members as one job state for its
// dependents: running while any member has not ended; then failed if any
// member failed, canceled if any was canceled, else succeeded.
func SweepState(counts map[JobState]int) JobState {
	for s, n := range counts {
		if n > 0 && !s.Terminal() {
			return JobRunning
		}
	}
	switch {
	case counts[JobFailed] > 0:
		return JobFailed
	case counts[JobCanceled] > 0:
		return JobCanceled
	}
	return JobSucceeded
}

// Sweep methods.
const (
	SweepGrid   = "grid"   // every combination of the listed values
	SweepRandom = "random" // count samples, drawn with seed
	SweepArray  = "array"  // indices only (submit --array)
)

// SweepSpec is a spec's sweep: section. It is not part of a member's
// config snapshot: each member carries its own params and index.
type SweepSpec struct {
	Method      string                `json:"method"`
	Params      map[string]SweepParam `json:"params,omitempty"`
	Count       int                   `json:"count,omitempty"` // random: how many members
	Seed        int64                 `json:"seed,omitempty"`
	Indices     []int                 `json:"indices,omitempty"` // array: the indices
	MaxParallel int                   `json:"max_parallel,omitempty"`
	Objective   *Objective            `json:"objective,omitempty"`
	EarlyStop   *EarlyStop            `json:"early_stop,omitempty"`
}

// EarlyStop stops a sweep's poor members while they run. The median rule:
// a running member whose best value of the objective's metric by its
// latest step (at least MinSteps) is worse than the median of the other
// members' mean values up to that step (at least MinMembers of them
// reported that far) is stopped, and ends succeeded with reason
// EarlyStopped.
type EarlyStop struct {
	Rule       string `json:"rule"` // "median"
	MinSteps   int64  `json:"min_steps,omitempty"`
	MinMembers int    `json:"min_members,omitempty"` // 0: 3
}

// SweepParam is the space of one swept parameter: listed Values (grid,
// or a random choice), or a range [Min, Max] drawn uniformly (random
// only), on a log scale when Log.
type SweepParam struct {
	Values []string `json:"values,omitempty"`
	Min    *float64 `json:"min,omitempty"`
	Max    *float64 `json:"max,omitempty"`
	Log    bool     `json:"log,omitempty"`
}

// Objective names the metric that ranks a sweep's members.
type Objective struct {
	Metric string `json:"metric"`
	Goal   string `json:"goal"` // "minimize" or "maximize"
}

// Better reports whether a beats b under o's goal.
func (o Objective) Better(a, b float64) bool {
	if o.Goal == "maximize" {
		return a > b
	}
	return a < b
}

// Sweep is a stored sweep (or job array): its members are jobs.
type Sweep struct {
	ID          int64
	Name        string
	Project     string
	Submitter   string
	CreatedAt   time.Time
	Method      string
	Members     int
	MaxParallel int
	Objective   *Objective
	// Spec is the sweep's definition as submitted (JSON of SweepSpec).
	Spec SweepSpec
	// CanceledAt is when it was canceled; zero: it was not.
	CanceledAt time.Time
	CanceledBy string
	// IdempotencyKey, when not empty, is unique per Submitter: a repeated
	// submit with it returns this sweep instead of storing another.
	IdempotencyKey string
}

// Labels the platform sets on a sweep's members.
const (
	SweepLabel      = "trainyard.sweep"       // the sweep's id
	ArrayIndexLabel = "trainyard.array_index" // the member's index
)

// Verb is what d's condition asks of its target: "succeed", "fail",
// "end".
func (d Dependency) Verb() string {
	switch d.On {
	case DependSucceeded:
		return "succeed"
	case DependFailed:
		return "fail"
	}
	return "end"
}

// WaitMessage says what a job waits for: each of deps, with its target's
// state where states has it (keyed by Target).
func WaitMessage(deps []Dependency, states map[string]JobState) string {
	parts := make([]string, len(deps))
	for i, d := range deps {
		parts[i] = "waits for " + d.Target() + " to " + d.Verb()
		if st, ok := states[d.Target()]; ok {
			parts[i] += " (it is " + string(st) + ")"
		}
	}
	return strings.Join(parts, "; ")
}
