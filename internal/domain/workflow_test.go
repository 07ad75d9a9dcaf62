package domain

import "testing"

func TestDependencyJudge(t *testing.T) {
	for _, c := range []struct {
		on    DependOn
		state JobState
		want  Verdict
	}{
		{DependSucceeded, JobQueued, DependPending},
		{DependSucceeded, JobHeld, DependPending},
		{DependSucceeded, JobRunning, DependPending},
		{DependSucceeded, JobSucceeded, DependMet},
		{DependSucceeded, JobFailed, DependNever},
		{DependSucceeded, JobCanceled, DependNever},
		{DependFailed, JobStarting, DependPending},
		{DependFailed, JobSucceeded, DependNever},
		{DependFailed, JobFailed, DependMet},
		{DependFailed, JobCanceled, DependMet},
		{DependEnded, JobRunning, DependPending},
		{DependEnded, JobSucceeded, DependMet},
		{DependEnded, JobFailed, DependMet},
		{DependEnded, JobCanceled, DependMet},
	} {
		if got := (Dependency{Job: 1, On: c.on}).Judge(c.state); got != c.want {
			t.Errorf("on %s, target %s: verdict %d, want %d", c.on, c.state, got, c.want)
		}
	}
}

func TestSweepState(t *testing.T) {
	for _, c := range []struct {
		counts map[JobState]int
		want   JobState
	}{
		{map[JobState]int{JobSucceeded: 3}, JobSucceeded},
		{map[JobState]int{JobSucceeded: 3, JobHeld: 1}, JobRunning},
		{map[JobState]int{JobFailed: 1, JobQueued: 1}, JobRunning},
		{map[JobState]int{JobSucceeded: 2, JobCanceled: 1}, JobCanceled},
		{map[JobState]int{JobFailed: 1, JobCanceled: 1, JobSucceeded: 1}, JobFailed},
		{map[JobState]int{JobRunning: 0, JobSucceeded: 1}, JobSucceeded}, // a zero count is no member
	} {
		if got := SweepState(c.counts); got != c.want {
			t.Errorf("SweepState(%v) = %s, want %s", c.counts, got, c.want)
		}
	}
}

func TestWaitMessage(t *testing.T) {
	deps := []Dependency{{Job: 12, On: DependSucceeded}, {Sweep: 3, On: DependEnded}, {Job: 4, On: DependFailed}}
	got := WaitMessage(deps, map[string]JobState{"sweep 3": JobRunning})
	want := "waits for job 12 to succeed; waits for sweep 3 to end (it is running); waits for job 4 to fail"
	if got != want {
		t.Errorf("WaitMessage = %q,\nwant %q", got, want)
	}
	if got := WaitMessage(nil, nil); got != "" {
		t.Errorf("WaitMessage(none) = %q, want empty", got)
	}
}

func TestObjectiveBetter(t *testing.T) {
	if !(Objective{Goal: "minimize"}).Better(1, 2) || (Objective{Goal: "minimize"}).Better(2, 1) {
		t.Error("minimize: lower must be better")
	}
	if !(Objective{Goal: "maximize"}).Better(2, 1) || (Objective{Goal: "maximize"}).Better(1, 2) {
		t.Error("maximize: higher must be better")
	}
	if (Objective{}).Better(1, 1) {
		t.Error("a tie is not better")
	}
}
