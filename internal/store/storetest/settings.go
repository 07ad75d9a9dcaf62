package storetest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// settingsTests are the subtests of what lets a reader keep the settings
// (SettingsRev) and the active attempts (ActiveAttemptsOf) between reads;
// Exercise runs them with the others.
var settingsTests = map[string]func(t *testing.T, s store.Store){
	"SettingsRev":      testSettingsRev,
	"ActiveAttemptsOf": testActiveAttemptsOf,
	"ChangedJobsWith":  testChangedJobsWith,
}

// settingsRev reads the settings revision.
func settingsRev(t *testing.T, s store.Store) int64 {
	t.Helper()
	rev, err := s.SettingsRev(context.Background())
	if err != nil {
		t.Fatalf("SettingsRev: %v", err)
	}
	return rev
}

// Every write to pools, quotas, projects or compute requests changes the
// settings revision; reads, job writes and writes that fail do not.
func testSettingsRev(t *testing.T, s store.Store) {
	ctx := context.Background()
	rev := settingsRev(t, s)
	step := func(what string, changes bool, fn func() error) {
		t.Helper()
		err := fn()
		if changes && err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		next := settingsRev(t, s)
		if changes && next == rev {
			t.Errorf("%s left the settings revision at %d", what, rev)
		}
		if !changes && next != rev {
			t.Errorf("%s changed the settings revision from %d to %d", what, rev, next)
		}
		rev = next
	}
	step("PutPool", true, func() error { _, err := s.PutPool(ctx, testPool("standard"), setupAudit); return err })
	step("PutPool (replace)", true, func() error {
		p := testPool("standard")
		p.MaxRunning++
		_, err := s.PutPool(ctx, p, setupAudit)
		return err
	})
	step("PutQuota", true, func() error { return s.PutQuota(ctx, testQuota("vision", "standard"), setupAudit) })
	step("PutQuota in a missing pool", false, func() error {
		if err := s.PutQuota(ctx, testQuota("vision", "nope"), setupAudit); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("PutQuota in a missing pool: err = %v, want ErrNotFound", err)
		}
		return nil
	})
	step("DeleteQuota", true, func() error { return s.DeleteQuota(ctx, "vision", "standard", setupAudit) })
	step("PutProject", true, func() error { return s.PutProject(ctx, domain.Project{Name: "vision", Shares: 2}, setupAudit) })
	var req domain.QuotaRequest
	step("CreateRequest", true, func() error {
		var err error
		req, err = s.CreateRequest(ctx, domain.QuotaRequest{Project: "vision", Pool: "standard", Extra: domain.Limits{GPUs: 1},
			Until: at(100), Requester: "alice", CreatedAt: at(1)}, setupAudit)
		return err
	})
	step("DecideRequest", true, func() error {
		_, err := s.DecideRequest(ctx, req.ID, domain.RequestApproved, "root", at(2), "", setupAudit)
		return err
	})
	step("reads", false, func() error {
		_, _ = s.ListPools(ctx)
		_, _ = s.ListQuotas(ctx, "", "")
		_, _ = s.ListProjects(ctx)
		_, _ = s.ActiveGrants(ctx, at(3))
		_, _ = s.ListRequests(ctx, "", "")
		return nil
	})
	step("job writes", false, func() error {
		startJob(t, s, "a", []int{0})
		return nil
	})
}

// ActiveAttemptsOf reads ActiveAttempts' rows of the jobs named, in the
// same order, whatever the order of the ids (repeated ones and ids of no
// job included).
func testActiveAttemptsOf(t *testing.T, s store.Store) {
	ctx := context.Background()
	if as, err := s.ActiveAttemptsOf(ctx, nil); err != nil || len(as) != 0 {
		t.Fatalf("ActiveAttemptsOf(none) = %v, %v", as, err)
	}
	a := startJob(t, s, "a", []int{0})
	b := create(t, s, newJob(t, testSpec("b", "p"), "alice", t0))
	c := startJob(t, s, "c", []int{1, 2})
	d := startJob(t, s, "d", nil)
	mustApply(t, s, store.Change{JobID: b.ID, Move: domain.MoveStart(), At: at(3),
		Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting, Node: "node-b"}})
	mustApply(t, s,
		store.Change{JobID: c.ID, Move: domain.MoveRequeue().Only(domain.JobRunning), At: at(4),
			Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptPreempted}},
		store.Change{JobID: c.ID, Move: domain.MoveStart(), At: at(5),
			Attempt: &store.AttemptChange{Number: 2, Create: true, To: domain.AttemptStarting, Node: "node-c", GPUs: []int{3}}},
		store.Change{JobID: a.ID, Move: domain.MoveSucceed().Only(domain.JobRunning), At: at(6),
			Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptSucceeded, ExitCode: ptr(0)}},
	)
	all, err := s.ActiveAttempts(ctx)
	if err != nil {
		t.Fatalf("ActiveAttempts: %v", err)
	}
	for _, ids := range [][]int64{
		{a.ID, b.ID, c.ID, d.ID},
		{d.ID, c.ID, 9999, c.ID, a.ID},
		{b.ID},
		{a.ID},
		{9999},
	} {
		got, err := s.ActiveAttemptsOf(ctx, ids)
		if err != nil {
			t.Fatalf("ActiveAttemptsOf(%v): %v", ids, err)
		}
		want := slices.DeleteFunc(slices.Clone(all), func(x domain.Attempt) bool { return !slices.Contains(ids, x.JobID) })
		if len(got) == 0 && len(want) == 0 {
			continue
		}
		if d := diff(want, got); d != "" {
			t.Errorf("ActiveAttemptsOf(%v) differs from ActiveAttempts' rows of those jobs:%s", ids, d)
		}
	}
}

