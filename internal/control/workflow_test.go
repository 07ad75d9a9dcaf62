package control_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/service"
	"trainyard/internal/store"
)

// runsUntilTold is an executor whose attempts start and run until the test
// ends them with finish.
func runsUntilTold() *executortest.Fake {
	return &executortest.Fake{Script: func(executor.Launch) []executor.Event {
		return []executor.Event{{Kind: executor.Started, PID: 1}}
	}}
}

// finish ends job id's first attempt as state says.
func (r *rig) finish(id int64, state domain.AttemptState) {
	r.t.Helper()
	ev := executor.Event{Ref: executor.Ref{JobID: id, Attempt: 1}, Kind: executor.Exited, At: time.Now().UTC(), State: state, Reason: domain.ReasonCompleted}
	if state != domain.AttemptSucceeded {
		ev = exited(state, domain.ReasonExitCode, 3)
		ev.Ref = executor.Ref{JobID: id, Attempt: 1}
	}
	r.ex.Emit(ev)
}

// heldNow asserts that job id is held now. The tests call it where the
// loop, had it released the job, would have done so in the same write
// as something the test has already waited for.
func (r *rig) heldNow(id int64) {
	r.t.Helper()
	j, err := r.st.GetJob(context.Background(), id)
	if err != nil {
		r.t.Fatal(err)
	}
	if j.State != domain.JobHeld {
		r.t.Fatalf("job %d is %s (%s: %s), want still held", id, j.State, j.Reason, j.Message)
	}
}

// judged waits until the loop has looked at waiting job id and written
// what it waits for, with its target's state (msg, e.g. "(it is
// running)"), and asserts that it is still held.
func (r *rig) judged(id int64, msg string) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		j, err := r.st.GetJob(context.Background(), id)
		if err != nil {
			r.t.Fatal(err)
		}
		if j.State != domain.JobHeld {
			r.t.Fatalf("job %d is %s (%s: %s), want still held", id, j.State, j.Reason, j.Message)
		}
		if strings.Contains(j.Message, msg) {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("job %d says %q; the loop never wrote %q", id, j.Message, msg)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestDependentJobStartsWhenItsDependencySucceeds(t *testing.T) {
	r := newRig(t, runsUntilTold())
	first := r.submit("name: first\nentrypoint: [x]\n")
	r.wait(first.ID, domain.JobRunning)
	next := r.submit("name: next\nentrypoint: [x]\nafter: [{job: " + itoa(first.ID) + ", on: succeeded}]\n")
	cleanup := r.submit("name: cleanup\nentrypoint: [x]\nafter: [{job: " + itoa(first.ID) + ", on: failed}]\n")
	r.judged(next.ID, "(it is running)")
	if j := r.wait(next.ID, domain.JobHeld); j.Reason != domain.ReasonDependency || !strings.Contains(j.Message, "job "+itoa(first.ID)) {
		t.Errorf("waiting job: %s %q; want Dependency naming job %d", j.Reason, j.Message, first.ID)
	}
	r.finish(first.ID, domain.AttemptSucceeded)
	r.wait(first.ID, domain.JobSucceeded)
	r.wait(next.ID, domain.JobRunning)
	// The job waiting for a failure never runs.
	j := r.wait(cleanup.ID, domain.JobFailed)
	if j.Reason != domain.ReasonDependencyFailed || !strings.Contains(j.Message, "job "+itoa(first.ID)+" succeeded") {
		t.Errorf("cleanup job: %s %q; want DependencyFailed naming job %d succeeded", j.Reason, j.Message, first.ID)
	}
	if a := r.attempts(cleanup.ID); len(a) != 0 {
		t.Errorf("the job whose dependency failed has %d attempts, want none", len(a))
	}
}

func TestDependentJobFailsWhenItsDependencyFails(t *testing.T) {
	r := newRig(t, runsUntilTold())
	first := r.submit("name: first\nentrypoint: [x]\n")
	next := r.submit("name: next\nentrypoint: [x]\nafter: [{job: " + itoa(first.ID) + ", on: succeeded}]\n")
	report := r.submit("name: report\nentrypoint: [x]\nafter: [{job: " + itoa(first.ID) + ", on: ended}]\n")
	r.wait(first.ID, domain.JobRunning)
	r.finish(first.ID, domain.AttemptFailed)
	r.wait(first.ID, domain.JobFailed)
	j := r.wait(next.ID, domain.JobFailed)
	if j.Reason != domain.ReasonDependencyFailed || !strings.Contains(j.Message, "job "+itoa(first.ID)+" failed") {
		t.Errorf("dependent job: %s %q; want DependencyFailed naming job %d failed", j.Reason, j.Message, first.ID)
	}
	if a := r.attempts(next.ID); len(a) != 0 {
		t.Errorf("the dependent job has %d attempts, want none", len(a))
	}
	// ended is met by a failure.
	r.wait(report.ID, domain.JobRunning)
}

func TestSweepKeepsToMaxParallel(t *testing.T) {
	r := newRig(t, runsUntilTold())
	ctx := context.Background()
	res, err := r.svc.Jobs.SubmitSweep(ctx, admin, service.SweepInput{Doc: []byte(
		"name: grid\nentrypoint: [x]\nresources: {cpus: 1}\nsweep: {params: {lr: [\"1\", \"2\", \"3\", \"4\", \"5\"]}, max_parallel: 2}\n")})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Sweep.ID

	// Sample the members' counts all along: never more than 2 live.
	var mu sync.Mutex
	most := 0
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			c, err := r.st.SweepCounts(ctx, id)
			if err != nil {
				continue
			}
			mu.Lock()
			most = max(most, c[domain.JobQueued]+c[domain.JobStarting]+c[domain.JobRunning])
			mu.Unlock()
		}
	}()

	ended := map[int64]bool{}
	deadline := time.Now().Add(20 * time.Second)
	for len(ended) < len(res.Jobs) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d members ended before the deadline", len(ended), len(res.Jobs))
		}
		running, err := r.st.ListJobs(ctx, store.JobFilter{Sweep: id, States: []domain.JobState{domain.JobRunning}, Ascending: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(running) > 2 {
			t.Fatalf("%d members running, max_parallel is 2", len(running))
		}
		if len(running) == 0 {
			time.Sleep(time.Millisecond)
			continue
		}
		m := running[0]
		r.finish(m.ID, domain.AttemptSucceeded)
		r.wait(m.ID, domain.JobSucceeded)
		ended[m.ID] = true
	}
	close(stop)
	<-done
	if most > 2 {
		t.Errorf("up to %d members were queued or running at once; max_parallel is 2", most)
	}
	if most < 2 {
		t.Errorf("at most %d members were live at once; want 2 (max_parallel used)", most)
	}
	// Members ran in index order.
	for i, jid := range res.Jobs {
		j := r.wait(jid, domain.JobSucceeded)
		if j.Spec.Labels[domain.ArrayIndexLabel] != itoa(int64(i)) {
			t.Errorf("member %d has index %s", i, j.Spec.Labels[domain.ArrayIndexLabel])
		}
	}
	v, err := r.svc.Jobs.GetSweep(ctx, admin, id)
	if err != nil || v.State != domain.JobSucceeded || v.Counts[domain.JobSucceeded] != 5 {
		t.Errorf("sweep: state %s counts %v (%v); want 5 succeeded", v.State, v.Counts, err)
	}
}

