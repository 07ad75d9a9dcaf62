package postgres

import (
	"context"
	"testing"

	"trainyard/internal/domain"
)

// TestFailedLookFailsNoCreate: a create whose look for repeats fails is
// stored all the same, its look reporting the failure, and the writer
// goes on with the next batch.
func TestFailedLookFailsNoCreate(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	rec := domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}
	first := createTestJob(t, s, "x")
	p := testNewJob(t, "x")
	l := &look{sql: `SELECT 1 / (SELECT COUNT(*) - COUNT(*) FROM jobs)`, submitter: p.Submitter, specHash: p.SpecHash}
	job, created, err := s.createJob(ctx, p, rec, func(r *writeReq) { r.look = l })
	if err != nil || !created {
		t.Fatalf("create with a failing look: created=%v, %v", created, err)
	}
	if l.rep.Err == nil || l.rep.Jobs != nil {
		t.Errorf("failing look read %+v, want its error", l.rep)
	}
	if _, err := s.GetJob(ctx, job.ID); err != nil {
		t.Errorf("GetJob(%d): %v", job.ID, err)
	}
	_, created, rep, err := s.CreateJobLooking(ctx, testNewJob(t, "x"), rec, t0.Add(-1))
	if err != nil || !created || rep.Err != nil || len(rep.Jobs) != 2 || rep.Jobs[0].ID != job.ID || rep.Jobs[1].ID != first.ID {
		t.Errorf("next create: created=%v, %v, read %+v; want jobs %d and %d", created, err, rep, job.ID, first.ID)
	}
}
