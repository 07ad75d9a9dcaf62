package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

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
			line := fmt.Sprintf("%s %s %dgpu waste=%v n=%d run=%d %s", r.Group, r.Pool, r.Resources.GPUs, r.Waste, r.Attempts, r.Running, r.Held)
			if len(q.Splits) > 0 {
				line += fmt.Sprintf(" %v", r.HeldIn)
			}
			out = append(out, line)
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
	// Split at 10 and 15 (where rates changed): each row's time by piece,
	// in the same rows. a's first attempt ran in the first piece only, its
	// retry (from 12) in the last two, b (2 to 20) in all three.
	want = "p standard 2gpu waste=false n=1 run=1 18s [0s 3s 15s]; p standard 2gpu waste=true n=1 run=0 6s [6s 0s 0s]; q standard 1gpu waste=false n=1 run=0 16s [6s 5s 5s]"
	if got := rows(store.SpendQuery{By: "project", AllProjects: true, Splits: []time.Time{at(10), at(15)}}); got != want {
		t.Errorf("split at 10 and 15:\n got %s\nwant %s", got, want)
	}
	for _, splits := range [][]time.Time{{at(4)}, {at(30)}, {at(15), at(10)}, {at(10), at(10)}} {
		q := store.SpendQuery{Since: at(4), Until: at(30), By: "project", AllProjects: true, Splits: splits}
		if _, err := s.SpendTotals(ctx, q); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("splits %v: err = %v, want invalid (splits must be inside the window, ascending)", splits, err)
		}
	}
}

// testRateHistory: PutPool records a pool's rates when they differ from
// its latest entry, from the write's time; an unchanged rate adds
// nothing, a change at the same instant replaces the entry, and one dated
// before the latest (a clock stepped back) takes the latest's time, so
// the rates written last are the ones in force now.
func testRateHistory(t *testing.T, s store.Store) {
	ctx := context.Background()
	r := func(gpu domain.Money) domain.Rates {
		return domain.Rates{GPUHour: gpu * domain.MoneyUnit, CPUHour: 48_001}
	}
	put := func(name string, rates domain.Rates, when time.Time) {
		t.Helper()
		p := testPool(name)
		p.Rates, p.CreatedAt, p.UpdatedAt = rates, when, when
		putPool(t, s, p)
	}
	history := func(pools ...string) string {
		t.Helper()
		got, err := s.RateHistory(ctx, pools...)
		if err != nil {
			t.Fatalf("RateHistory(%q): %v", pools, err)
		}
		var out []string
		for _, c := range got {
			out = append(out, fmt.Sprintf("%s %s %s/%s", c.Pool, c.From.UTC().Format(time.RFC3339Nano), c.Rates.GPUHour, c.Rates.CPUHour))
		}
		return strings.Join(out, "; ")
	}
	ts := func(n int) string { return at(n).UTC().Format(time.RFC3339Nano) }
	put("a", r(2), at(1))
	put("a", r(2), at(5)) // the same rates: no entry
	put("a", r(3), at(10))
	want := fmt.Sprintf("a %s 2.00/0.048001; a %s 3.00/0.048001", ts(1), ts(10))
	if got := history("a"); got != want {
		t.Errorf("after a change:\n got %s\nwant %s", got, want)
	}
	put("a", r(4), at(10)) // the same instant: replaces
	put("a", r(5), at(7))  // before the latest: dated at it
	want = fmt.Sprintf("a %s 2.00/0.048001; a %s 5.00/0.048001", ts(1), ts(10))
	if got := history("a"); got != want {
		t.Errorf("after a change at the same instant and one dated before it:\n got %s\nwant %s", got, want)
	}
	if p := getPool(t, s, "a"); p.Rates != r(5) {
		t.Errorf("pool a's rates = %+v, want the last written", p.Rates)
	}
	// A pool written without a time starts at the epoch; a free pool has
	// its (zero) rates recorded too, so a later price starts at its change.
	p := testPool("b")
	p.Rates, p.CreatedAt, p.UpdatedAt = domain.Rates{}, time.Time{}, time.Time{}
	putPool(t, s, p)
	put("b", r(1), at(3))
	wantB := fmt.Sprintf("b 1970-01-01T00:00:00Z 0.00/0.00; b %s 1.00/0.048001", ts(3))
	if got := history("b"); got != wantB {
		t.Errorf("pool b:\n got %s\nwant %s", got, wantB)
	}
	if got := history(); got != want+"; "+wantB {
		t.Errorf("every pool:\n got %s\nwant %s; %s", got, want, wantB)
	}
	if got := history("b", "a"); got != want+"; "+wantB {
		t.Errorf("pools b and a:\n got %s\nwant %s; %s", got, want, wantB)
	}
	if got := history("none"); got != "" {
		t.Errorf("of a pool that does not exist: %s", got)
	}
}

