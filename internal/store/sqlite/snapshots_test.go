package sqlite

import (
	"context"
	"errors"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// TestSnapshotOfFailedCreateIsStoredAgain: a create that fails after
// storing a new config snapshot leaves none, and a create of the same
// spec later in the same batch stores it, as does one in a later batch.
func TestSnapshotOfFailedCreateIsStoredAgain(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	rec := domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}
	first, _, err := s.CreateJob(ctx, testNewJob(t, "first"), rec)
	if err != nil {
		t.Fatal(err)
	}

	release := blockWriter(t, s)
	clash, ok := testNewJob(t, "x"), testNewJob(t, "x")
	clash.OutputDir = func(int64) string { return first.OutputDir }
	type result struct {
		job domain.Job
		err error
	}
	results := make([]chan result, 2)
	for i, p := range []store.NewJob{clash, ok} {
		results[i] = make(chan result, 1)
		go func() {
			j, _, err := s.CreateJob(ctx, p, rec)
			results[i] <- result{j, err}
		}()
		waitQueued(t, s, i+1) // clash first
	}
	release()
	if r := <-results[0]; !errors.Is(r.err, store.ErrConflict) {
		t.Fatalf("clashing create: err = %v, want ErrConflict", r.err)
	}
	r := <-results[1]
	if r.err != nil {
		t.Fatalf("create after the clash in its batch: %v", r.err)
	}
	later, _, err := s.CreateJob(ctx, testNewJob(t, "x"), rec)
	if err != nil {
		t.Fatalf("create in a later batch: %v", err)
	}
	for _, id := range []int64{r.job.ID, later.ID} {
		j, err := s.GetJob(ctx, id)
		if err != nil || string(j.SpecJSON) != string(ok.SpecJSON) {
			t.Errorf("GetJob(%d) = spec %s, %v; want the stored snapshot %s", id, j.SpecJSON, err, ok.SpecJSON)
		}
	}
}
