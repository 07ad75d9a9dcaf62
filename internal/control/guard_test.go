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

func (o *holdObserver) Pass(time.Duration)                           {}
func (o *holdObserver) View(control.View)                            {}
func (o *holdObserver) Placed(string, string, int, time.Duration)    {}
func (o *holdObserver) AttemptEnded(domain.Job, domain.Attempt)      {}
func (o *holdObserver) LogLimited(domain.Job, int, int64, time.Time) {}
func (o *holdObserver) GrantsExpiring([]domain.GrantNotice)          {}

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

// guardRig is a rig whose controllers run a guard of max 3 preemptions in
// 30 minutes, held for an hour, on a fake clock, telling obs (replaceable
// before a restart); its jobs run until stopped.
type guardRig struct {
	*rig
	clk *clock.Fake
	obs *holdObserver
}

func newGuardRig(t *testing.T) *guardRig {
	g := &guardRig{clk: clock.NewFake(time.Now()), obs: &holdObserver{}}
	ex := &executortest.Fake{Script: func(executor.Launch) []executor.Event {
		return []executor.Event{{Kind: executor.Started, PID: 1}}
	}}
	g.rig = newTunedRig(t, ex, func(c *control.Config) {
		c.Clock, c.Observer = g.clk, g.obs
		c.PreemptionGuard = control.PreemptionGuard{Max: 3, Window: 30 * time.Minute, Hold: time.Hour}
		// No full read when the clock jumps: the pass after a hold ends
		// is an incremental one, told of the flipped allocation.
		c.Resync, c.UsageRefresh = 100*time.Hour, 100*time.Hour
	})
	return g
}

// whole asks for the fake node's four GPUs.
const whole = "entrypoint: [x]\nresources: {gpus: 4}\n"

func (g *guardRig) get(id int64) domain.Job {
	g.t.Helper()
	j, err := g.st.GetJob(context.Background(), id)
	if err != nil {
		g.t.Fatal(err)
	}
	return j
}

// preemptFourTimes runs a low-priority job and preempts it four times, by
// four high-priority jobs in turn, each of which then succeeds; it returns
// the victim (running its fifth attempt) and the beneficiaries.
func (g *guardRig) preemptFourTimes() (domain.Job, []int64) {
	t := g.t
	t.Helper()
	victim := g.submit("name: sweep\n" + whole + "policy: {priority: low, preemptible: true, reentrant: true}\n")
	g.wait(victim.ID, domain.JobRunning)
	var beneficiaries []int64
	for i := 1; i <= 4; i++ {
		b := g.submit(fmt.Sprintf("name: eval%d\n%spolicy: {priority: high}\n", i, whole))
		beneficiaries = append(beneficiaries, b.ID)
		g.wait(b.ID, domain.JobRunning)
		if v := g.get(victim.ID); v.Preemptions != i {
			t.Fatalf("after eval%d started the victim was preempted %d times, want %d", i, v.Preemptions, i)
		}
		g.ex.Emit(executor.Event{Ref: executor.Ref{JobID: b.ID, Attempt: 1}, Kind: executor.Exited, At: g.clk.Now(),
			State: domain.AttemptSucceeded, Reason: domain.ReasonCompleted})
		g.wait(b.ID, domain.JobSucceeded)
		poll(t, fmt.Sprintf("the victim runs attempt %d", i+1), func() bool {
			v := g.get(victim.ID)
			return v.State == domain.JobRunning && v.Attempts == i+1
		})
	}
	return victim, beneficiaries
}

// notPreemptedFor submits a high-priority job that needs the victim's
// GPUs and checks that the pass deciding it leaves the victim running: the
// pass that writes its pending reason would request the preemption in the
// same transaction.
func (g *guardRig) notPreemptedFor(victim domain.Job) domain.Job {
	t := g.t
	t.Helper()
	next := g.submit("name: eval5\n" + whole + "policy: {priority: high}\n")
	poll(t, "the new job has a pending reason", func() bool { return g.get(next.ID).Reason != domain.ReasonSubmitted })
	if v := g.get(victim.ID); v.State != domain.JobRunning || v.PreemptRequested || v.Preemptions != 4 {
		t.Fatalf("held victim: %s, preempt requested %v, %d preemptions; want running, not requested, 4", v.State, v.PreemptRequested, v.Preemptions)
	}
	if n := g.get(next.ID); n.State != domain.JobQueued {
		t.Fatalf("new job is %s (%s), want queued behind the held job", n.State, n.Message)
	}
	return next
}

