package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"trainyard/internal/audit"
	"trainyard/internal/domain"
	"trainyard/internal/store"
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

// TestLooksOfABatchShareAStatement: creates of one submitter and spec that
// share a batch, each asking for its own since, read what SameSpecJobs
// reads for that since as the batch begins, finished jobs submitted
// between their since values included.
func TestLooksOfABatchShareAStatement(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	rec := domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}
	ms := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Millisecond) }
	createTestJob(t, s, "other")
	for i := range 12 {
		p := testNewJob(t, "x")
		p.SubmittedAt = ms(i)
		j, _, err := s.CreateJob(ctx, p, rec)
		if err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 || i > 6 && i != 10 { // finished: counted only when submitted at or after since
			errs, err := s.Apply(ctx, []store.Change{{JobID: j.ID, Move: domain.MoveCancel().Only(domain.JobQueued),
				Reason: domain.ReasonCanceledByUser, Actor: "user:test", At: ms(i)}})
			if err = errors.Join(err, errors.Join(errs...)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, sinces := range [][]int{{0, 12}, {3, 4, 5}, {7, 9, 11, 13}, {-1, 5, 5, 10}, {6, 6}} {
		t.Run(fmt.Sprint(sinces), func(t *testing.T) {
			want := make([]string, len(sinces))
			for i, since := range sinces {
				jobs, more, err := s.SameSpecJobs(ctx, "alice", testNewJob(t, "x").SpecHash, ms(since))
				if err != nil {
					t.Fatal(err)
				}
				want[i] = fmt.Sprint(jobs, more)
			}
			// Hold the writer while the creates queue, so they share a batch.
			started, release := make(chan struct{}), make(chan struct{})
			held := make(chan error, 1)
			go func() {
				held <- s.write(ctx, func(*writer) error { close(started); <-release; return nil })
			}()
			<-started
			batches := s.batches.Load()
			got := make([]string, len(sinces))
			errs := make([]error, len(sinces))
			var wg sync.WaitGroup
			for i, since := range sinces {
				queued := len(s.reqs)
				wg.Go(func() {
					p := testNewJob(t, "x")
					p.SubmittedAt = ms(20)
					_, created, rep, err := s.CreateJobLooking(ctx, p, rec, ms(since))
					if err == nil && (!created || rep.Err != nil) {
						err = fmt.Errorf("created=%v, look: %v", created, rep.Err)
					}
					got[i], errs[i] = fmt.Sprint(rep.Jobs, rep.More), err
				})
				for deadline := time.Now().Add(10 * time.Second); len(s.reqs) == queued; {
					if time.Now().After(deadline) {
						t.Fatal("request did not queue")
					}
					time.Sleep(time.Millisecond)
				}
			}
			close(release)
			wg.Wait()
			if err := errors.Join(append(errs, <-held)...); err != nil {
				t.Fatal(err)
			}
			if n := s.batches.Load() - batches; n != 2 {
				t.Fatalf("%d batches, want 2: the held one and the creates'", n)
			}
			for i := range sinces {
				if got[i] != want[i] {
					t.Errorf("since %d read %s, want %s", sinces[i], got[i], want[i])
				}
			}
			// Cancel what the batch created, so the next case reads as this did.
			jobs, _, err := s.SameSpecJobs(ctx, "alice", testNewJob(t, "x").SpecHash, ms(1000))
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range jobs {
				if j.SubmittedAt.Equal(ms(20)) {
					if _, err := s.Apply(ctx, []store.Change{{JobID: j.ID, Move: domain.MoveCancel().Only(domain.JobQueued),
						Reason: domain.ReasonCanceledByUser, Actor: "user:test", At: ms(20)}}); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}

// TestPredictedBatches: after an audited batch, the writer's next one
// costs one round trip, its audit chain's head and job ids predicted; when
// another writer appended to the chain or took job ids in between, the
// batch runs again reading them, and the chain stays intact, the ids
// unique.
func TestPredictedBatches(t *testing.T) {
	ctx := context.Background()
	dsn := newSchema(t)
	a, b := openOn(t, dsn), openOn(t, dsn)
	ids := map[int64]bool{}
	create := func(s *Store, roundTrips int) {
		t.Helper()
		flushes := s.w.flushes // read between batches: the writer is idle
		j := createTestJob(t, s, "x")
		if ids[j.ID] {
			t.Fatalf("job id %d handed out twice", j.ID)
		}
		ids[j.ID] = true
		if n := s.w.flushes - flushes; n != roundTrips {
			t.Errorf("create (job %d) took %d round trips, want %d", j.ID, n, roundTrips)
		}
	}
	create(a, 2) // nothing known yet
	create(a, 1)
	create(b, 2)
	create(a, 3) // b appended: the prediction fails, then read again
	create(a, 2) // and reads once more, finding what it left
	create(a, 1)
	if err := b.AppendAudit(ctx, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); err != nil {
		t.Fatal(err)
	}
	create(a, 3)
	create(b, 2) // a wrote between: read
	create(a, 2)
	create(a, 2)
	create(a, 1)
	if _, err := b.pool.Exec(ctx, `SELECT nextval('jobs_id_seq')`); err != nil {
		t.Fatal(err)
	}
	create(a, 3) // b took a job id
	create(a, 2)
	create(a, 1)
	create(b, 2) // a wrote since b last read
	create(b, 2)
	create(b, 1)
	// An audited batch that creates no job: one round trip too.
	flushes := b.w.flushes
	if err := b.AppendAudit(ctx, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); err != nil {
		t.Fatal(err)
	}
	if n := b.w.flushes - flushes; n != 1 {
		t.Errorf("append took %d round trips, want 1", n)
	}
	create(b, 1)
	rep, err := audit.Verify(store.AuditRecords(ctx, a, 0, 100))
	if err != nil || !rep.OK() || rep.Records != int64(len(ids))+2 {
		t.Fatalf("audit chain: %+v, %v; want %d intact records", rep, err, len(ids)+2)
	}
}

// TestSnapshotOfAFailedCreate: a create that fails leaves its config
// snapshot unstored, and the writer knows it: the next create of that
// spec stores it.
func TestSnapshotOfAFailedCreate(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	rec := domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}
	same := func(int64) string { return "/artifacts/same" }
	first := testNewJob(t, "first")
	first.OutputDir = same
	if _, _, err := s.CreateJob(ctx, first, rec); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		createTestJob(t, s, "other") // a batch that commits snapshots
	}
	clash := testNewJob(t, "new")
	clash.OutputDir = same
	if _, _, err := s.CreateJob(ctx, clash, rec); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("create into a used output directory: %v, want ErrConflict", err)
	}
	createTestJob(t, s, "new")
	createTestJob(t, s, "new")
}