// testAttemptTimes: the times of the started attempts of the named jobs
// only, in (job, attempt) order; an attempt that has not started, other
// jobs and unknown ids are left out.
func testAttemptTimes(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := startJob(t, s, "a", nil) // attempt 1 running from 2
	mustApply(t, s, store.Change{JobID: a.ID, Move: domain.MoveRequeue().Only(domain.JobRunning), At: at(10),
		Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptPreempted}})
	mustApply(t, s, store.Change{JobID: a.ID, Move: domain.MoveStart(), At: at(12),
		Attempt: &store.AttemptChange{Number: 2, Create: true, To: domain.AttemptStarting}}) // not started yet
	b := startJob(t, s, "b", nil)
	other := startJob(t, s, "other", nil)
	got, err := s.AttemptTimes(ctx, []int64{b.ID, a.ID, other.ID + 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	name := map[int64]string{a.ID: "a", b.ID: "b"}
	for _, x := range got {
		out = append(out, fmt.Sprintf("%s/%d %d-%d", name[x.JobID], x.Attempt,
			x.StartedAt.Sub(t0)/time.Second, max(x.FinishedAt.Sub(t0)/time.Second, 0)))
	}
	want := "a/1 2-10; b/1 2-0"
	if strings.Join(out, "; ") != want {
		t.Errorf("AttemptTimes = %s\nwant %s", strings.Join(out, "; "), want)
	}
	if !got[0].StartedAt.Equal(at(2)) || !got[0].FinishedAt.Equal(at(10)) || !got[1].FinishedAt.IsZero() {
		t.Errorf("AttemptTimes = %+v; want to the nanosecond, no end while running", got)
	}
	if got, err := s.AttemptTimes(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("of no job = %+v, %v", got, err)
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

// testRunningSpans: the spans of the attempts that run, with their job's
// request, pool and timeout; finished and never-started ones are not.
func testRunningSpans(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := startJob(t, s, "a", nil) // running from at(2)
	c := startJob(t, s, "c", nil)
	mustApply(t, s, store.Change{JobID: c.ID, Move: domain.MoveFail().Only(domain.JobRunning), At: at(3),
		Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptFailed}})
	q := create(t, s, newJob(t, testSpec("q", "p"), "alice", t0))
	mustApply(t, s, store.Change{JobID: q.ID, Move: domain.MoveStart(), At: at(4),
		Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting}}) // starting: not started
	got, err := s.RunningSpans(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].JobID != a.ID || got[0].Attempt != 1 || got[0].Project != "p" || got[0].Pool != "standard" ||
		got[0].Resources != a.Spec.Resources || got[0].Timeout != a.Spec.Policy.Timeout || !got[0].StartedAt.Equal(at(2)) ||
		!got[0].FinishedAt.IsZero() || got[0].State != domain.AttemptRunning {
		t.Fatalf("RunningSpans = %+v; want job %d's running attempt", got, a.ID)
	}
}
