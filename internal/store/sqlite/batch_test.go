package sqlite

import (
	"context"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// TestCreatesJoinTheRunningBatch: a create queued while a batch of
// creates runs joins that batch's transaction instead of waiting for a
// commit of its own; a create queued behind another kind of write does
// not (TestGroupCommitIsolatesFailures).
func TestCreatesJoinTheRunningBatch(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	rec := domain.AuditRecord{Actor: "user:alice", Action: "job.submit", Target: "job/" + store.AuditIDPlaceholder, Result: domain.AuditOK}
	batches := s.batches.Load()

	// The first create holds its batch (its output directory is asked for
	// inside the transaction) until the second one waits for the writer.
	first, second := testNewJob(t, "first"), testNewJob(t, "second")
	running, queued := make(chan struct{}), make(chan struct{})
	dir := first.OutputDir
	first.OutputDir = func(id int64) string {
		close(running)
		<-queued
		return dir(id)
	}
	type result struct {
		job     domain.Job
		created bool
		err     error
	}
	results := make(chan result, 2)
	create := func(p store.NewJob) {
		j, created, err := s.CreateJob(ctx, p, rec)
		results <- result{j, created, err}
	}
	go create(first)
	<-running
	go create(second)
	waitQueued(t, s, 1)
	close(queued)
	for range 2 {
		if r := <-results; r.err != nil || !r.created {
			t.Fatalf("%s: created=%v err=%v", r.job.Name, r.created, r.err)
		}
	}
	if n := s.batches.Load() - batches; n != 1 {
		t.Errorf("%d transactions committed, want 1: the second create joins the first's", n)
	}
	jobs, err := s.ListJobs(ctx, store.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 {
		t.Errorf("%d jobs stored, want 2", len(jobs))
	}
}
