package domain

import (
	"slices"
	"testing"
)

// The transition table, written out: every (from, to) pair a job may take.
// Every other pair of states (and of unknown states) must be impossible.
var wantTransitions = map[[2]JobState]string{
	{JobQueued, JobStarting}:    "start",
	{JobQueued, JobHeld}:        "hold",
	{JobQueued, JobCanceled}:    "cancel",
	{JobHeld, JobQueued}:        "release",
	{JobHeld, JobCanceled}:      "cancel",
	{JobHeld, JobFailed}:        "unmet",
	{JobStarting, JobRunning}:   "run",
	{JobStarting, JobQueued}:    "requeue",
	{JobStarting, JobSucceeded}: "succeed",
	{JobStarting, JobFailed}:    "fail",
	{JobStarting, JobCanceled}:  "cancel",
	{JobRunning, JobQueued}:     "requeue",
	{JobRunning, JobSucceeded}:  "succeed",
	{JobRunning, JobFailed}:     "fail",
	{JobRunning, JobCanceled}:   "cancel",
}

func TestTransitionTable(t *testing.T) {
	states := append(JobStates(), "", "bogus")
	for _, from := range states {
		for _, to := range states {
			name, want := wantTransitions[[2]JobState{from, to}]
			if got := CanTransition(from, to); got != want {
				t.Errorf("CanTransition(%q, %q) = %v, want %v", from, to, got, want)
			}
			// Exactly the named move takes the job there, and no other.
			var by []string
			for _, m := range Moves() {
				if m.To() == to && slices.Contains(m.From(), from) {
					by = append(by, m.Name())
				}
			}
			if want && !slices.Equal(by, []string{name}) || !want && len(by) > 0 {
				t.Errorf("%q → %q is made by moves %v, want [%s]", from, to, by, name)
			}
		}
	}
	for _, s := range []JobState{JobSucceeded, JobFailed, JobCanceled} {
		for _, m := range Moves() {
			if slices.Contains(m.From(), s) {
				t.Errorf("move %s leaves terminal state %s", m, s)
			}
		}
	}
}

func TestNamedMoves(t *testing.T) {
	for _, c := range []struct {
		m    Move
		name string
		to   JobState
	}{
		{MoveStart(), "start", JobStarting}, {MoveRun(), "run", JobRunning}, {MoveRequeue(), "requeue", JobQueued},
		{MoveSucceed(), "succeed", JobSucceeded}, {MoveFail(), "fail", JobFailed}, {MoveCancel(), "cancel", JobCanceled},
		{MoveHold(), "hold", JobHeld}, {MoveRelease(), "release", JobQueued},
	} {
		if c.m.Name() != c.name || c.m.To() != c.to || c.m.IsZero() {
			t.Errorf("%s: name %q to %q", c.m, c.m.Name(), c.m.To())
		}
	}
	if !(Move{}).IsZero() || (Move{}).To() != "" {
		t.Error("the zero Move must change no state")
	}
}

func TestMoveOnlyNeverWidens(t *testing.T) {
	if got := MoveCancel().Only(JobHeld).From(); !slices.Equal(got, []JobState{JobHeld}) {
		t.Errorf("cancel only held: from %v", got)
	}
	if got := MoveHold().Only(JobRunning, JobSucceeded).From(); len(got) != 0 {
		t.Errorf("hold narrowed to states it does not leave: from %v, want none", got)
	}
	m := MoveCancel()
	from := m.From()
	from[0] = JobSucceeded // the caller's copy
	if slices.Contains(MoveCancel().From(), JobSucceeded) || slices.Contains(m.From(), JobSucceeded) {
		t.Error("From returned the table's own slice")
	}
}
