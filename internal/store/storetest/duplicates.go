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

// testCreateJobLooking: a store that reads a create's repeats in its
// transaction (store.RepeatLooker) reads what SameSpecJobs returns just
// before, never the new job, also when creates share a transaction; a
// replay of a keyed create reads none.
func testCreateJobLooking(t *testing.T, s store.Store) {
	l, ok := s.(store.RepeatLooker)
	if !ok {
		t.Skip("the store reads no repeats in its creates")
	}
	ctx := context.Background()
	spec := testSpec("train", "p")
	since := at(-1)
	create(t, s, newJob(t, testSpec("other", "p"), "alice", at(0)))
	for i := range store.DuplicateShown + 2 {
		p := newJob(t, spec, "alice", at(i))
		before, more, err := s.SameSpecJobs(ctx, "alice", p.SpecHash, since)
		if err != nil {
			t.Fatal(err)
		}
		job, created, rep, err := l.CreateJobLooking(ctx, p, setupAudit, since)
		if err != nil || !created || rep.Err != nil {
			t.Fatalf("create %d: created=%v, %v, look: %v", i, created, err, rep.Err)
		}
		if fmt.Sprint(rep.Jobs, rep.More) != fmt.Sprint(before, more) {
			t.Errorf("create %d (job %d) read %+v (more %v), want %+v (more %v)", i, job.ID, rep.Jobs, rep.More, before, more)
		}
		if len(rep.Jobs) != min(i, store.DuplicateShown) || rep.More != (i > store.DuplicateShown) {
			t.Errorf("create %d read %d repeats (more %v) of %d earlier jobs", i, len(rep.Jobs), rep.More, i)
		}
	}

	// Concurrent creates, likely sharing a transaction: none reads itself.
	type result struct {
		job domain.Job
		rep store.Repeats
		err error
	}
	results := make(chan result, 8)
	for range cap(results) {
		go func() {
			j, _, rep, err := l.CreateJobLooking(ctx, newJob(t, spec, "alice", at(10)), setupAudit, since)
			results <- result{j, rep, err}
		}()
	}
	for range cap(results) {
		r := <-results
		if r.err != nil || r.rep.Err != nil || len(r.rep.Jobs) == 0 {
			t.Fatalf("concurrent create: %v, look %v, %d repeats", r.err, r.rep.Err, len(r.rep.Jobs))
		}
		if slices.ContainsFunc(r.rep.Jobs, func(j domain.Job) bool { return j.ID >= r.job.ID }) {
			t.Errorf("job %d read %+v: itself or a later job", r.job.ID, r.rep.Jobs)
		}
	}

	p := newJob(t, spec, "alice", at(20))
	p.IdempotencyKey = "k"
	first, _, _, err := l.CreateJobLooking(ctx, p, setupAudit, since)
	if err != nil {
		t.Fatal(err)
	}
	again, created, rep, err := l.CreateJobLooking(ctx, p, setupAudit, since)
	if err != nil || created || again.ID != first.ID || rep.Jobs != nil || rep.More || rep.Err != nil {
		t.Errorf("replay: job %d created=%v repeats %+v (%v), want job %d, none", again.ID, created, rep, err, first.ID)
	}
}
