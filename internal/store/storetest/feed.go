package storetest

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// feedTests cover LiveJobs, ChangedJobs, LiveJobRevs and JobsByID: the
// control loop's view of the active jobs, kept current by reading only
// what was written since, and checked by the live jobs' revisions.
var feedTests = map[string]func(t *testing.T, s store.Store){
	"LiveJobsAndChanges":  testLiveJobsAndChanges,
	"LiveJobRevs":         testLiveJobRevs,
	"JobsByID":            testJobsByID,
	"AttemptWriteRevises": testAttemptWriteRevises,
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

func liveRevs(t *testing.T, s store.Store) (map[int64]store.JobCursor, store.JobCursor) {
	t.Helper()
	revs, c, err := s.LiveJobRevs(context.Background())
	if err != nil {
		t.Fatalf("LiveJobRevs: %v", err)
	}
	if !slices.IsSortedFunc(revs, func(a, b store.JobRev) int { return int(a.ID - b.ID) }) {
		t.Fatalf("LiveJobRevs = %v, want id order", revs)
	}
	byID := make(map[int64]store.JobCursor, len(revs))
	for _, r := range revs {
		byID[r.ID] = r.Rev
	}
	return byID, c
}

func testLiveJobRevs(t *testing.T, s store.Store) {
	ctx := context.Background()
	jobs := createN(t, s, "p", 4)
	mustApply(t, s, store.Change{JobID: jobs[3].ID, Move: domain.MoveCancel().Only(domain.JobQueued), At: at(10)})
	live, cl, err := s.LiveJobs(ctx)
	if err != nil {
		t.Fatalf("LiveJobs: %v", err)
	}
	revs, c1 := liveRevs(t, s)
	if got, want := slices.Sorted(maps.Keys(revs)), jobIDs(live); !slices.Equal(got, want) {
		t.Fatalf("LiveJobRevs ids = %v, want LiveJobs' %v (the canceled job left out)", got, want)
	}
	// Nothing written since: ChangedJobs(c1) returns the jobs whose
	// revision is past c1, and only those.
	_, cc := changedSince(t, s, c1)
	again, c2 := liveRevs(t, s)
	if !maps.Equal(again, revs) {
		t.Fatalf("LiveJobRevs with nothing written = %v, then %v; want the same", revs, again)
	}
	changed, _ := changedSince(t, s, c2)
	for id, rev := range again {
		if in := slices.Contains(jobIDs(changed), id); in != (rev > c2) {
			t.Fatalf("ChangedJobs(%d) = %v, LiveJobRevs gives job %d revision %d: want it returned exactly when its revision is past the cursor", c2, jobIDs(changed), id, rev)
		}
	}

	// A job written after a read has a revision past that read's cursor,
	// whichever read it was; a job not written keeps its revision.
	mustApply(t, s,
		store.Change{JobID: jobs[0].ID, Move: domain.MoveStart(), At: at(11),
			Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting, Node: "n"}},
		store.Change{JobID: jobs[1].ID, In: states(domain.JobQueued), SetReason: true, Reason: domain.ReasonQuotaExceeded, Message: "full", At: at(11)},
	)
	fresh := create(t, s, newJob(t, testSpec("fresh", "p"), "alice", at(12)))
	after, c3 := liveRevs(t, s)
	for _, id := range []int64{jobs[0].ID, jobs[1].ID, fresh.ID} {
		for name, c := range map[string]store.JobCursor{"LiveJobs": cl, "LiveJobRevs": c2, "ChangedJobs": cc} {
			if rev, ok := after[id]; !ok || rev <= c {
				t.Fatalf("LiveJobRevs = %v: want job %d, written after %s returned cursor %d, with a revision past it", after, id, name, c)
			}
		}
	}
	if after[jobs[2].ID] != revs[jobs[2].ID] {
		t.Fatalf("job %d was not written, yet its revision went from %d to %d", jobs[2].ID, revs[jobs[2].ID], after[jobs[2].ID])
	}
	if len(after) != 4 {
		t.Fatalf("LiveJobRevs = %v, want jobs %d, %d, %d and %d", after, jobs[0].ID, jobs[1].ID, jobs[2].ID, fresh.ID)
	}

	// Leaving the live states leaves the list.
	mustApply(t, s, store.Change{JobID: jobs[2].ID, Move: domain.MoveCancel().Only(domain.JobQueued), At: at(13)})
	last, c4 := liveRevs(t, s)
	if _, ok := last[jobs[2].ID]; ok || len(last) != 3 {
		t.Fatalf("LiveJobRevs after job %d was canceled = %v, want it left out", jobs[2].ID, last)
	}
	if c4 < c3 {
		t.Fatalf("LiveJobRevs cursor went back from %d to %d", c3, c4)
	}
}

