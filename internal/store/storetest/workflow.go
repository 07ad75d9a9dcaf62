package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// workflowTests cover store.Workflows: sweeps and their members, and the
// dependencies (after:) jobs wait for.
var workflowTests = map[string]func(t *testing.T, s store.Store){
	"WorkflowHeldAndWaits":        testHeldAndWaits,
	"WorkflowCreateSweep":         testCreateSweep,
	"WorkflowCreateSweepAtomic":   testCreateSweepAtomic,
	"WorkflowSweepIdempotencyKey": testSweepIdempotencyKey,
	"WorkflowListAndCancelSweeps": testListAndCancelSweeps,
	"WorkflowListSweepsPages":     testListSweepsPages,
	"WorkflowLargeSweep":          testLargeSweep,
}

// sweepJob returns the NewJob of a sweep member (or a plain job) named
// name in project, with a unique idempotency key.
func sweepJob(t *testing.T, name, project string, n int) store.NewJob {
	t.Helper()
	p := newJob(t, testSpec(name, project), "alice", at(n))
	p.IdempotencyKey = fmt.Sprintf("wf-%s-%d", name, n)
	return p
}

func testHeldAndWaits(t *testing.T, s store.Store) {
	ctx := context.Background()
	dep := create(t, s, sweepJob(t, "dep", "wf", 1))
	plain := create(t, s, sweepJob(t, "plain", "wf", 2))

	p := sweepJob(t, "waiter", "wf", 3)
	waits := []domain.Dependency{{Job: dep.ID, On: domain.DependSucceeded}, {Sweep: 77, On: domain.DependEnded}}
	p.Held = &store.Hold{Reason: domain.ReasonDependency, Message: "waits for job 1 to succeed"}
	p.Waits = waits
	w := create(t, s, p)
	if w.State != domain.JobHeld || w.Reason != domain.ReasonDependency || w.Message != p.Held.Message {
		t.Errorf("CreateJob returned state %s reason %s message %q; want held, Dependency, %q", w.State, w.Reason, w.Message, p.Held.Message)
	}
	got := get(t, s, w.ID)
	if got.State != domain.JobHeld || got.Reason != domain.ReasonDependency || got.Message != p.Held.Message {
		t.Errorf("GetJob: state %s reason %s message %q; want held, Dependency, %q", got.State, got.Reason, got.Message, p.Held.Message)
	}
	evs := events(t, s, w.ID)
	if len(evs) == 0 || evs[0].To != domain.JobHeld || evs[0].Reason != domain.ReasonDependency {
		t.Errorf("submit event = %+v; want one to held with reason Dependency", evs)
	}
	if pl := get(t, s, plain.ID); pl.State != domain.JobQueued {
		t.Errorf("a job without Held is %s, want queued", pl.State)
	}

	stored, err := s.WaitsOf(ctx, w.ID)
	if err != nil {
		t.Fatalf("WaitsOf: %v", err)
	}
	want := slices.Clone(waits)
	slices.SortFunc(want, func(a, b domain.Dependency) int {
		if a.Job != b.Job {
			return int(a.Job - b.Job)
		}
		return int(a.Sweep - b.Sweep)
	})
	if !sameDeps(stored, want) {
		t.Errorf("WaitsOf = %+v, want %+v", stored, want)
	}
	if none, err := s.WaitsOf(ctx, plain.ID); err != nil || len(none) != 0 {
		t.Errorf("WaitsOf(a job without after:) = %v, %v; want none", none, err)
	}
	checkIDs(t, "WaitersOn(dep job)", func() ([]int64, error) { return s.WaitersOn(ctx, []int64{dep.ID}, false) }, w.ID)
	checkIDs(t, "WaitersOn(sweep 77)", func() ([]int64, error) { return s.WaitersOn(ctx, []int64{77}, true) }, w.ID)
	checkIDs(t, "WaitersOn(job 77) (77 is a sweep)", func() ([]int64, error) { return s.WaitersOn(ctx, []int64{77}, false) })
	checkIDs(t, "WaitersOn(plain job)", func() ([]int64, error) { return s.WaitersOn(ctx, []int64{plain.ID}, false) })
	checkIDs(t, "WaitersOn(plain job, dep job, dep job)", func() ([]int64, error) {
		return s.WaitersOn(ctx, []int64{plain.ID, dep.ID, dep.ID}, false)
	}, w.ID)
	checkIDs(t, "WaitingJobs while held", func() ([]int64, error) { return s.WaitingJobs(ctx) }, w.ID)

	if errs := apply(t, s, store.Change{JobID: w.ID, Move: domain.MoveRelease(), Reason: domain.ReasonSubmitted, Actor: "system:test", At: at(4)}); errs[0] != nil {
		t.Fatalf("release: %v", errs[0])
	}
	checkIDs(t, "WaitingJobs after release", func() ([]int64, error) { return s.WaitingJobs(ctx) })
	// The dependencies stay stored: they are the job's history.
	checkIDs(t, "WaitersOn(dep job) after release", func() ([]int64, error) { return s.WaitersOn(ctx, []int64{dep.ID}, false) }, w.ID)
}