// ExerciseReplicas runs the tests of what one replica must notice of
// another's writes; newPair returns two stores on one fresh, empty
// database, closed at cleanup.
func ExerciseReplicas(t *testing.T, newPair func(t *testing.T) (a, b store.Store)) {
	t.Helper()
	tests := map[string]func(t *testing.T, a, b store.Store){
		"SettingsRevSeesOtherWriter": testSettingsRevReplicas,
	}
	for _, name := range slices.Sorted(maps.Keys(tests)) {
		fn := tests[name]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a, b := newPair(t)
			fn(t, a, b)
		})
	}
}

// A write to the settings through one store changes the revision the
// other reads, and the other then reads what was written.
func testSettingsRevReplicas(t *testing.T, a, b store.Store) {
	ctx := context.Background()
	rev := settingsRev(t, a)
	putPool(t, b, testPool("standard"))
	if next := settingsRev(t, a); next == rev {
		t.Fatalf("a pool written by the other store left the revision at %d", rev)
	} else {
		rev = next
	}
	if ps, err := a.ListPools(ctx); err != nil || len(ps) != 1 {
		t.Fatalf("ListPools after the other's write = %v, %v", ps, err)
	}
	if err := b.PutQuota(ctx, testQuota("vision", "standard"), setupAudit); err != nil {
		t.Fatal(err)
	}
	if next := settingsRev(t, a); next == rev {
		t.Fatalf("a quota written by the other store left the revision at %d", rev)
	}
	if rb, ra := settingsRev(t, b), settingsRev(t, a); ra != rb {
		t.Errorf("the stores read revisions %d and %d of one database", ra, rb)
	}
}

// ChangedJobsWith reads what ChangedJobs, ActiveAttemptsOf of its jobs
// and SettingsRev read.
func testChangedJobsWith(t *testing.T, s store.Store) {
	ctx := context.Background()
	ch, err := s.ChangedJobsWith(ctx, 0)
	if err != nil || len(ch.Jobs) != 0 || len(ch.Attempts) != 0 || ch.SettingsRev != settingsRev(t, s) {
		t.Fatalf("ChangedJobsWith on an empty store = %+v, %v", ch, err)
	}
	start := ch.Cursor
	a := startJob(t, s, "a", []int{0})
	create(t, s, newJob(t, testSpec("b", "p"), "alice", t0))
	putPool(t, s, testPool("standard"))
	c := startJob(t, s, "c", []int{1})
	mustApply(t, s, store.Change{JobID: a.ID, Move: domain.MoveSucceed().Only(domain.JobRunning), At: at(6),
		Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptSucceeded, ExitCode: ptr(0)}})
	ch, err = s.ChangedJobsWith(ctx, start)
	if err != nil {
		t.Fatalf("ChangedJobsWith: %v", err)
	}
	// (The cursors need not be equal: PostgreSQL's follows the other
	// transactions of the server.)
	jobs, _, err := s.ChangedJobs(ctx, start)
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(jobs, ch.Jobs); d != "" {
		t.Errorf("ChangedJobsWith's jobs differ from ChangedJobs':%s", d)
	}
	var ids []int64
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	atts, err := s.ActiveAttemptsOf(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(atts) != 1 || atts[0].JobID != c.ID {
		t.Fatalf("ActiveAttemptsOf(%v) = %+v, want job %d's attempt", ids, atts, c.ID)
	}
	if d := diff(atts, ch.Attempts); d != "" {
		t.Errorf("ChangedJobsWith's attempts differ from ActiveAttemptsOf's:%s", d)
	}
	if rev := settingsRev(t, s); ch.SettingsRev != rev {
		t.Errorf("ChangedJobsWith's settings revision %d, SettingsRev %d", ch.SettingsRev, rev)
	}
}
