package storetest

import (
	"context"
	"testing"

	"trainyard/internal/store"
)

// rerunTests cover a re-run's link to the job it re-runs (store.NewJob.RerunOf,
// domain.Job.RerunOf).
var rerunTests = map[string]func(t *testing.T, s store.Store){
	"RerunOfRoundTrip": testRerunOfRoundTrip,
}

func testRerunOfRoundTrip(t *testing.T, s store.Store) {
	ctx := context.Background()
	orig := create(t, s, newJob(t, testSpec("orig", "p"), "alice", t0))
	if orig.RerunOf != 0 {
		t.Errorf("CreateJob of an ordinary submit returned RerunOf %d, want 0", orig.RerunOf)
	}
	if got := get(t, s, orig.ID); got.RerunOf != 0 {
		t.Errorf("GetJob of an ordinary submit returned RerunOf %d, want 0", got.RerunOf)
	}

	p := newJob(t, testSpec("orig", "p"), "bob", at(1))
	p.RerunOf = orig.ID
	p.IdempotencyKey = "again"
	rerun := create(t, s, p)
	if rerun.RerunOf != orig.ID {
		t.Errorf("CreateJob returned RerunOf %d, want %d", rerun.RerunOf, orig.ID)
	}
	if got := get(t, s, rerun.ID); got.RerunOf != orig.ID {
		t.Errorf("GetJob returned RerunOf %d, want %d", got.RerunOf, orig.ID)
	}
	jobs, err := s.ListJobs(ctx, store.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	links := map[int64]int64{}
	for _, j := range jobs {
		links[j.ID] = j.RerunOf
	}
	if len(links) != 2 || links[orig.ID] != 0 || links[rerun.ID] != orig.ID {
		t.Errorf("ListJobs links (id → rerun of) = %v, want %d → 0 and %d → %d", links, orig.ID, rerun.ID, orig.ID)
	}

	// An idempotent replay returns the first job with its link.
	again, created, err := s.CreateJob(ctx, p, setupAudit)
	if err != nil || created || again.ID != rerun.ID || again.RerunOf != orig.ID {
		t.Errorf("replay: job %d created=%v RerunOf=%d err=%v; want job %d, created=false, RerunOf=%d",
			again.ID, created, again.RerunOf, err, rerun.ID, orig.ID)
	}
}
