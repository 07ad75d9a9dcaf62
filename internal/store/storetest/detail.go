package storetest

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// detailTests cover Jobs.JobDetail, the one read that shows a job.
var detailTests = map[string]func(t *testing.T, s store.Store){
	"JobDetail": testJobDetail,
}

// testJobDetail: JobDetail returns exactly what GetJob (but the decoded
// spec), ListAttempts, ListEvents and RateHistory of the job's pool
// return, for jobs with and without code, attempts, a re-run link and
// rates, and nothing of other jobs or pools.
func testJobDetail(t *testing.T, s store.Store) {
	ctx := context.Background()
	for i, rates := range []domain.Rates{{GPUHour: 2_100_000, CPUHour: 48_001}, {GPUHour: 1<<53 + 1, MemoryGiBHour: 1}} {
		p := testPool("standard")
		p.Rates, p.UpdatedAt = rates, at(1+10*i)
		putPool(t, s, p)
	}
	other := testPool("other")
	other.Rates = domain.Rates{CPUHour: 7}
	putPool(t, s, other)

	plain := create(t, s, newJob(t, testSpec("plain", "p"), "alice", t0))
	p := newJob(t, testSpec("full", "p"), "bob", at(1))
	p.Code = codeRef('c', "0123456789abcdef0123456789abcdef01234567", true)
	p.RerunOf = plain.ID
	p.IdempotencyKey = "k-1"
	full := create(t, s, p)
	mustApply(t, s,
		store.Change{JobID: full.ID, Move: domain.MoveStart(), At: at(2), Actor: "control",
			Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting, Node: "node-a", GPUs: []int{3, 1}, Borrowed: true}},
		store.Change{JobID: full.ID, Move: domain.MoveRun(), At: at(3), Actor: "control",
			Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}},
		store.Change{JobID: full.ID, Move: domain.MoveRequeue().Only(domain.JobRunning), Reason: domain.ReasonNodeLost,
			Message: `node "node-a" stopped answering — requeued`, At: at(4), Actor: "control", NextAttempt: at(6),
			Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptLost, Reason: domain.ReasonNodeLost}},
		store.Change{JobID: full.ID, Move: domain.MoveStart(), At: at(6), Actor: "control",
			Attempt: &store.AttemptChange{Number: 2, Create: true, To: domain.AttemptStarting, Node: "node-b"}},
		store.Change{JobID: full.ID, Move: domain.MoveRun(), At: at(7), Actor: "control",
			Attempt: &store.AttemptChange{Number: 2, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}},
		store.Change{JobID: full.ID, Move: domain.MoveSucceed().Only(domain.JobRunning), Reason: domain.ReasonCompleted, At: at(9), Actor: "control",
			Attempt: &store.AttemptChange{Number: 2, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptSucceeded,
				Reason: domain.ReasonCompleted, Message: "exit 0", ExitCode: ptr(0), Usage: &domain.Usage{CPUSeconds: 12.25, MaxRSS: 3 << 30, GPUSeconds: 7.5}}},
	)
	free := testSpec("free", "p")
	free.Pool = "free" // a pool without a rate history
	freeJob := create(t, s, newJob(t, free, "carol", at(2)))
	mustApply(t, s, store.Change{JobID: freeJob.ID, Move: domain.MoveCancel().Only(domain.JobQueued), At: at(3), Actor: "user:carol",
		Reason: domain.ReasonCanceledByUser, Message: "canceled by carol: typo"})

	for _, id := range []int64{plain.ID, full.ID, freeJob.ID} {
		got, err := s.JobDetail(ctx, id)
		if err != nil {
			t.Fatalf("JobDetail(%d): %v", id, err)
		}
		want := store.JobDetail{Job: get(t, s, id), Attempts: attempts(t, s, id), Events: events(t, s, id)}
		if want.Rates, err = s.RateHistory(ctx, want.Job.Pool); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Job.SpecJSON, want.Job.SpecJSON) {
			t.Errorf("job %d: SpecJSON %s, want %s", id, got.Job.SpecJSON, want.Job.SpecJSON)
		}
		want.Job.Spec, want.Job.SpecJSON, got.Job.SpecJSON = domain.Spec{}, nil, nil
		if d := diff(want, got); d != "" {
			t.Errorf("JobDetail(%d) differs from GetJob, ListAttempts, ListEvents and RateHistory:%s", id, d)
		}
	}
	// What the reads above must have covered, so that the comparison
	// means something.
	d, _ := s.JobDetail(ctx, full.ID)
	if len(d.Attempts) != 2 || len(d.Events) != 7 || len(d.Rates) != 2 || d.Job.Code == nil || d.Job.RerunOf != plain.ID ||
		d.Attempts[0].ExitCode != nil || d.Attempts[1].ExitCode == nil || len(d.Attempts[0].GPUs) != 2 || !d.Attempts[0].Borrowed {
		t.Errorf("JobDetail of the full job = %+v", d)
	}
	if d, _ := s.JobDetail(ctx, freeJob.ID); len(d.Rates) != 0 || len(d.Events) != 2 || d.Job.Code != nil {
		t.Errorf("JobDetail of a canceled job in a pool without rates = %+v", d)
	}
	if _, err := s.JobDetail(ctx, freeJob.ID+100); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("JobDetail of a missing job: %v, want ErrNotFound", err)
	}

	// A detail read again is the same, and shows every write since: a
	// move, an attempt's, a new rate of the job's pool.
	check := func(when string, id int64) store.JobDetail {
		t.Helper()
		got, err := s.JobDetail(ctx, id)
		if err != nil {
			t.Fatalf("JobDetail(%d) %s: %v", id, when, err)
		}
		want := store.JobDetail{Job: get(t, s, id), Attempts: attempts(t, s, id), Events: events(t, s, id)}
		if want.Rates, err = s.RateHistory(ctx, want.Job.Pool); err != nil {
			t.Fatal(err)
		}
		want.Job.Spec, want.Job.SpecJSON = domain.Spec{}, nil
		cmp := got
		cmp.Job.SpecJSON = nil
		if d := diff(want, cmp); d != "" {
			t.Fatalf("JobDetail(%d) %s differs from GetJob, ListAttempts, ListEvents and RateHistory:%s", id, when, d)
		}
		return got
	}
	first := check("again", full.ID)
	first.Attempts[0].Message, first.Events[0].Message = "scribbled", "scribbled" // a caller's copy
	check("after its caller changed the copy", full.ID)
	job := create(t, s, newJob(t, testSpec("later", "p"), "dave", at(20)))
	check("when new", job.ID)
	mustApply(t, s, store.Change{JobID: job.ID, Move: domain.MoveStart(), At: at(21), Actor: "control",
		Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting, Node: "node-c"}})
	check("after a move", job.ID)
	mustApply(t, s, store.Change{JobID: job.ID, In: states(domain.JobStarting), At: at(22),
		Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptStarting, Message: "pulling"}})
	if d := check("after an attempt's write", job.ID); d.Attempts[0].Message != "pulling" {
		t.Fatalf("JobDetail(%d) after an attempt's write = %+v", job.ID, d.Attempts)
	}
	p2 := testPool("standard")
	p2.Rates, p2.UpdatedAt = domain.Rates{GPUHour: 5}, at(30)
	putPool(t, s, p2)
	if d := check("after a rate change", job.ID); len(d.Rates) != 3 {
		t.Fatalf("JobDetail(%d) after a rate change has rates %+v, want 3", job.ID, d.Rates)
	}
}
