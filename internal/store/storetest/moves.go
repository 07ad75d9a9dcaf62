package storetest

import (
	"errors"
	"slices"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

var moveTests = map[string]func(t *testing.T, s store.Store){
	"MovesOnlyFromTheirStates": testMovesOnlyFromTheirStates,
}

// Every named move, tried on a job in every state: it applies exactly
// from the states the transition table lets it leave, reaching its
// target; from any other it loses with ErrConflict and changes nothing.
func testMovesOnlyFromTheirStates(t *testing.T, s store.Store) {
	// into puts a new job in state st through legal moves.
	into := func(st domain.JobState) domain.Job {
		t.Helper()
		j := create(t, s, newJob(t, testSpec("a", "p"), "alice", t0))
		path := map[domain.JobState][]domain.Move{
			domain.JobQueued:    nil,
			domain.JobHeld:      {domain.MoveHold()},
			domain.JobStarting:  {domain.MoveStart()},
			domain.JobRunning:   {domain.MoveStart(), domain.MoveRun()},
			domain.JobSucceeded: {domain.MoveStart(), domain.MoveSucceed()},
			domain.JobFailed:    {domain.MoveStart(), domain.MoveFail()},
			domain.JobCanceled:  {domain.MoveCancel()},
		}[st]
		for i, m := range path {
			mustApply(t, s, store.Change{JobID: j.ID, Move: m, At: at(i + 1)})
		}
		if got := get(t, s, j.ID).State; got != st {
			t.Fatalf("setting up a %s job: it is %s", st, got)
		}
		return j
	}
	for _, m := range domain.Moves() {
		for _, st := range domain.JobStates() {
			j := into(st)
			errs := apply(t, s, store.Change{JobID: j.ID, Move: m, Actor: "user:alice", At: at(10)})
			got := get(t, s, j.ID).State
			if slices.Contains(m.From(), st) {
				if errs[0] != nil || got != m.To() {
					t.Errorf("%s on a %s job: err %v, state %s; want %s", m, st, errs[0], got, m.To())
				}
				continue
			}
			if !errors.Is(errs[0], store.ErrConflict) || got != st {
				t.Errorf("%s on a %s job: err %v, state %s; want ErrConflict and the job left %s", m, st, errs[0], got, st)
			}
		}
	}
	// A guard-only change names its states: none is an invalid change.
	j := into(domain.JobQueued)
	if errs := apply(t, s, store.Change{JobID: j.ID, SetReason: true, Reason: "X", At: at(11)}); !errors.Is(errs[0], store.ErrInvalid) {
		t.Errorf("a change with neither a move nor states to guard on: %v, want ErrInvalid", errs[0])
	}
}
