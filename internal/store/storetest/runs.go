package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// testRecentRuns: how long the newest succeeded attempts of a user's jobs
// of one name ran, newest first, up to the limit; other names, users and
// failed attempts are not counted.
func testRecentRuns(t *testing.T, s store.Store) {
	ctx := context.Background()
	run := func(name, user string, from, to int, state domain.AttemptState) {
		t.Helper()
		j := create(t, s, newJob(t, testSpec(name, "p"), user, t0))
		mv := domain.MoveSucceed()
		if state != domain.AttemptSucceeded {
			mv = domain.MoveFail()
		}
		mustApply(t, s, store.Change{JobID: j.ID, Move: domain.MoveStart(), At: at(from),
			Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting}},
			store.Change{JobID: j.ID, Move: domain.MoveRun(), At: at(from),
				Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}},
			store.Change{JobID: j.ID, Move: mv.Only(domain.JobRunning), At: at(to),
				Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: state}})
	}
	run("train", "alice", 1, 11, domain.AttemptSucceeded)
	run("train", "bob", 1, 100, domain.AttemptSucceeded)  // another user
	run("eval", "alice", 1, 100, domain.AttemptSucceeded) // another name
	run("train", "alice", 1, 100, domain.AttemptFailed)   // failed
	run("train", "alice", 2, 32, domain.AttemptSucceeded)
	run("train", "alice", 5, 25, domain.AttemptSucceeded)
	got, err := s.RecentRuns(ctx, "alice", "train", 2)
	if err != nil {
		t.Fatal(err)
	}
	step := at(1).Sub(at(0))
	if want := []time.Duration{20 * step, 30 * step}; !slices.Equal(got, want) {
		t.Fatalf("RecentRuns(limit 2) = %v, want %v (newest first)", got, want)
	}
	if got, err := s.RecentRuns(ctx, "alice", "train", 10); err != nil || len(got) != 3 || got[2] != 10*step {
		t.Errorf("RecentRuns(limit 10) = %v, %v; want the three succeeded runs", got, err)
	}
	if got, err := s.RecentRuns(ctx, "carol", "train", 10); err != nil || len(got) != 0 {
		t.Errorf("of a user without jobs = %v, %v", got, err)
	}
}
