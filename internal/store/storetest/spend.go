package storetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// testSpendTotals: the database's sums of held time by group, pool,
// resource shape and waste, each attempt clipped to the window to the
// microsecond, running ones counted, zero-length and out-of-window ones
// left out, the project filter applied.
func testSpendTotals(t *testing.T, s store.Store) {
	ctx := context.Background()
	// a (project p, 2 GPUs): attempt 1 preempted at 10, attempt 2 running from 12.
	a := startJob(t, s, "a", nil)
	mustApply(t, s, store.Change{JobID: a.ID, Move: domain.MoveRequeue().Only(domain.JobRunning), At: at(10),
		Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptPreempted}})
	mustApply(t, s, store.Change{JobID: a.ID, Move: domain.MoveStart(), At: at(12),
		Attempt: &store.AttemptChange{Number: 2, Create: true, To: domain.AttemptStarting}},
		store.Change{JobID: a.ID, Move: domain.MoveRun(), At: at(12),
			Attempt: &store.AttemptChange{Number: 2, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}})
	// b (project q, 1 GPU): from 2 to 20, succeeded.
	spec := testSpec("b", "q")
	spec.Resources.GPUs = 1
	b := create(t, s, newJob(t, spec, "bob", t0))
	mustApply(t, s, store.Change{JobID: b.ID, Move: domain.MoveStart(), At: at(2),
		Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting}},
		store.Change{JobID: b.ID, Move: domain.MoveRun(), At: at(2),
			Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}},
		store.Change{JobID: b.ID, Move: domain.MoveSucceed().Only(domain.JobRunning), At: at(20),
			Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptSucceeded}})
	// c (project p): ended before the window.
	c := startJob(t, s, "c", nil)
	mustApply(t, s, store.Change{JobID: c.ID, Move: domain.MoveFail().Only(domain.JobRunning), At: at(3),
		Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptFailed}})

	rows := func(q store.SpendQuery) string {
		t.Helper()
		q.Since, q.Until = at(4), at(30)
		got, err := s.SpendTotals(ctx, q)
		if err != nil {
			t.Fatalf("SpendTotals(%+v): %v", q, err)
		}
		var out []string
		for _, r := range got {
			out = append(out, fmt.Sprintf("%s %s %dgpu waste=%v n=%d run=%d %s", r.Group, r.Pool, r.Resources.GPUs, r.Waste, r.Attempts, r.Running, r.Held))
		}
		slices.Sort(out)
		return strings.Join(out, "; ")
	}
	// at(n) is n s + n ns: each clipped span is truncated to whole µs.
	want := "p standard 2gpu waste=false n=1 run=1 18s; p standard 2gpu waste=true n=1 run=0 6s; q standard 1gpu waste=false n=1 run=0 16s"
	if got := rows(store.SpendQuery{By: "project", AllProjects: true}); got != want {
		t.Errorf("by project:\n got %s\nwant %s", got, want)
	}
	if got := rows(store.SpendQuery{By: "project", Projects: []string{"q"}}); got != "q standard 1gpu waste=false n=1 run=0 16s" {
		t.Errorf("of project q only: %s", got)
	}
	if got := rows(store.SpendQuery{By: "project"}); got != "" {
		t.Errorf("of no project: %s", got)
	}
	wantJob := fmt.Sprintf("%d a standard 2gpu waste=false n=1 run=1 18s; %d a standard 2gpu waste=true n=1 run=0 6s; %d b standard 1gpu waste=false n=1 run=0 16s", a.ID, a.ID, b.ID)
	if got := rows(store.SpendQuery{By: "job", AllProjects: true}); got != wantJob {
		t.Errorf("by job:\n got %s\nwant %s", got, wantJob)
	}
	if got := rows(store.SpendQuery{By: "user", AllProjects: true}); !strings.HasPrefix(got, "alice standard 2gpu") || !strings.Contains(got, "bob standard 1gpu") {
		t.Errorf("by user: %s", got)
	}
	if _, err := s.SpendTotals(ctx, store.SpendQuery{By: "day", AllProjects: true, Until: at(30)}); err == nil {
		t.Error("SpendTotals by day: no error")
	}
}

// testRecentUsage: the newest succeeded attempts of a user's jobs of one
// name, with their request, run time, CPU time and memory peak; other
// names, users and failed attempts are not.
func testRecentUsage(t *testing.T, s store.Store) {
	ctx := context.Background()
	run := func(name, user string, from, to int, state domain.AttemptState, cpu float64) domain.Job {
		t.Helper()
		j := create(t, s, newJob(t, testSpec(name, "p"), user, t0))
		mv := domain.MoveSucceed()
		if state != domain.AttemptSucceeded {
			mv = domain.MoveFail()
		}
		mustApply(t, s, store.Change{JobID: j.ID, Move: domain.MoveStart(), At: at(from),
			Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting}},
			store.Change{JobID: j.ID, Move: domain.MoveRun(), At: at(from),
				Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}},
			store.Change{JobID: j.ID, Move: mv.Only(domain.JobRunning), At: at(to),
				Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: state,
					Usage: &domain.Usage{CPUSeconds: cpu, MaxRSS: 3 << 30}}})
		return j
	}
	first := run("train", "alice", 1, 61, domain.AttemptSucceeded, 30)
	run("train", "bob", 1, 61, domain.AttemptSucceeded, 1)  // another user
	run("eval", "alice", 1, 61, domain.AttemptSucceeded, 1) // another name
	run("train", "alice", 1, 61, domain.AttemptFailed, 1)   // failed
	second := run("train", "alice", 2, 32, domain.AttemptSucceeded, 15)
	got, err := s.RecentUsage(ctx, "alice", "train")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].JobID != second.ID || got[1].JobID != first.ID {
		t.Fatalf("RecentUsage = %+v; want jobs %d then %d", got, second.ID, first.ID)
	}
	u := got[1]
	if u.CPUSeconds != 30 || u.MaxRSS != 3<<30 || u.Ran != at(61).Sub(at(1)) || u.Request != first.Spec.Resources {
		t.Errorf("usage = %+v", u)
	}
	if got, err := s.RecentUsage(ctx, "carol", "train"); err != nil || len(got) != 0 {
		t.Errorf("of a user without jobs = %+v, %v", got, err)
	}
}