func sameDeps(a, b []domain.Dependency) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
}

// checkIDs asserts that list returns exactly want, in any order.
func checkIDs(t *testing.T, what string, list func() ([]int64, error), want ...int64) {
	t.Helper()
	got, err := list()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	g, w := slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))
	if !slices.Equal(g, w) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func floatp(f float64) *float64 { return &f }

// testSweep returns a sweep of project (its spec every field set).
func testSweep(name, project, submitter string, n int) domain.Sweep {
	obj := &domain.Objective{Metric: "val_loss", Goal: "maximize"}
	return domain.Sweep{
		Name: name, Project: project, Submitter: submitter, CreatedAt: at(n),
		Method: domain.SweepRandom, MaxParallel: 2, Objective: obj,
		Spec: domain.SweepSpec{
			Method: domain.SweepRandom, Count: 3, Seed: 42, MaxParallel: 2, Objective: obj,
			Indices: []int{0, 1, 2},
			Params: map[string]domain.SweepParam{
				"lr":    {Min: floatp(0.0001), Max: floatp(0.1), Log: true},
				"batch": {Values: []string{"16", "32"}},
			},
		},
	}
}

// createSweep stores sw with n members named name-0…, the first running
// free and the rest held for SweepLimit when held is set.
func createSweep(t *testing.T, s store.Store, sw domain.Sweep, n, held int) (domain.Sweep, []domain.Job) {
	t.Helper()
	var gotID int64
	out, jobs, created, err := s.CreateSweep(context.Background(), sw, func(id int64) ([]store.NewJob, error) {
		gotID = id
		news := make([]store.NewJob, n)
		for i := range n {
			news[i] = sweepJob(t, fmt.Sprintf("%s-%d", sw.Name, i), sw.Project, i)
			news[i].Sweep = id
			if i >= n-held {
				news[i].Held = &store.Hold{Reason: domain.ReasonSweepLimit, Message: "waits for a free slot"}
			}
		}
		return news, nil
	}, domain.AuditRecord{At: sw.CreatedAt, Actor: "user:" + sw.Submitter, Action: "sweep.submit",
		Target: "sweep/" + store.AuditIDPlaceholder, Result: domain.AuditOK})
	if err != nil {
		t.Fatalf("CreateSweep: %v", err)
	}
	if !created {
		t.Fatalf("CreateSweep of a new sweep returned created false")
	}
	if out.ID == 0 || out.ID != gotID {
		t.Fatalf("CreateSweep returned id %d; the callback got %d", out.ID, gotID)
	}
	if len(jobs) != n {
		t.Fatalf("CreateSweep returned %d members, want %d", len(jobs), n)
	}
	return out, jobs
}