// TestSweepMemberReleasedByAPersonRunsWhenThereIsRoom: a member held by
// a person while it waited for its sweep's max_parallel, and released
// after a place opened, starts at once, not at the loop's next full look.
func TestSweepMemberReleasedByAPersonRunsWhenThereIsRoom(t *testing.T) {
	r := newRig(t, runsUntilTold())
	ctx := context.Background()
	res, err := r.svc.Jobs.SubmitSweep(ctx, admin, service.SweepInput{Doc: []byte(
		"name: grid\nentrypoint: [x]\nresources: {cpus: 1}\nsweep: {params: {lr: [\"1\", \"2\"]}, max_parallel: 1}\n")})
	if err != nil {
		t.Fatal(err)
	}
	first, second := res.Jobs[0], res.Jobs[1]
	r.wait(first, domain.JobRunning)
	if _, err := r.svc.Jobs.Hold(ctx, admin, second, "look at the first one"); err != nil {
		t.Fatal(err)
	}
	r.finish(first, domain.AttemptSucceeded)
	r.wait(first, domain.JobSucceeded)
	r.heldNow(second)
	if _, err := r.svc.Jobs.Release(ctx, admin, second); err != nil {
		t.Fatal(err)
	}
	r.wait(second, domain.JobRunning)
}

func TestWaiterOnASweepStartsWhenEveryMemberEnded(t *testing.T) {
	r := newRig(t, runsUntilTold())
	ctx := context.Background()
	res, err := r.svc.Jobs.SubmitSweep(ctx, admin, service.SweepInput{Doc: []byte("name: arr\nentrypoint: [x]\nresources: {cpus: 1}\n"), Array: "0-1"})
	if err != nil {
		t.Fatal(err)
	}
	after := r.submit("name: after\nentrypoint: [x]\nafter: [{sweep: " + itoa(res.Sweep.ID) + ", on: ended}]\n")
	r.wait(res.Jobs[0], domain.JobRunning)
	r.wait(res.Jobs[1], domain.JobRunning)
	// A witness waits for the member that ends: once it runs, the loop has
	// looked at that end, and at the sweep, in the same cycle.
	witness := r.submit("name: witness\nentrypoint: [x]\nafter: [{job: " + itoa(res.Jobs[0]) + ", on: ended}]\n")
	r.finish(res.Jobs[0], domain.AttemptFailed)
	r.wait(res.Jobs[0], domain.JobFailed)
	r.wait(witness.ID, domain.JobRunning)
	r.heldNow(after.ID)
	r.finish(res.Jobs[1], domain.AttemptSucceeded)
	r.wait(after.ID, domain.JobRunning)
}

