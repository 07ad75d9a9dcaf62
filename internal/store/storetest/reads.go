package storetest

import (
	"context"
	"slices"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// readTests cover reads repeated across writes: what a store keeps to
// answer them again must follow every write.
var readTests = map[string]func(t *testing.T, s store.Store){
	"ListAndTimesAfterWrites": testListAndTimesAfterWrites,
}

// testListAndTimesAfterWrites: pages of ListJobs (filtered or not, as a
// caller restricted to some jobs too) and AttemptTimes, each read twice,
// equal what JobsByID and ListAttempts read, after each kind of write:
// a job's row, an attempt alone, a move out of the filter, a new job.
func testListAndTimesAfterWrites(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := startJob(t, s, "a", nil)
	b := startJob(t, s, "b", nil)
	c := create(t, s, newJob(t, testSpec("c", "p"), "bob", at(3)))
	filters := map[string]store.JobFilter{
		"page":      {Limit: 3},
		"running":   {Limit: 10, States: states(domain.JobRunning)},
		"live":      {Limit: 10, States: states(domain.JobQueued, domain.JobRunning)},
		"bob's":     {Limit: 10, Restrict: true, Submitter: "bob"},
		"before c":  {Limit: 1, BeforeID: c.ID},
		"project p": {Limit: 10, Project: "p", Restrict: true, Projects: []string{"p"}},
	}
	check := func(when string) {
		t.Helper()
		for range 4 { // later reads may come from what earlier ones kept
			for name, f := range filters {
				got, err := s.ListJobs(ctx, f)
				if err != nil {
					t.Fatalf("%s: ListJobs(%s): %v", when, name, err)
				}
				all, err := s.ListJobs(ctx, store.JobFilter{})
				if err != nil {
					t.Fatal(err)
				}
				var want []domain.Job
				for _, j := range all { // newest first
					if len(want) < f.Limit && (len(f.States) == 0 || slices.Contains(f.States, j.State)) &&
						(!f.Restrict || j.Submitter == f.Submitter || slices.Contains(f.Projects, j.Project)) &&
						(f.BeforeID == 0 || j.ID < f.BeforeID) && (f.Project == "" || j.Project == f.Project) {
						want = append(want, j)
					}
				}
				byID, err := s.JobsByID(ctx, jobIDs(want))
				if err != nil {
					t.Fatal(err)
				}
				slices.Reverse(byID)
				if d := diff(byID, got); d != "" {
					t.Fatalf("%s: ListJobs(%s) differs from JobsByID:%s", when, name, d)
				}
			}
			ids := []int64{c.ID, a.ID, b.ID}
			got, err := s.AttemptTimes(ctx, ids)
			if err != nil {
				t.Fatalf("%s: AttemptTimes: %v", when, err)
			}
			var want []store.AttemptTime
			for _, id := range slices.Sorted(slices.Values(ids)) {
				for _, x := range attempts(t, s, id) {
					if !x.StartedAt.IsZero() {
						want = append(want, store.AttemptTime{JobID: id, Attempt: x.Number, StartedAt: x.StartedAt, FinishedAt: x.FinishedAt})
					}
				}
			}
			if d := diff(want, got); d != "" {
				t.Fatalf("%s: AttemptTimes differs from ListAttempts:%s", when, d)
			}
		}
	}
	check("at first")
	mustApply(t, s, store.Change{JobID: c.ID, In: states(domain.JobQueued), SetReason: true, Reason: domain.ReasonQuotaExceeded, Message: "full", At: at(4)})
	check("after a reason")
	mustApply(t, s, store.Change{JobID: a.ID, In: states(domain.JobRunning), At: at(5),
		Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptFailed, Reason: domain.ReasonExitCode}})
	check("after an attempt alone")
	mustApply(t, s, store.Change{JobID: b.ID, Move: domain.MoveSucceed().Only(domain.JobRunning), At: at(6),
		Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptSucceeded}})
	check("after a move out of a filter")
	create(t, s, newJob(t, testSpec("d", "p"), "bob", at(7)))
	check("after a new job")
}