func testCreateSweep(t *testing.T, s store.Store) {
	ctx := context.Background()
	plain := create(t, s, sweepJob(t, "plain", "wf", 0))
	sw, members := createSweep(t, s, testSweep("sw", "wf", "alice", 1), 5, 3)
	if sw.Members != 5 {
		t.Errorf("CreateSweep returned Members %d, want 5", sw.Members)
	}
	for i, j := range members {
		if i > 0 && j.ID <= members[i-1].ID {
			t.Errorf("member %d has id %d, not after member %d's %d", i, j.ID, i-1, members[i-1].ID)
		}
		if want := fmt.Sprintf("sw-%d", i); j.Spec.Name != want {
			t.Errorf("member %d is %q, want %q (members in order)", i, j.Spec.Name, want)
		}
		if of, err := s.SweepOf(ctx, j.ID); err != nil || of != sw.ID {
			t.Errorf("SweepOf(member %d) = %d, %v; want %d", j.ID, of, err, sw.ID)
		}
		wantState := domain.JobQueued
		if i >= 2 {
			wantState = domain.JobHeld
		}
		if got := get(t, s, j.ID); got.State != wantState {
			t.Errorf("member %d is %s, want %s", i, got.State, wantState)
		}
	}
	if of, err := s.SweepOf(ctx, plain.ID); err != nil || of != 0 {
		t.Errorf("SweepOf(a plain job) = %d, %v; want 0", of, err)
	}
	// The batch form: every member, a plain job and an unknown id name
	// the sweep once.
	batch := []int64{plain.ID, 1 << 40}
	for _, j := range members {
		batch = append(batch, j.ID)
	}
	checkIDs(t, "SweepsOf(members, a plain job, an unknown id)", func() ([]int64, error) { return s.SweepsOf(ctx, batch) }, sw.ID)
	checkIDs(t, "SweepsOf(nothing)", func() ([]int64, error) { return s.SweepsOf(ctx, nil) })

	got, err := s.GetSweep(ctx, sw.ID)
	if err != nil {
		t.Fatalf("GetSweep: %v", err)
	}
	want := testSweep("sw", "wf", "alice", 1)
	want.ID, want.Members = sw.ID, 5
	if !got.CreatedAt.Equal(want.CreatedAt) {
		t.Errorf("GetSweep CreatedAt = %v, want %v", got.CreatedAt, want.CreatedAt)
	}
	got.CreatedAt = want.CreatedAt
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GetSweep =\n%+v\nwant\n%+v", got, want)
	}
	if _, err := s.GetSweep(ctx, sw.ID+1000); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetSweep(unknown) err = %v, want ErrNotFound", err)
	}

	var sub []domain.AuditRecord
	for _, r := range ours(auditLog(t, s)) {
		if r.Action == "sweep.submit" {
			sub = append(sub, r)
		}
	}
	if wantT := "sweep/" + strconv.FormatInt(sw.ID, 10); len(sub) != 1 || sub[0].Target != wantT {
		t.Errorf("audit records of the sweep = %+v; want one with target %q", sub, wantT)
	}

	// ListJobs by sweep: exactly the members, newest first.
	ids := jobIDs(members)
	slices.Reverse(ids)
	list := func(f store.JobFilter) []int64 {
		t.Helper()
		f.Sweep = sw.ID
		jobs, err := s.ListJobs(ctx, f)
		if err != nil {
			t.Fatalf("ListJobs(%+v): %v", f, err)
		}
		return jobIDs(jobs)
	}
	if got := list(store.JobFilter{}); !slices.Equal(got, ids) {
		t.Errorf("ListJobs(Sweep) = %v, want %v", got, ids)
	}
	if got := list(store.JobFilter{States: []domain.JobState{domain.JobHeld}}); !slices.Equal(got, ids[:3]) {
		t.Errorf("ListJobs(Sweep, held) = %v, want %v", got, ids[:3])
	}
	if got := list(store.JobFilter{Limit: 2}); !slices.Equal(got, ids[:2]) {
		t.Errorf("ListJobs(Sweep, Limit 2) = %v, want %v", got, ids[:2])
	}
	if got := list(store.JobFilter{Limit: 2, BeforeID: ids[1]}); !slices.Equal(got, ids[2:4]) {
		t.Errorf("ListJobs(Sweep, Limit 2, BeforeID %d) = %v, want %v", ids[1], got, ids[2:4])
	}

	counts, err := s.SweepCounts(ctx, sw.ID)
	if err != nil {
		t.Fatalf("SweepCounts: %v", err)
	}
	if counts[domain.JobQueued] != 2 || counts[domain.JobHeld] != 3 || len(counts) != 2 {
		t.Errorf("SweepCounts = %v, want queued 2, held 3", counts)
	}
	held, err := s.HeldSweepMembers(ctx, sw.ID, domain.ReasonSweepLimit, 2)
	if err != nil || !slices.Equal(held, jobIDs(members[2:4])) {
		t.Errorf("HeldSweepMembers(limit 2) = %v, %v; want %v (oldest first)", held, err, jobIDs(members[2:4]))
	}
	if held, err := s.HeldSweepMembers(ctx, sw.ID, domain.ReasonDependency, 10); err != nil || len(held) != 0 {
		t.Errorf("HeldSweepMembers(another reason) = %v, %v; want none", held, err)
	}
	checkIDs(t, "WaitingSweeps", func() ([]int64, error) { return s.WaitingSweeps(ctx) }, sw.ID)

	// Members run and end; the held ones are released, then none wait.
	for _, j := range members[2:] {
		if errs := apply(t, s, store.Change{JobID: j.ID, Move: domain.MoveRelease(), Reason: domain.ReasonSubmitted, Actor: "system:test", At: at(9)}); errs[0] != nil {
			t.Fatalf("release member %d: %v", j.ID, errs[0])
		}
	}
	checkIDs(t, "WaitingSweeps after the release", func() ([]int64, error) { return s.WaitingSweeps(ctx) })
	end := func(id int64, last domain.Move) {
		t.Helper()
		for _, m := range []domain.Move{domain.MoveStart(), domain.MoveRun(), last} {
			if errs := apply(t, s, store.Change{JobID: id, Move: m, Actor: "system:test", At: at(10)}); errs[0] != nil {
				t.Fatalf("%s member %d: %v", m.Name(), id, errs[0])
			}
		}
	}
	end(members[0].ID, domain.MoveSucceed())
	end(members[1].ID, domain.MoveFail())
	if errs := apply(t, s, store.Change{JobID: members[2].ID, Move: domain.MoveCancel(), Actor: "user:alice", At: at(11)}); errs[0] != nil {
		t.Fatalf("cancel: %v", errs[0])
	}
	counts, err = s.SweepCounts(ctx, sw.ID)
	if err != nil {
		t.Fatalf("SweepCounts: %v", err)
	}
	wantCounts := map[domain.JobState]int{domain.JobSucceeded: 1, domain.JobFailed: 1, domain.JobCanceled: 1, domain.JobQueued: 2}
	if !reflect.DeepEqual(counts, wantCounts) {
		t.Errorf("SweepCounts after members ended = %v, want %v", counts, wantCounts)
	}
}

