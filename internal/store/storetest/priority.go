package storetest

import (
	"context"
	"errors"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// priorityTests cover a change of a waiting job's priority class
// (store.Change.Priority).
var priorityTests = map[string]func(t *testing.T, s store.Store){
	"PriorityChange":        testPriorityChange,
	"PriorityChangeGuarded": testPriorityChangeGuarded,
}

// testPriorityChange: the job row (read every way the scheduler and the
// show read it) carries the new class, the spec keeps the submitted one,
// an event records the change without a move, the change reaches
// ChangedJobs, and its audit record is appended with it.
func testPriorityChange(t *testing.T, s store.Store) {
	ctx := context.Background()
	spec := testSpec("prio", "p")
	spec.Policy.Priority = domain.PriorityNormal
	j := create(t, s, newJob(t, spec, "alice", t0))
	other := create(t, s, newJob(t, testSpec("other", "p"), "alice", at(1)))
	_, cur, err := s.LiveJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec := domain.AuditRecord{Actor: "user:alice", Action: "job.priority", Target: "job/1", Result: domain.AuditOK}
	mustApply(t, s, store.Change{JobID: j.ID, In: states(domain.JobQueued, domain.JobHeld), Priority: domain.PriorityUrgent,
		Reason: domain.ReasonPriorityChanged, Message: "priority normal → urgent by alice", Actor: "user:alice", At: at(5), Audit: &rec})

	g := get(t, s, j.ID)
	if g.Priority != domain.PriorityUrgent || g.State != domain.JobQueued {
		t.Errorf("after the change: priority %s, state %s; want urgent, queued", g.Priority, g.State)
	}
	if g.Spec.Policy.Priority != domain.PriorityNormal {
		t.Errorf("the change rewrote the spec's priority to %s; the config snapshot keeps normal", g.Spec.Policy.Priority)
	}
	if g.Reason != j.Reason || g.Message != j.Message {
		t.Errorf("the change set reason %s %q; the job's reason stays %s %q", g.Reason, g.Message, j.Reason, j.Message)
	}
	if o := get(t, s, other.ID); o.Priority != other.Priority {
		t.Errorf("another job's priority became %s", o.Priority)
	}
	evs := events(t, s, j.ID)
	last := evs[len(evs)-1]
	if last.From != domain.JobQueued || last.To != domain.JobQueued || last.Reason != domain.ReasonPriorityChanged ||
		last.Actor != "user:alice" || last.Message != "priority normal → urgent by alice" || !last.At.Equal(at(5)) {
		t.Errorf("last event = %+v; want queued → queued, PriorityChanged by user:alice at %v", last, at(5))
	}
	changed, _, err := s.ChangedJobs(ctx, cur)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range changed {
		if c.ID == j.ID {
			found = true
			if c.Priority != domain.PriorityUrgent {
				t.Errorf("ChangedJobs row has priority %s, want urgent", c.Priority)
			}
		}
	}
	if !found {
		t.Errorf("ChangedJobs since before the change misses job %d: the scheduler would not see it", j.ID)
	}
	list, err := s.ListJobs(ctx, store.JobFilter{States: states(domain.JobQueued)})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range list {
		if l.ID == j.ID && l.Priority != domain.PriorityUrgent {
			t.Errorf("ListJobs row has priority %s, want urgent", l.Priority)
		}
	}
	d, err := s.JobDetail(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.Job.Priority != domain.PriorityUrgent {
		t.Errorf("JobDetail has priority %s, want urgent", d.Job.Priority)
	}
	recs, err := s.ListAudit(ctx, store.AuditFilter{Action: "job.priority"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Actor != "user:alice" {
		t.Errorf("audit records of the change = %+v; want one by user:alice", recs)
	}

	// Held jobs change too; the event keeps the held state.
	mustApply(t, s, store.Change{JobID: j.ID, Move: domain.MoveHold(), Reason: domain.ReasonHeld, At: at(6)})
	mustApply(t, s, store.Change{JobID: j.ID, In: states(domain.JobQueued, domain.JobHeld), Priority: domain.PriorityLow,
		Reason: domain.ReasonPriorityChanged, Actor: "user:alice", At: at(7)})
	if g := get(t, s, j.ID); g.Priority != domain.PriorityLow || g.State != domain.JobHeld || g.Reason != domain.ReasonHeld {
		t.Errorf("held job after the change: %s, %s (%s); want low, held (Held)", g.Priority, g.State, g.Reason)
	}
	evs = events(t, s, j.ID)
	if last := evs[len(evs)-1]; last.From != domain.JobHeld || last.To != domain.JobHeld {
		t.Errorf("event of a held job's change: %s → %s, want held → held", last.From, last.To)
	}
}

// testPriorityChangeGuarded: a job not in the guard's states keeps its
// class, gets no event and appends no audit record; an unknown class,
// or a class given with a move, is invalid.
func testPriorityChangeGuarded(t *testing.T, s store.Store) {
	ctx := context.Background()
	j := create(t, s, newJob(t, testSpec("started", "p"), "alice", t0))
	mustApply(t, s, store.Change{JobID: j.ID, Move: domain.MoveStart(), At: at(1),
		Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting, Node: "n"}})
	before := len(events(t, s, j.ID))
	rec := domain.AuditRecord{Actor: "user:alice", Action: "job.priority.guarded", Target: "job/x", Result: domain.AuditOK}
	errs := apply(t, s, store.Change{JobID: j.ID, In: states(domain.JobQueued, domain.JobHeld), Priority: domain.PriorityLow,
		Reason: domain.ReasonPriorityChanged, At: at(2), Audit: &rec})
	if !errors.Is(errs[0], store.ErrConflict) {
		t.Errorf("change of a starting job guarded on queued: err = %v, want ErrConflict", errs[0])
	}
	if g := get(t, s, j.ID); g.Priority != j.Priority {
		t.Errorf("a refused change set priority %s", g.Priority)
	}
	if n := len(events(t, s, j.ID)); n != before {
		t.Errorf("a refused change recorded %d event(s)", n-before)
	}
	if recs, err := s.ListAudit(ctx, store.AuditFilter{Action: "job.priority.guarded"}); err != nil || len(recs) != 0 {
		t.Errorf("a refused change appended audit %+v, %v", recs, err)
	}

	q := create(t, s, newJob(t, testSpec("queued", "p"), "alice", at(3)))
	for name, ch := range map[string]store.Change{
		"unknown class": {JobID: q.ID, In: states(domain.JobQueued), Priority: "top", At: at(4)},
		"with a move":   {JobID: q.ID, Move: domain.MoveHold(), Priority: domain.PriorityLow, At: at(4)},
	} {
		if errs := apply(t, s, ch); !errors.Is(errs[0], domain.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, errs[0])
		}
	}
	if g := get(t, s, q.ID); g.Priority != q.Priority || g.State != domain.JobQueued {
		t.Errorf("invalid changes left %s, %s; want %s, queued", g.Priority, g.State, q.Priority)
	}
}
