package control

import (
	"slices"
	"testing"
	"time"
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