func testCreateSweepAtomic(t *testing.T, s store.Store) {
	ctx := context.Background()
	before, err := s.ListJobs(ctx, store.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	audit := domain.AuditRecord{At: at(1), Actor: "user:alice", Action: "sweep.submit", Target: "sweep/{id}", Result: domain.AuditOK}
	if _, _, _, err := s.CreateSweep(ctx, testSweep("bad", "wf", "alice", 1), func(int64) ([]store.NewJob, error) {
		return nil, boom
	}, audit); !errors.Is(err, boom) {
		t.Errorf("CreateSweep with a failing callback: err = %v, want the callback's", err)
	}
	if _, _, _, err := s.CreateSweep(ctx, testSweep("bad2", "wf", "alice", 2), func(id int64) ([]store.NewJob, error) {
		good := sweepJob(t, "good", "wf", 1)
		bad := sweepJob(t, "bad", "wf", 2)
		bad.SpecHash = "sha256:" + fmt.Sprintf("%064d", 0) // not the hash of SpecJSON
		good.Sweep, bad.Sweep = id, id
		return []store.NewJob{good, bad}, nil
	}, audit); err == nil {
		t.Errorf("CreateSweep with a member whose hash is wrong: no error")
	}
	sweeps, err := s.ListSweeps(ctx, store.SweepFilter{})
	if err != nil || len(sweeps) != 0 {
		t.Errorf("ListSweeps after failed creates = %+v, %v; want none", sweeps, err)
	}
	after, err := s.ListJobs(ctx, store.JobFilter{})
	if err != nil || len(after) != len(before) {
		t.Errorf("ListJobs after failed creates: %d jobs (%v), want %d", len(after), err, len(before))
	}
	for _, r := range ours(auditLog(t, s)) {
		if r.Action == "sweep.submit" {
			t.Errorf("a failed CreateSweep left an audit record %+v", r)
		}
	}
}

func testListAndCancelSweeps(t *testing.T, s store.Store) {
	ctx := context.Background()
	a1, _ := createSweep(t, s, testSweep("a1", "pa", "alice", 1), 1, 0)
	b1, _ := createSweep(t, s, testSweep("b1", "pb", "bob", 2), 1, 0)
	a2, _ := createSweep(t, s, testSweep("a2", "pa", "carol", 3), 1, 0)
	c1, _ := createSweep(t, s, testSweep("c1", "pc", "alice", 4), 1, 0)

	list := func(f store.SweepFilter) []int64 {
		t.Helper()
		sws, err := s.ListSweeps(ctx, f)
		if err != nil {
			t.Fatalf("ListSweeps(%+v): %v", f, err)
		}
		ids := make([]int64, len(sws))
		for i, sw := range sws {
			ids[i] = sw.ID
		}
		return ids
	}
	for _, c := range []struct {
		name string
		f    store.SweepFilter
		want []int64
	}{
		{"all", store.SweepFilter{}, []int64{c1.ID, a2.ID, b1.ID, a1.ID}},
		{"project", store.SweepFilter{Project: "pa"}, []int64{a2.ID, a1.ID}},
		{"limit", store.SweepFilter{Limit: 2}, []int64{c1.ID, a2.ID}},
		{"before", store.SweepFilter{BeforeID: a2.ID, Limit: 1}, []int64{b1.ID}},
		{"restrict projects", store.SweepFilter{Restrict: true, Projects: []string{"pb"}}, []int64{b1.ID}},
		{"restrict submitter", store.SweepFilter{Restrict: true, Submitter: "alice"}, []int64{c1.ID, a1.ID}},
		{"restrict both", store.SweepFilter{Restrict: true, Projects: []string{"pa"}, Submitter: "bob"}, []int64{a2.ID, b1.ID, a1.ID}},
		{"restrict nothing", store.SweepFilter{Restrict: true}, nil},
		{"restrict and project", store.SweepFilter{Restrict: true, Submitter: "alice", Project: "pc"}, []int64{c1.ID}},
	} {
		if got := list(c.f); !slices.Equal(got, c.want) && (len(got) != 0 || len(c.want) != 0) {
			t.Errorf("ListSweeps %s = %v, want %v", c.name, got, c.want)
		}
	}

	if err := s.CancelSweep(ctx, a1.ID, "user:alice", at(20), domain.AuditRecord{At: at(20), Actor: "user:alice",
		Action: "sweep.cancel", Target: "sweep/" + strconv.FormatInt(a1.ID, 10), Result: domain.AuditOK}); err != nil {
		t.Fatalf("CancelSweep: %v", err)
	}
	if err := s.CancelSweep(ctx, a1.ID, "user:bob", at(30), setupAudit); err != nil {
		t.Fatalf("second CancelSweep: %v", err)
	}
	got, err := s.GetSweep(ctx, a1.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.CanceledAt.Equal(at(20)) || got.CanceledBy != "user:alice" {
		t.Errorf("after two cancels: CanceledAt %v by %q; want the first, %v by user:alice", got.CanceledAt, got.CanceledBy, at(20))
	}
	if other, err := s.GetSweep(ctx, b1.ID); err != nil || !other.CanceledAt.IsZero() || other.CanceledBy != "" {
		t.Errorf("an uncanceled sweep: CanceledAt %v by %q (err %v); want zero", other.CanceledAt, other.CanceledBy, err)
	}
	var cancels int
	for _, r := range ours(auditLog(t, s)) {
		if r.Action == "sweep.cancel" {
			cancels++
		}
	}
	if cancels != 1 {
		t.Errorf("%d sweep.cancel audit records, want 1", cancels)
	}
}

// Limit counts the sweeps a restricted caller may see: a page is never
// short because others' sweeps are newer.
func testListSweepsPages(t *testing.T, s store.Store) {
	ctx := context.Background()
	a1, _ := createSweep(t, s, testSweep("a1", "pa", "alice", 1), 1, 0)
	b1, _ := createSweep(t, s, testSweep("b1", "pb", "bob", 2), 1, 0)
	a2, _ := createSweep(t, s, testSweep("a2", "pa", "alice", 3), 1, 0)
	createSweep(t, s, testSweep("c1", "pc", "carol", 4), 1, 0)
	for _, c := range []struct {
		name string
		f    store.SweepFilter
		want []int64
	}{
		{"projects, limit 1", store.SweepFilter{Restrict: true, Projects: []string{"pb"}, Limit: 1}, []int64{b1.ID}},
		{"submitter, limit 1", store.SweepFilter{Restrict: true, Submitter: "alice", Limit: 1}, []int64{a2.ID}},
		{"submitter, limit 1, before", store.SweepFilter{Restrict: true, Submitter: "alice", Limit: 1, BeforeID: a2.ID}, []int64{a1.ID}},
	} {
		sws, err := s.ListSweeps(ctx, c.f)
		if err != nil {
			t.Fatalf("ListSweeps %s: %v", c.name, err)
		}
		var got []int64
		for _, sw := range sws {
			got = append(got, sw.ID)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("ListSweeps %s = %v, want %v", c.name, got, c.want)
		}
	}
}

func testLargeSweep(t *testing.T, s store.Store) {
	if testing.Short() {
		t.Skip("a 2,000-member sweep")
	}
	const n = 2000
	sw, jobs := createSweep(t, s, domain.Sweep{Name: "big", Project: "wf", Submitter: "alice", CreatedAt: at(1),
		Method: domain.SweepArray, Spec: domain.SweepSpec{Method: domain.SweepArray, MaxParallel: 10}}, n, n-10)
	if sw.Members != n || len(jobs) != n {
		t.Fatalf("CreateSweep stored %d members (returned %d), want %d", sw.Members, len(jobs), n)
	}
	counts, err := s.SweepCounts(context.Background(), sw.ID)
	if err != nil {
		t.Fatal(err)
	}
	if counts[domain.JobQueued] != 10 || counts[domain.JobHeld] != n-10 {
		t.Errorf("SweepCounts = %v, want queued 10, held %d", counts, n-10)
	}
}

// testSweepIdempotencyKey: a second CreateSweep with a key its submitter
// used already stores nothing, writes no audit record and returns the
// first sweep and its members; another submitter's same key, or no key,
// stores a new sweep.
func testSweepIdempotencyKey(t *testing.T, s store.Store) {
	ctx := context.Background()
	sw := testSweep("keyed", "wf", "alice", 1)
	sw.IdempotencyKey = "nightly-1"
	first, members := createSweep(t, s, sw, 3, 1)
	if first.IdempotencyKey != "nightly-1" {
		t.Errorf("CreateSweep returned key %q, want nightly-1", first.IdempotencyKey)
	}
	if got, err := s.GetSweep(ctx, first.ID); err != nil || got.IdempotencyKey != "nightly-1" {
		t.Errorf("GetSweep: key %q (%v), want nightly-1", got.IdempotencyKey, err)
	}
	audits := len(ours(auditLog(t, s)))
	called := false
	again := testSweep("keyed-again", "wf", "alice", 2)
	again.IdempotencyKey = "nightly-1"
	out, jobs, created, err := s.CreateSweep(ctx, again, func(int64) ([]store.NewJob, error) {
		called = true
		return nil, nil
	}, domain.AuditRecord{At: at(2), Actor: "user:alice", Action: "sweep.submit", Target: "sweep/" + store.AuditIDPlaceholder, Result: domain.AuditOK})
	if err != nil {
		t.Fatalf("CreateSweep with a used key: %v", err)
	}
	if created || called || out.ID != first.ID || out.Name != "keyed" {
		t.Errorf("CreateSweep with a used key: created %v, members asked %v, sweep %d %q; want the first, %d %q", created, called, out.ID, out.Name, first.ID, "keyed")
	}
	if len(jobs) != len(members) {
		t.Fatalf("CreateSweep with a used key returned %d members, want %d", len(jobs), len(members))
	}
	for i, j := range jobs {
		if j.ID != members[i].ID || j.State != members[i].State {
			t.Errorf("member %d: %d %s, want %d %s", i, j.ID, j.State, members[i].ID, members[i].State)
		}
	}
	if n := len(ours(auditLog(t, s))); n != audits {
		t.Errorf("a replayed sweep wrote %d audit records, want none", n-audits)
	}
	sweeps, err := s.ListSweeps(ctx, store.SweepFilter{})
	if err != nil || len(sweeps) != 1 {
		t.Fatalf("ListSweeps after a replay: %d sweeps (%v), want 1", len(sweeps), err)
	}

	// Two at once with a new key: one stores its sweep; the other returns
	// it, or fails with a conflict and returns it when retried.
	raced := make(chan domain.Sweep, 2)
	errs := make(chan error, 2)
	for i := range 2 {
		go func() {
			sw := testSweep(fmt.Sprintf("race%d", i), "wf", "alice", 10+i)
			sw.IdempotencyKey = "race"
			create := func() (domain.Sweep, error) {
				out, _, _, err := s.CreateSweep(ctx, sw, func(id int64) ([]store.NewJob, error) {
					j := sweepJob(t, fmt.Sprintf("race%d", i), "wf", 10+i)
					j.Sweep = id
					return []store.NewJob{j}, nil
				}, domain.AuditRecord{At: at(10 + i), Actor: "user:alice", Action: "sweep.submit", Target: "sweep/" + store.AuditIDPlaceholder, Result: domain.AuditOK})
				return out, err
			}
			out, err := create()
			if errors.Is(err, domain.ErrConflict) {
				out, err = create()
			}
			raced <- out
			errs <- err
		}()
	}
	a, b := <-raced, <-raced
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("CreateSweep at once with one key: %v", err)
		}
	}
	if a.ID != b.ID {
		t.Errorf("CreateSweep at once with one key stored sweeps %d and %d, want one", a.ID, b.ID)
	}

	// Keys are the submitter's own.
	bob := testSweep("bobs", "wf", "bob", 3)
	bob.IdempotencyKey = "nightly-1"
	if other, _ := createSweep(t, s, bob, 1, 0); other.ID == first.ID {
		t.Errorf("bob's sweep with alice's key returned alice's sweep %d", first.ID)
	}
}
