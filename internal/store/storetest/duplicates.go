package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// testSameSpecJobs: a submitter's jobs of one snapshot that are live or
// recent, newest first, the newest store.DuplicateShown of them and
// whether there are more; other users' and other specs' are not, nor jobs beyond the
// submitter's newest store.DuplicateScan.
func testSameSpecJobs(t *testing.T, s store.Store) {
	ctx := context.Background()
	spec := testSpec("train", "p")
	first := create(t, s, newJob(t, spec, "alice", at(0)))
	create(t, s, newJob(t, spec, "bob", at(1)))                     // another user
	create(t, s, newJob(t, testSpec("other", "p"), "alice", at(2))) // another spec
	second := create(t, s, newJob(t, spec, "alice", at(3)))
	hash := newJob(t, spec, "alice", t0).SpecHash

	ids := func(since int) []int64 {
		t.Helper()
		jobs, more, err := s.SameSpecJobs(ctx, "alice", hash, at(since))
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) > store.DuplicateShown || more && len(jobs) != store.DuplicateShown {
			t.Fatalf("SameSpecJobs returned %d jobs, more %v", len(jobs), more)
		}
		var out []int64
		for _, j := range jobs {
			if j.Submitter != "alice" || j.SpecHash != hash || j.State == "" || j.SubmittedAt.IsZero() {
				t.Fatalf("SameSpecJobs returned %+v", j)
			}
			out = append(out, j.ID)
		}
		if more {
			out = append(out, -1)
		}
		return out
	}
	if got := ids(100); fmt.Sprint(got) != fmt.Sprint([]int64{second.ID, first.ID}) {
		t.Fatalf("live jobs of the spec = %v, want %d, %d (newest first)", got, second.ID, first.ID)
	}
	// Ended, the first is only reported while it is recent.
	mustApply(t, s, store.Change{JobID: first.ID, Move: domain.MoveCancel().Only(domain.JobQueued), At: at(4)})
	if got := ids(100); fmt.Sprint(got) != fmt.Sprint([]int64{second.ID}) {
		t.Fatalf("after the first was canceled = %v, want only %d", got, second.ID)
	}
	if got := ids(0); fmt.Sprint(got) != fmt.Sprint([]int64{second.ID, first.ID}) {
		t.Fatalf("since its submit = %v, want %d, %d", got, second.ID, first.ID)
	}
	// The newest few are returned, and that there are more.
	var more []int64
	for i := range store.DuplicateShown + 2 {
		more = append(more, create(t, s, newJob(t, spec, "alice", at(5+i))).ID)
	}
	slices.Reverse(more)
	want := append(more[:store.DuplicateShown:store.DuplicateShown], -1)
	if got := ids(0); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("with %d more = %v, want %v", len(more), got, want)
	}
	// Only the submitter's newest jobs are looked at.
	for i := range store.DuplicateScan {
		create(t, s, newJob(t, testSpec(fmt.Sprintf("sweep-%d", i), "p"), "alice", at(10+i)))
	}
	if got := ids(0); len(got) != 0 {
		t.Fatalf("beyond the newest %d jobs = %v, want none", store.DuplicateScan, got)
	}
}
