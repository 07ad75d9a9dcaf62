package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// testPreemption: the preempt request flag, the preemption counter, the
// borrowed attempt flag and the policy fields copied onto the job row.
func testPreemption(t *testing.T, s store.Store) {
	j := create(t, s, newJob(t, testSpec("victim", "p"), "alice", t0))
	if j.Timeout != domain.Duration(24*time.Hour) || !j.Preemptible {
		t.Errorf("job copies timeout %s and preemptible %v from the spec, want 24h and true", j.Timeout, j.Preemptible)
	}
	mustApply(t, s,
		store.Change{JobID: j.ID, Move: domain.MoveStart(), At: at(1),
			Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting, Node: "node-a", Borrowed: true}},
		store.Change{JobID: j.ID, In: states(domain.JobStarting), RequestPreempt: true, SetReason: true,
			Reason: domain.ReasonPreempted, Message: "preempted for job 9", At: at(2)},
	)
	g := get(t, s, j.ID)
	if !g.PreemptRequested || g.Preemptions != 0 || g.Reason != domain.ReasonPreempted {
		t.Fatalf("after the request: requested %v, count %d, reason %s", g.PreemptRequested, g.Preemptions, g.Reason)
	}
	list, err := s.ListJobs(context.Background(), store.JobFilter{States: states(domain.JobStarting)})
	if err != nil || len(list) != 1 || !list[0].PreemptRequested || list[0].Timeout != g.Timeout || !list[0].Preemptible {
		t.Fatalf("list row = %+v, %v; want the preempt flag, timeout and preemptible", list, err)
	}
	if a, _ := s.ListAttempts(context.Background(), j.ID); len(a) != 1 || !a[0].Borrowed {
		t.Fatalf("attempt borrowed flag lost: %+v", a)
	}
	// The attempt starts before it is stopped: the request, and the
	// reason and message it set, outlast the start, which the job's
	// events still record.
	mustApply(t, s, store.Change{JobID: j.ID, Move: domain.MoveRun(), Reason: domain.ReasonStarted, Message: "attempt 1 started", At: at(2),
		Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}})
	g = get(t, s, j.ID)
	if g.State != domain.JobRunning || !g.PreemptRequested || g.Reason != domain.ReasonPreempted || g.Message != "preempted for job 9" {
		t.Fatalf("after the start: %s, requested %v, %s %q; want running with the request and its reason", g.State, g.PreemptRequested, g.Reason, g.Message)
	}
	evs, err := s.ListEvents(context.Background(), j.ID)
	if err != nil || len(evs) == 0 || evs[len(evs)-1].To != domain.JobRunning || evs[len(evs)-1].Reason != domain.ReasonStarted {
		t.Fatalf("events = %+v, %v; want the start recorded last", evs, err)
	}
	mustApply(t, s, store.Change{JobID: j.ID, Move: domain.MoveRequeue().Only(domain.JobRunning), CountPreemption: true,
		Reason: domain.ReasonPreempted, At: at(3),
		Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptPreempted}})
	g = get(t, s, j.ID)
	if g.PreemptRequested || g.Preemptions != 1 || g.State != domain.JobQueued {
		t.Fatalf("after the preemption: requested %v, count %d, state %s; want false, 1, queued", g.PreemptRequested, g.Preemptions, g.State)
	}
}