// A low-priority job preempted four times within the window (by four
// high-priority jobs in turn) is held: a fifth high-priority job waits
// instead of preempting it, the observer hears of the hold once, with
// every beneficiary, and once the hold ends the job is preempted again.
// Every pass is checked against a full one (checkPass), the passes where
// the hold flips the running job's Preemptible included.
func TestPreemptionGuardHoldsAJobPreemptedTooOften(t *testing.T) {
	g := newGuardRig(t)
	victim, beneficiaries := g.preemptFourTimes()
	// Each stop request names the job it makes room for.
	reqs := g.ex.StopRequests()
	if len(reqs) == 0 || reqs[0].Reason != domain.ReasonPreempted || reqs[0].Message != fmt.Sprintf("preempted for job %d", beneficiaries[0]) {
		t.Errorf("stop requests %+v, want the first Preempted for job %d", reqs, beneficiaries[0])
	}
	held, _ := g.obs.seen()
	if len(held) != 1 {
		t.Fatalf("observer heard of %d holds, want 1: %+v", len(held), held)
	}
	h := held[0]
	if h.JobID != victim.ID || h.Count != 4 || h.Window != 30*time.Minute || !slices.Equal(h.For, beneficiaries) ||
		!h.Until.Equal(g.clk.Now().Add(time.Hour)) || g.obs.heldJobs[0].Name != "sweep" {
		t.Fatalf("hold %+v of job %q; want job %d (sweep), 4 preemptions in 30m, for %v, until %s",
			h, g.obs.heldJobs[0].Name, victim.ID, beneficiaries, g.clk.Now().Add(time.Hour))
	}
	evs, err := g.st.ListEvents(context.Background(), victim.ID)
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
		if !strings.Contains(msg, "held from preemption until") || !strings.Contains(msg, "preempted 4 times in 30m, for jobs ") {
			t.Errorf("event %q does not say the job is held from preemption and why", msg)
		}
	}

	fifth := g.notPreemptedFor(victim)
	if _, released := g.obs.seen(); len(released) != 0 {
		t.Fatalf("released %v while the hold lasts", released)
	}

	// The hold ends: the next pass preempts the victim for the fifth job.
	g.clk.Advance(time.Hour)
	g.ctl.Wake()
	g.wait(fifth.ID, domain.JobRunning)
	if v := g.get(victim.ID); v.Preemptions != 5 {
		t.Fatalf("after the hold the victim was preempted %d times, want 5", v.Preemptions)
	}
	if held, released := g.obs.seen(); len(held) != 1 || !slices.Equal(released, []int64{victim.ID}) {
		t.Fatalf("holds %+v, released %v; want the one hold, released once", held, released)
	}
}

// A new controller (a restart, or a new leader) rebuilds the hold from the
// attempts that ended preempted, beneficiaries included, and keeps it.
func TestPreemptionGuardSurvivesARestart(t *testing.T) {
	g := newGuardRig(t)
	victim, beneficiaries := g.preemptFourTimes()
	g.obs = &holdObserver{}
	g.restart()
	poll(t, "the new controller tells of the hold", func() bool { held, _ := g.obs.seen(); return len(held) > 0 })
	held, _ := g.obs.seen()
	if len(held) != 1 || held[0].JobID != victim.ID || held[0].Count != 4 || !slices.Equal(held[0].For, beneficiaries) ||
		held[0].Until.Before(g.clk.Now().Add(59*time.Minute)) {
		t.Fatalf("after the restart the observer heard of %+v; want job %d held, 4 preemptions, for %v, for about an hour", held, victim.ID, beneficiaries)
	}
	g.notPreemptedFor(victim)
}
