package storetest

import (
	"context"
	"slices"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// feedTests cover LiveJobs and ChangedJobs: the control loop's view of
// the active jobs, kept current by reading only what was written since.
var feedTests = map[string]func(t *testing.T, s store.Store){
	"LiveJobsAndChanges": testLiveJobsAndChanges,
}

func jobIDs(jobs []domain.Job) []int64 {
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}

func changedSince(t *testing.T, s store.Store, c store.JobCursor) ([]domain.Job, store.JobCursor) {
	t.Helper()
	jobs, next, err := s.ChangedJobs(context.Background(), c)
	if err != nil {
		t.Fatalf("ChangedJobs(%d): %v", c, err)
	}
	if !slices.IsSortedFunc(jobs, func(a, b domain.Job) int { return int(a.ID - b.ID) }) {
		t.Fatalf("ChangedJobs(%d) = %v, want id order", c, jobIDs(jobs))
	}
	return jobs, next
}

func testLiveJobsAndChanges(t *testing.T, s store.Store) {
	ctx := context.Background()
	jobs := createN(t, s, "p", 4)
	mustApply(t, s, store.Change{JobID: jobs[3].ID, Move: domain.MoveCancel().Only(domain.JobQueued), At: at(10)})
	active, c1, err := s.LiveJobs(ctx)
	if err != nil {
		t.Fatalf("LiveJobs: %v", err)
	}
	if got, want := jobIDs(active), jobIDs(jobs[:3]); !slices.Equal(got, want) {
		t.Fatalf("LiveJobs = %v, want %v (the canceled job left out)", got, want)
	}
	if active[0].Spec.Name != "" || active[0].Name != "job-0" || active[0].Resources.GPUs != 2 {
		t.Fatalf("LiveJobs row = %+v, want a cheap row (no spec) with name and resources", active[0])
	}
	// Nothing written since: a later look may repeat jobs (PostgreSQL
	// re-reads from the oldest transaction then running, in any schema),
	// but each as it is.
	again, c2 := changedSince(t, s, c1)
	for _, j := range again {
		if k := slices.IndexFunc(active, func(a domain.Job) bool { return a.ID == j.ID }); k >= 0 &&
			(j.State != active[k].State || j.Reason != active[k].Reason || j.Attempts != active[k].Attempts) {
			t.Fatalf("ChangedJobs right after LiveJobs returned job %d as %+v, want it unchanged: %+v", j.ID, j, active[k])
		}
	}

	// Every kind of write shows up, with the row as written.
	mustApply(t, s,
		store.Change{JobID: jobs[0].ID, Move: domain.MoveStart(), At: at(11),
			Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting, Node: "n"}},
		store.Change{JobID: jobs[1].ID, In: states(domain.JobQueued), SetReason: true, Reason: domain.ReasonQuotaExceeded, Message: "full", At: at(11)},
	)
	fresh := create(t, s, newJob(t, testSpec("fresh", "p"), "alice", at(12)))
	changed, c3 := changedSince(t, s, c2)
	got := map[int64]domain.Job{}
	for _, j := range changed {
		got[j.ID] = j
	}
	if j, ok := got[jobs[0].ID]; !ok || j.State != domain.JobStarting || j.Attempts != 1 {
		t.Fatalf("ChangedJobs = %v: want job %d in state starting with 1 attempt, got %+v", jobIDs(changed), jobs[0].ID, j)
	}
	if j, ok := got[jobs[1].ID]; !ok || j.Reason != domain.ReasonQuotaExceeded || j.Message != "full" {
		t.Fatalf("ChangedJobs = %v: want job %d with its new reason, got %+v", jobIDs(changed), jobs[1].ID, j)
	}
	if _, ok := got[fresh.ID]; !ok {
		t.Fatalf("ChangedJobs = %v: want the new job %d", jobIDs(changed), fresh.ID)
	}
	if j, ok := got[jobs[2].ID]; ok && (j.State != domain.JobQueued || j.Reason != jobs[2].Reason) {
		t.Fatalf("ChangedJobs = %v: job %d was not written, yet comes back as %+v", jobIDs(changed), jobs[2].ID, j)
	}

	// Leaving the active states is a change too (the reader drops the job).
	mustApply(t, s,
		store.Change{JobID: jobs[0].ID, In: states(domain.JobStarting), RequestCancel: true, At: at(13)},
		store.Change{JobID: jobs[2].ID, Move: domain.MoveCancel().Only(domain.JobQueued), At: at(13)})
	changed, _ = changedSince(t, s, c3)
	got = map[int64]domain.Job{}
	for _, j := range changed {
		got[j.ID] = j
	}
	if j, ok := got[jobs[0].ID]; !ok || !j.CancelRequested {
		t.Fatalf("ChangedJobs = %v: want job %d with its cancel request, got %+v", jobIDs(changed), jobs[0].ID, j)
	}
	if j, ok := got[jobs[2].ID]; !ok || j.State != domain.JobCanceled {
		t.Fatalf("ChangedJobs = %v: want job %d canceled, got %+v", jobIDs(changed), jobs[2].ID, j)
	}
}
