package sqlite

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// TestCreateJobLookingReadsWhatSameSpecJobsReads: the repeats a create
// reads in its transaction are those SameSpecJobs returns just before it,
// never the new job; a replay of a keyed create reads none.
func TestCreateJobLookingReadsWhatSameSpecJobsReads(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	rec := domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}
	since := t0.Add(-time.Hour)
	for i := range store.DuplicateShown + 2 {
		p := testNewJob(t, "x")
		before, more, err := s.SameSpecJobs(ctx, p.Submitter, p.SpecHash, since)
		if err != nil {
			t.Fatal(err)
		}
		job, created, rep, err := s.CreateJobLooking(ctx, p, rec, since)
		if err != nil || !created || rep.Err != nil {
			t.Fatalf("create %d: created=%v, %v, look: %v", i, created, err, rep.Err)
		}
		if !slices.EqualFunc(rep.Jobs, before, func(a, b domain.Job) bool { return reflect.DeepEqual(a, b) }) || rep.More != more {
			t.Errorf("create %d (job %d) read %+v (more %v), want %+v (more %v)", i, job.ID, rep.Jobs, rep.More, before, more)
		}
		if len(rep.Jobs) != min(i, store.DuplicateShown) || rep.More != (i > store.DuplicateShown) {
			t.Errorf("create %d read %d repeats (more %v) of %d earlier jobs", i, len(rep.Jobs), rep.More, i)
		}
	}
	p := testNewJob(t, "x")
	p.IdempotencyKey = "k"
	first, _, _, err := s.CreateJobLooking(ctx, p, rec, since)
	if err != nil {
		t.Fatal(err)
	}
	again, created, rep, err := s.CreateJobLooking(ctx, p, rec, since)
	if err != nil || created || again.ID != first.ID || rep.Jobs != nil || rep.More {
		t.Errorf("replay: job %d created=%v repeats %+v (%v), want job %d, none", again.ID, created, rep, err, first.ID)
	}
}
