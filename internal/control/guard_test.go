package control_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/clock"
	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
)

// holdObserver records what the loop says about preemption holds.
type holdObserver struct {
	mu       sync.Mutex
	held     []domain.PreemptionHold
	heldJobs []domain.Job
	released []int64
}

func (o *holdObserver) Pass(time.Duration, []domain.Pool, map[int64]domain.Job, []domain.Attempt) {}
func (o *holdObserver) Placed(string, string, int, time.Duration)                                 {}
func (o *holdObserver) AttemptEnded(domain.Job, domain.Attempt)                                   {}

func (o *holdObserver) PreemptionHeld(j domain.Job, h domain.PreemptionHold) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.held, o.heldJobs = append(o.held, h), append(o.heldJobs, j)
}

func (o *holdObserver) PreemptionReleased(id int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.released = append(o.released, id)
}

func (o *holdObserver) seen() (held []domain.PreemptionHold, released []int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.held), slices.Clone(o.released)
}

// poll waits until cond holds, failing the test after 10s.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A low-priority job preempted four times within the window (by four
// high-priority jobs in turn) is held: a fifth high-priority job waits
// instead of preempting it, the observer hears of the hold once, with
// every beneficiary, and once the hold ends the job is preempted again.
// Every pass is checked against a full one (checkPass), the passes where
// the hold flips the running job's Preemptible included.
func TestPreemptionGuardHoldsAJobPreemptedTooOften(t *testing.T) {
	clk := clock.NewFake(time.Now())
	obs := &holdObserver{}
	ex := &executortest.Fake{Script: func(executor.Launch) []executor.Event {
		return []executor.Event{{Kind: executor.Started, PID: 1}} // runs until stopped
	}}
	r := newTunedRig(t, ex, func(c *control.Config) {
		c.Clock, c.Observer = clk, obs
		c.PreemptionGuard = control.PreemptionGuard{Max: 3, Window: 30 * time.Minute, Hold: time.Hour}
		// No full read when the clock jumps: the pass after the hold ends
		// is an incremental one, told of the flipped allocation.
		c.Resync, c.UsageRefresh = 100*time.Hour, 100*time.Hour
	})
	get := func(id int64) domain.Job {
		t.Helper()
		j, err := r.st.GetJob(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	const whole = "entrypoint: [x]\nresources: {gpus: 4}\n" // the node's four GPUs
	victim := r.submit("name: sweep\n" + whole + "policy: {priority: low, preemptible: true, reentrant: true}\n")
	r.wait(victim.ID, domain.JobRunning)

	var beneficiaries []int64
	for i := 1; i <= 4; i++ {
		b := r.submit(fmt.Sprintf("name: eval%d\n%spolicy: {priority: high}\n", i, whole))
		beneficiaries = append(beneficiaries, b.ID)
		r.wait(b.ID, domain.JobRunning)
		if v := get(victim.ID); v.Preemptions != i {
			t.Fatalf("after eval%d started the victim was preempted %d times, want %d", i, v.Preemptions, i)
		}
		ex.Emit(executor.Event{Ref: executor.Ref{JobID: b.ID, Attempt: 1}, Kind: executor.Exited, At: clk.Now(),
			State: domain.AttemptSucceeded, Reason: domain.ReasonCompleted})
		r.wait(b.ID, domain.JobSucceeded)
		poll(t, fmt.Sprintf("the victim runs attempt %d", i+1), func() bool {
			v := get(victim.ID)
			return v.State == domain.JobRunning && v.Attempts == i+1
		})
	}
	held, _ := obs.seen()
	if len(held) != 1 {
		t.Fatalf("observer heard of %d holds, want 1: %+v", len(held), held)
	}
	h := held[0]
	if h.JobID != victim.ID || h.Count != 4 || h.Window != 30*time.Minute || !slices.Equal(h.For, beneficiaries) ||
		!h.Until.Equal(clk.Now().Add(time.Hour)) || obs.heldJobs[0].Name != "sweep" {
		t.Fatalf("hold %+v of job %q; want job %d (sweep), 4 preemptions in 30m, for %v, until %s",
			h, obs.heldJobs[0].Name, victim.ID, beneficiaries, clk.Now().Add(time.Hour))
	}
	evs, err := r.st.ListEvents(context.Background(), victim.ID)
	if err != nil {
		t.Fatal(err)
	}
	var requeued, placed string
	for _, e := range evs {
		switch {
		case e.Reason == domain.ReasonPreempted:
			requeued = e.Message
		case e.To == domain.JobStarting:
			placed = e.Message
		}
	}
	for _, msg := range []string{requeued, placed} {
		if !strings.Contains(msg, "held from") || !strings.Contains(msg, "preempted 4 times in 30m, for jobs ") {
			t.Errorf("event %q does not say the job is held from preemption and why", msg)
		}
	}

	// While held, a fifth high-priority job waits; the pass that wrote its
	// reason would have requested the preemption in the same transaction.
	fifth := r.submit("name: eval5\n" + whole + "policy: {priority: high}\n")
	poll(t, "the fifth job has a pending reason", func() bool { return get(fifth.ID).Reason != domain.ReasonSubmitted })
	if v := get(victim.ID); v.State != domain.JobRunning || v.PreemptRequested || v.Preemptions != 4 {
		t.Fatalf("held victim: %s, preempt requested %v, %d preemptions; want running, not requested, 4", v.State, v.PreemptRequested, v.Preemptions)
	}
	if f := get(fifth.ID); f.State != domain.JobQueued {
		t.Fatalf("fifth job is %s (%s), want queued behind the held job", f.State, f.Message)
	}
	if _, released := obs.seen(); len(released) != 0 {
		t.Fatalf("released %v while the hold lasts", released)
	}

	// The hold ends: the next pass preempts the victim for the fifth job.
	clk.Advance(time.Hour)
	r.ctl.Wake()
	r.wait(fifth.ID, domain.JobRunning)
	if v := get(victim.ID); v.Preemptions != 5 {
		t.Fatalf("after the hold the victim was preempted %d times, want 5", v.Preemptions)
	}
	if held, released := obs.seen(); len(held) != 1 || !slices.Equal(released, []int64{victim.ID}) {
		t.Fatalf("holds %+v, released %v; want the one hold, released once", held, released)
	}
}