// testAttemptSpans: attempts that ran since a time, running ones included,
// with their job's project, pool, request, submitter and name and the
// attempt's state and reason (a spend report's waste).
func testAttemptSpans(t *testing.T, s store.Store) {
	ctx := context.Background()
	old := startJob(t, s, "old", nil)
	mustApply(t, s, store.Change{JobID: old.ID, Move: domain.MoveSucceed().Only(domain.JobRunning), At: at(5),
		Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptSucceeded}})
	running := startJob(t, s, "running", []int{0})
	create(t, s, newJob(t, testSpec("queued", "p"), "alice", t0)) // never started: no span

	spans, err := s.AttemptSpans(ctx, at(0))
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) != 2 || spans[0].JobID != old.ID || spans[1].JobID != running.ID {
		t.Fatalf("spans since the start = %+v, want the finished and the running attempt", spans)
	}
	sp := spans[0]
	if sp.Project != "p" || sp.Pool != old.Pool || sp.Resources != old.Spec.Resources || !sp.StartedAt.Equal(at(2)) || !sp.FinishedAt.Equal(at(5)) ||
		sp.Timeout != old.Spec.Policy.Timeout || sp.Timeout == 0 {
		t.Errorf("span = %+v", sp)
	}
	if sp.Submitter != "alice" || sp.JobName != "old" || sp.State != domain.AttemptSucceeded {
		t.Errorf("span submitter, name, state = %q, %q, %s; want alice, old, succeeded", sp.Submitter, sp.JobName, sp.State)
	}
	if !spans[1].FinishedAt.IsZero() || spans[1].State != domain.AttemptRunning || spans[1].JobName != "running" {
		t.Errorf("running span has an end or another state: %+v", spans[1])
	}
	later, err := s.AttemptSpans(ctx, at(6))
	if err != nil || len(later) != 1 || later[0].JobID != running.ID {
		t.Fatalf("spans since after the first ended = %+v, %v; want only the running one", later, err)
	}

	failed := startJob(t, s, "failed", nil)
	mustApply(t, s, store.Change{JobID: failed.ID, Move: domain.MoveFail().Only(domain.JobRunning), At: at(7),
		Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptFailed,
			Reason: domain.ReasonOOMKilled, ExitCode: ptr(137)}})
	last, err := s.AttemptSpans(ctx, at(6))
	if err != nil || len(last) != 2 || last[1].JobID != failed.ID {
		t.Fatalf("spans since hour 6 = %+v, %v; want the running and the failed one", last, err)
	}
	if f := last[1]; f.State != domain.AttemptFailed || f.Reason != domain.ReasonOOMKilled || !f.FinishedAt.Equal(at(7)) {
		t.Errorf("failed span = %+v, want state failed, reason %s, end at(7)", f, domain.ReasonOOMKilled)
	}
}

// testPreemptedAttempts: the attempts that ended preempted since a time,
// in finish order, with their messages; other endings and earlier ones
// are left out.
func testPreemptedAttempts(t *testing.T, s store.Store) {
	ctx := context.Background()
	preempt := func(j domain.Job, n int, end int, msg string) {
		t.Helper()
		mustApply(t, s,
			store.Change{JobID: j.ID, In: states(domain.JobRunning), RequestPreempt: true, SetReason: true,
				Reason: domain.ReasonPreempted, Message: msg, At: at(end - 1)},
			store.Change{JobID: j.ID, Move: domain.MoveRequeue().Only(domain.JobRunning), CountPreemption: true,
				Reason: domain.ReasonPreempted, At: at(end),
				Attempt: &store.AttemptChange{Number: n, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptPreempted,
					Reason: domain.ReasonPreempted, Message: msg}},
			store.Change{JobID: j.ID, Move: domain.MoveStart(), At: at(end),
				Attempt: &store.AttemptChange{Number: n + 1, Create: true, To: domain.AttemptStarting, Node: "node-a"}},
			store.Change{JobID: j.ID, Move: domain.MoveRun(), At: at(end),
				Attempt: &store.AttemptChange{Number: n + 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}},
		)
	}
	a := startJob(t, s, "a", nil)
	b := startJob(t, s, "b", nil)
	preempt(a, 1, 4, "preempted for job 90")
	preempt(b, 1, 6, "preempted for job 91")
	preempt(a, 2, 5, "preempted for job 92") // ends before b's
	done := startJob(t, s, "done", nil)
	mustApply(t, s, store.Change{JobID: done.ID, Move: domain.MoveSucceed().Only(domain.JobRunning), At: at(7),
		Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptSucceeded}})

	got, err := s.PreemptedAttempts(ctx, at(5))
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, x := range got {
		seen = append(seen, fmt.Sprintf("%d/%d %s %s", x.JobID, x.Number, x.Message, x.FinishedAt.Format(time.RFC3339Nano)))
	}
	want := []string{
		fmt.Sprintf("%d/2 preempted for job 92 %s", a.ID, at(5).Format(time.RFC3339Nano)),
		fmt.Sprintf("%d/1 preempted for job 91 %s", b.ID, at(6).Format(time.RFC3339Nano)),
	}
	if !slices.Equal(seen, want) {
		t.Fatalf("preempted since %s = %q, want %q", at(5), seen, want)
	}
	if all, err := s.PreemptedAttempts(ctx, t0); err != nil || len(all) != 3 {
		t.Fatalf("preempted since the start = %+v, %v; want all 3", all, err)
	}
}