func testJobsByID(t *testing.T, s store.Store) {
	ctx := context.Background()
	jobs := createN(t, s, "p", 3)
	mustApply(t, s, store.Change{JobID: jobs[1].ID, Move: domain.MoveCancel().Only(domain.JobQueued), At: at(10)})
	if got, err := s.JobsByID(ctx, nil); err != nil || len(got) != 0 {
		t.Fatalf("JobsByID(none) = %v, %v; want nothing", got, err)
	}
	// Any order, repeats and an id of no job; any state.
	ids := []int64{jobs[2].ID, jobs[1].ID, jobs[2].ID + 1000, jobs[0].ID, jobs[2].ID}
	got, err := s.JobsByID(ctx, ids)
	if err != nil {
		t.Fatalf("JobsByID(%v): %v", ids, err)
	}
	want, err := s.ListJobs(ctx, store.JobFilter{Project: "p", Ascending: true})
	if err != nil {
		t.Fatalf("ListJobs: %v", err)
	}
	if !reflect.DeepEqual(normalize(got), normalize(want)) {
		t.Fatalf("JobsByID(%v) =\n%+v\nwant ListJobs' cheap rows, by id ascending:\n%+v", ids, got, want)
	}
	if got[1].State != domain.JobCanceled || got[0].Spec.Name != "" {
		t.Fatalf("JobsByID(%v) = %+v, want job %d canceled, and no spec", ids, got, jobs[1].ID)
	}
}

// testAttemptWriteRevises: a change that writes only a job's attempt
// (no move, no reason, no request) still gives the job a revision past
// every earlier cursor, so a reader that keeps what showing a job shows
// (its row, attempts and events) by revision sees the attempt's write;
// and JobDetail, read before and after it, shows the write.
func testAttemptWriteRevises(t *testing.T, s store.Store) {
	ctx := context.Background()
	jobs := createN(t, s, "p", 2)
	mustApply(t, s, store.Change{JobID: jobs[0].ID, Move: domain.MoveStart(), At: at(11),
		Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting, Node: "n"}})
	if _, err := s.JobDetail(ctx, jobs[0].ID); err != nil {
		t.Fatalf("JobDetail(%d): %v", jobs[0].ID, err)
	}
	before, c := liveRevs(t, s)
	mustApply(t, s, store.Change{JobID: jobs[0].ID, In: states(domain.JobStarting), At: at(12),
		Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptStarting,
			Message: "pulling the image", Usage: &domain.Usage{CPUSeconds: 1.5}}})
	after, _ := liveRevs(t, s)
	if rev := after[jobs[0].ID]; rev <= c || rev == before[jobs[0].ID] {
		t.Fatalf("job %d's attempt was written after cursor %d, yet its revision went from %d to %d; want one past the cursor",
			jobs[0].ID, c, before[jobs[0].ID], rev)
	}
	if after[jobs[1].ID] != before[jobs[1].ID] {
		t.Fatalf("job %d was not written, yet its revision went from %d to %d", jobs[1].ID, before[jobs[1].ID], after[jobs[1].ID])
	}
	changed, _ := changedSince(t, s, c)
	if !slices.Contains(jobIDs(changed), jobs[0].ID) {
		t.Fatalf("ChangedJobs(%d) = %v: want job %d, whose attempt was written since", c, jobIDs(changed), jobs[0].ID)
	}
	d, err := s.JobDetail(ctx, jobs[0].ID)
	if err != nil {
		t.Fatalf("JobDetail(%d): %v", jobs[0].ID, err)
	}
	if len(d.Attempts) != 1 || d.Attempts[0].Message != "pulling the image" || d.Attempts[0].Usage.CPUSeconds != 1.5 {
		t.Fatalf("JobDetail(%d).Attempts = %+v after the attempt's write, want its message and usage", jobs[0].ID, d.Attempts)
	}
}