func TestRestartResolvesWhatEndedWhileNoLoopRan(t *testing.T) {
	r := newRig(t, runsUntilTold())
	first := r.submit("name: first\nentrypoint: [x]\n")
	r.wait(first.ID, domain.JobRunning)
	next := r.submit("name: next\nentrypoint: [x]\nafter: [{job: " + itoa(first.ID) + ", on: succeeded}]\n")
	r.judged(next.ID, "(it is running)")

	// No loop runs while the job ends (another leader wrote it, then
	// stopped): the next leader finds the waiter by a full look.
	r.stop()
	r.stop = nil
	now := time.Now()
	errs, err := r.st.Apply(context.Background(), []store.Change{{JobID: first.ID, Move: domain.MoveSucceed(), Reason: domain.ReasonCompleted, At: now,
		Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptSucceeded}}})
	if err != nil || errs[0] != nil {
		t.Fatalf("end the first job: %v %v", err, errs)
	}
	if j := r.wait(next.ID, domain.JobHeld); j.Reason != domain.ReasonDependency {
		t.Fatalf("waiter is %s before the restart", j.Reason)
	}
	r.start()
	r.wait(next.ID, domain.JobRunning)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Members that wait for a job, then for their sweep's max_parallel.
func TestSweepMembersWaitForTheirDependencyThenMaxParallel(t *testing.T) {
	r := newRig(t, runsUntilTold())
	ctx := context.Background()
	first := r.submit("name: first\nentrypoint: [x]\n")
	r.wait(first.ID, domain.JobRunning)
	res, err := r.svc.Jobs.SubmitSweep(ctx, admin, service.SweepInput{Doc: []byte(
		"name: arr\nentrypoint: [x]\nresources: {cpus: 1}\nafter: [{job: " + itoa(first.ID) + ", on: succeeded}]\n"), Array: "0-2%1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range res.Jobs {
		if j := r.wait(id, domain.JobHeld); j.Reason != domain.ReasonDependency {
			t.Errorf("member %d held for %s, want Dependency", id, j.Reason)
		}
	}
	r.finish(first.ID, domain.AttemptSucceeded)
	r.wait(res.Jobs[0], domain.JobRunning)
	r.heldNow(res.Jobs[1]) // a second release would have been in the first's write
	for _, id := range res.Jobs[1:] {
		if j := r.wait(id, domain.JobHeld); j.Reason != domain.ReasonSweepLimit {
			t.Errorf("member %d held for %s (%s), want SweepLimit once its dependency is met", id, j.Reason, j.Message)
		}
	}
	r.finish(res.Jobs[0], domain.AttemptSucceeded)
	r.wait(res.Jobs[1], domain.JobRunning)
	r.heldNow(res.Jobs[2])
	r.finish(res.Jobs[1], domain.AttemptSucceeded)
	r.wait(res.Jobs[2], domain.JobRunning)
}

// A canceled sweep stops its running member and never starts its held
// ones; its dependents see it canceled.
func TestCanceledSweepEndsItsMembersAndTellsItsDependents(t *testing.T) {
	r := newRig(t, runsUntilTold())
	ctx := context.Background()
	res, err := r.svc.Jobs.SubmitSweep(ctx, admin, service.SweepInput{Doc: []byte("name: arr\nentrypoint: [x]\nresources: {cpus: 1}\n"), Array: "0-2%1"})
	if err != nil {
		t.Fatal(err)
	}
	sw := itoa(res.Sweep.ID)
	onFail := r.submit("name: onfail\nentrypoint: [x]\nafter: [{sweep: " + sw + ", on: failed}]\n")
	onOK := r.submit("name: onok\nentrypoint: [x]\nafter: [{sweep: " + sw + ", on: succeeded}]\n")
	r.wait(res.Jobs[0], domain.JobRunning)
	if _, err := r.svc.Jobs.CancelSweep(ctx, admin, res.Sweep.ID, "enough"); err != nil {
		t.Fatal(err)
	}
	for _, id := range res.Jobs {
		r.wait(id, domain.JobCanceled)
	}
	for _, id := range res.Jobs[1:] {
		if a := r.attempts(id); len(a) != 0 {
			t.Errorf("held member %d ran %d attempts after the cancel", id, len(a))
		}
	}
	r.wait(onFail.ID, domain.JobRunning)
	if j := r.wait(onOK.ID, domain.JobFailed); j.Reason != domain.ReasonDependencyFailed {
		t.Errorf("the job waiting for the sweep to succeed: %s %q; want DependencyFailed", j.Reason, j.Message)
	}
}
