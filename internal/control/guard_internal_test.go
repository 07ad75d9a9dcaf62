package control

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// More than Max preemptions within the window hold the job, naming every
// beneficiary once; the hold ends exactly Hold after the preemption that
// began it.
func TestGuardHoldsAfterMaxPreemptionsInTheWindow(t *testing.T) {
	g := newGuard(PreemptionGuard{Max: 3, Window: 30 * time.Minute, Hold: time.Hour})
	for i, forJob := range []int64{9, 7, 9} {
		if h, ok := g.record(1, forJob, t0.Add(time.Duration(i)*time.Minute)); ok {
			t.Fatalf("preemption %d began a hold: %+v", i+1, h)
		}
	}
	last := t0.Add(29 * time.Minute)
	h, ok := g.record(1, 8, last)
	if !ok || h.JobID != 1 || h.Count != 4 || !h.At.Equal(last) || !h.Until.Equal(last.Add(time.Hour)) || !slices.Equal(h.For, []int64{7, 8, 9}) {
		t.Fatalf("4th preemption: %+v, %v; want a hold of job 1, 4 preemptions, for 7, 8, 9, until %s", h, ok, last.Add(time.Hour))
	}
	if want := "preempted 4 times in 30m, for jobs 7, 8, 9"; h.Cause() != want {
		t.Errorf("cause %q, want %q", h.Cause(), want)
	}
	if _, again := g.record(1, 8, last.Add(time.Second)); again || g.held[1].Count != 4 {
		t.Errorf("a preemption while held began another hold or changed it: %+v", g.held[1])
	}
	if g.isHeld(2) {
		t.Error("job 2 is held without a preemption")
	}

	if ended := g.expire(h.Until.Add(-time.Nanosecond)); len(ended) != 0 || !g.isHeld(1) {
		t.Fatalf("before its end the hold ended: %+v", ended)
	}
	if ended := g.expire(h.Until); len(ended) != 1 || ended[0].JobID != 1 || g.isHeld(1) {
		t.Fatalf("at its end: ended %+v, held %v; want job 1's hold ended", ended, g.isHeld(1))
	}
	if len(g.recent) != 0 || !g.next.IsZero() {
		t.Errorf("after the window passed the guard still keeps %v (next %s)", g.recent, g.next)
	}
}

// Preemptions further apart than the window never add up to a hold.
func TestGuardForgetsPreemptionsOutsideTheWindow(t *testing.T) {
	g := newGuard(PreemptionGuard{Max: 3, Window: 30 * time.Minute, Hold: time.Hour})
	for i := range 20 {
		at := t0.Add(time.Duration(i) * 11 * time.Minute) // at most 3 in any 30 minutes
		g.expire(at)
		if h, ok := g.record(1, 2, at); ok {
			t.Fatalf("preemption %d at +%s began a hold: %+v", i+1, at.Sub(t0), h)
		}
	}
	if n := len(g.recent[1]); n != 3 {
		t.Errorf("the guard keeps %d preemptions, want the 3 within the window", n)
	}
}

// Max 0 turns the guard off.
func TestGuardOff(t *testing.T) {
	g := newGuard(PreemptionGuard{Window: time.Minute, Hold: time.Hour})
	for i := range 10 {
		if _, ok := g.record(1, 2, t0.Add(time.Duration(i))); ok {
			t.Fatal("a guard with max 0 held a job")
		}
	}
	if len(g.recent) != 0 {
		t.Errorf("an off guard keeps history: %v", g.recent)
	}
}

// Replaying the recorded preemptions restores the holds in force: a hold
// that ended before now is not, one that ended and began again is, and
// beneficiaries come from the attempts' messages.
func TestGuardRebuildsHoldsFromPreemptedAttempts(t *testing.T) {
	ended := func(job int64, min int, msg string) domain.Attempt {
		return domain.Attempt{JobID: job, State: domain.AttemptPreempted, Message: msg, FinishedAt: t0.Add(time.Duration(min) * time.Minute)}
	}
	atts := []domain.Attempt{
		ended(3, -80, ""), ended(3, -79, ""), ended(3, -78, ""), ended(3, -77, ""), // held until -17m
		ended(2, -75, ""), ended(2, -74, ""), ended(2, -73, ""), ended(2, -72, ""), // held until -12m
		ended(3, -5, "preempted for job 9 (priority high) in pool standard"), ended(3, -4, ""), ended(3, -3, ""),
		ended(3, -2, "preempted for job 9: project nlp reclaims its quota in pool standard, and this job ran on borrowed capacity"),
		ended(1, 0, "preempted for job 7 (priority high) in pool a"), ended(1, 1, "preempted for job 8 (priority urgent) in pool a"),
		ended(1, 2, "stopped"), ended(1, 3, "preempted for job 7 (priority high) in pool a"),
	}
	g := newGuard(PreemptionGuard{Max: 3, Window: 30 * time.Minute, Hold: time.Hour})
	holds := g.rebuild(atts, t0.Add(10*time.Minute))
	var got []string
	for _, h := range holds {
		got = append(got, fmt.Sprintf("job %d until %s: %s", h.JobID, h.Until.Sub(t0), h.Cause()))
	}
	want := []string{
		"job 1 until 1h3m0s: preempted 4 times in 30m, for jobs 7, 8 and others",
		"job 3 until 58m0s: preempted 4 times in 30m, for job 9 and others",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("rebuilt holds:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !g.isHeld(1) || g.isHeld(2) || !g.isHeld(3) {
		t.Errorf("held: 1 %v, 2 %v, 3 %v; want 1 and 3", g.isHeld(1), g.isHeld(2), g.isHeld(3))
	}
}
