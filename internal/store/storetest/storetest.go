// Package storetest is the conformance suite of the metadata store: every
// backend calls Exercise from its own tests, so all backends keep the contract
// written in package store. It tests that contract only, never a backend's
// internals.
package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// Exercise runs the conformance suite against the backend newStore builds.
// newStore must return a fresh, empty store for each call (every subtest runs
// in parallel on its own store) and arrange for it to be closed when the test
// ends, for example with t.Cleanup.
func Exercise(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Helper()
	tests := map[string]func(t *testing.T, s store.Store){
		"CreateGetRoundTrip":          testCreateGetRoundTrip,
		"IDsUniqueAndIncreasing":      testIDsIncreasing,
		"SubmitEvent":                 testSubmitEvent,
		"Idempotency":                 testIdempotency,
		"OutputDirConflict":           testOutputDirConflict,
		"SnapshotDedupe":              testSnapshotDedupe,
		"ListJobs":                    testListJobs,
		"ListJobsFilters":             testListJobsFilters, // listfilters.go
		"CountJobs":                   testCountJobs,
		"ApplyGuards":                 testApplyGuards,
		"ApplyEventRecordsActualFrom": testApplyEventFrom,
		"ApplySideEffects":            testApplySideEffects,
		"ApplyWithoutTarget":          testApplyWithoutTarget,
		"AttemptNumbering":            testAttemptNumbering,
		"AttemptGuard":                testAttemptGuard,
		"AttemptFields":               testAttemptFields,
		"ActiveAttempts":              testActiveAttempts,
		"ListEventsOrder":             testListEventsOrder,
		"Tokens":                      testTokens,
		"ConcurrentCreate":            testConcurrentCreate,
		"ConcurrentCreateFailures":    testConcurrentCreateFailures,
		"NotFound":                    testNotFound,
		"PingAndKind":                 testPingAndKind,
		"Preemption":                  testPreemption,
		"AttemptSpans":                testAttemptSpans,
		"PreemptedAttempts":           testPreemptedAttempts,
		"Requests":                    testRequests,
		"SameSpecJobs":                testSameSpecJobs,
		"CreateJobLooking":            testCreateJobLooking,
		"SpendTotals":                 testSpendTotals,
		"RateHistory":                 testRateHistory,
		"AttemptTimes":                testAttemptTimes,
		"RecentUsage":                 testRecentUsage,
		"RunningSpans":                testRunningSpans,
		"RecentRuns":                  testRecentRuns, // runs.go
	}
	// Pools, quotas and projects: see pools.go.
	maps.Copy(tests, poolTests)
	maps.Copy(tests, identityTests) // users, roles, token administration: identity.go
	maps.Copy(tests, secretTests)   // secrets.go
	maps.Copy(tests, auditTests)    // the audit log: audit.go
	maps.Copy(tests, alertTests)    // alerts and their outbox: alerts.go
	maps.Copy(tests, notifyTests)   // job-end notifications: notify.go
	maps.Copy(tests, artifactTests) // manifests and checkpoints: artifacts.go
	maps.Copy(tests, tierTests)     // checkpoint tiers and storage accrual: tiers.go
	maps.Copy(tests, templateTests) // job templates: templates.go
	maps.Copy(tests, envTests)      // software environments: envs.go
	maps.Copy(tests, codeTests)     // a job's code package: code.go
	maps.Copy(tests, rerunTests)    // a re-run's link to its original: rerun.go
	maps.Copy(tests, feedTests)     // active jobs and what changed since: feed.go
	maps.Copy(tests, moveTests)     // the transition table, through Apply: moves.go
	maps.Copy(tests, reportTests)   // review reports: report.go
	maps.Copy(tests, detailTests)   // a job with what showing it needs: detail.go
	maps.Copy(tests, readTests)     // reads repeated across writes: reads.go
	maps.Copy(tests, settingsTests) // what lets a reader keep settings and attempts: settings.go
	maps.Copy(tests, workflowTests) // sweeps and dependencies: workflow.go
	maps.Copy(tests, priorityTests) // a waiting job's priority change: priority.go
	for _, name := range slices.Sorted(maps.Keys(tests)) {
		fn := tests[name]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, newStore(t))
		})
	}
}

// t0 has a nanosecond part, so a backend that truncates times fails.
var t0 = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

// at returns t0 plus n seconds and n nanoseconds.
func at(n int) time.Time { return t0.Add(time.Duration(n)*time.Second + time.Duration(n)) }

// testSpec returns a spec with every kind of field set.
func testSpec(name, project string) domain.Spec {
	return domain.Spec{
		Name: name, Project: project, Pool: "standard", Env: "torch@2.4",
		Entrypoint: []string{"python", "train.py", "--lr", "3e-4"},
		Workdir:    "/work/" + name,
		Resources:  domain.Resources{GPUs: 2, CPUs: 7.5, Memory: 64 << 30, Nodes: 1},
		Inputs:     []domain.Input{{Name: "corpus", Path: "/data/corpus", Version: "v3"}},
		Outputs:    domain.Outputs{Path: "/out/{job_id}"},
		Params:     map[string]string{"lr": "3e-4", "epochs": "10"},
		EnvVars:    map[string]string{"WANDB_MODE": "offline"},
		Secrets:    []string{"hf-token"},
		Policy: domain.Policy{Timeout: domain.Duration(24 * time.Hour), Retries: 2, Reentrant: true,
			Priority: domain.PriorityHigh, Preemptible: true},
		Checkpoint: domain.Checkpoint{Keep: 3},
		Health:     domain.Health{FirstProgress: domain.Duration(10 * time.Minute), Stall: domain.Duration(30 * time.Minute)},
		Labels:     map[string]string{"team": "vision"},
	}
}

// newJob returns the CreateJob input for spec, with its canonical JSON and
// hash and an output directory unique per job id.
func newJob(t *testing.T, spec domain.Spec, submitter string, submittedAt time.Time) store.NewJob {
	t.Helper()
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatalf("marshal spec: %v", err)
	}
	sum := sha256.Sum256(b)
	return store.NewJob{
		Spec: spec, SpecJSON: b, SpecHash: "sha256:" + hex.EncodeToString(sum[:]),
		Submitter: submitter, SubmittedAt: submittedAt,
		OutputDir: func(id int64) string { return fmt.Sprintf("/artifacts/%s/%s/%d", spec.Project, spec.Name, id) },
		Actor:     "user:" + submitter,
	}
}

func create(t *testing.T, s store.Store, p store.NewJob) domain.Job {
	t.Helper()
	j, created, err := s.CreateJob(context.Background(), p, setupAudit)
	if err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	if !created {
		t.Fatalf("CreateJob: created = false for a new job")
	}
	return j
}

// setupAudit is the audit record of the changes a test makes to set up
// the one under test; ours leaves them out of a log.
var setupAudit = domain.AuditRecord{Actor: "user:test", Action: "test.setup", Result: domain.AuditOK}

// createN creates n jobs named job-0… in project, submitted one second apart.
func createN(t *testing.T, s store.Store, project string, n int) []domain.Job {
	t.Helper()
	jobs := make([]domain.Job, n)
	for i := range n {
		jobs[i] = create(t, s, newJob(t, testSpec(fmt.Sprintf("job-%d", i), project), "alice", at(i)))
	}
	return jobs
}

func get(t *testing.T, s store.Store, id int64) domain.Job {
	t.Helper()
	j, err := s.GetJob(context.Background(), id)
	if err != nil {
		t.Fatalf("GetJob(%d): %v", id, err)
	}
	return j
}

func events(t *testing.T, s store.Store, id int64) []domain.Event {
	t.Helper()
	evs, err := s.ListEvents(context.Background(), id)
	if err != nil {
		t.Fatalf("ListEvents(%d): %v", id, err)
	}
	return evs
}

func attempts(t *testing.T, s store.Store, id int64) []domain.Attempt {
	t.Helper()
	as, err := s.ListAttempts(context.Background(), id)
	if err != nil {
		t.Fatalf("ListAttempts(%d): %v", id, err)
	}
	return as
}

// apply runs Apply and fails the test on a transaction error.
func apply(t *testing.T, s store.Store, changes ...store.Change) []error {
	t.Helper()
	errs, err := s.Apply(context.Background(), changes)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if len(errs) != len(changes) {
		t.Fatalf("Apply returned %d results for %d changes", len(errs), len(changes))
	}
	return errs
}

// mustApply applies changes that must all succeed.
func mustApply(t *testing.T, s store.Store, changes ...store.Change) {
	t.Helper()
	for i, err := range apply(t, s, changes...) {
		if err != nil {
			t.Fatalf("Apply change %d: %v", i, err)
		}
	}
}

func states(s ...domain.JobState) []domain.JobState { return s }

// normalize puts every time.Time in UTC, so values compare equal whatever
// location a backend returns them in.
func normalize[T any](v T) T {
	normalizeValue(reflect.ValueOf(&v).Elem())
	return v
}

var timeType = reflect.TypeFor[time.Time]()

func normalizeValue(v reflect.Value) {
	switch {
	case v.Type() == timeType:
		if v.CanSet() {
			tm := v.Interface().(time.Time)
			if !tm.IsZero() {
				v.Set(reflect.ValueOf(tm.UTC().Round(0)))
			}
		}
	case v.Kind() == reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				normalizeValue(v.Field(i))
			}
		}
	case v.Kind() == reflect.Slice:
		for i := range v.Len() {
			normalizeValue(v.Index(i))
		}
	case v.Kind() == reflect.Pointer && !v.IsNil():
		normalizeValue(v.Elem())
	}
}

// diff reports the exported fields in which want and got differ, or "".
func diff(want, got any) string {
	want, got = normalize(want), normalize(got)
	wv, gv := reflect.ValueOf(want), reflect.ValueOf(got)
	if wv.Kind() != reflect.Struct {
		if reflect.DeepEqual(want, got) {
			return ""
		}
		return fmt.Sprintf("\nwant %+v\n got %+v", want, got)
	}
	var out string
	for i := range wv.NumField() {
		w, g := wv.Field(i).Interface(), gv.Field(i).Interface()
		if !reflect.DeepEqual(w, g) {
			out += fmt.Sprintf("\n%s: want %+v, got %+v", wv.Type().Field(i).Name, fmtValue(w), fmtValue(g))
		}
	}
	return out
}

func fmtValue(v any) any {
	switch x := v.(type) {
	case []byte:
		return string(x)
	case *int:
		if x == nil {
			return "<nil>"
		}
		return fmt.Sprintf("&%d", *x)
	}
	return v
}

func ptr[T any](v T) *T { return &v }

func testCreateGetRoundTrip(t *testing.T, s store.Store) {
	p := newJob(t, testSpec("resnet", "vision"), "alice", t0)
	p.IdempotencyKey = "key-1"
	got := create(t, s, p)
	want := domain.Job{
		ID: got.ID, Name: "resnet", Project: "vision", Pool: "standard",
		State: domain.JobQueued, Reason: domain.ReasonSubmitted, Priority: domain.PriorityHigh,
		Submitter: "alice", SubmittedAt: t0, UpdatedAt: t0,
		Resources: p.Spec.Resources, Timeout: p.Spec.Policy.Timeout, Preemptible: p.Spec.Policy.Preemptible,
		Spec: p.Spec, SpecJSON: p.SpecJSON, SpecHash: p.SpecHash,
		OutputDir: fmt.Sprintf("/artifacts/vision/resnet/%d", got.ID), IdempotencyKey: "key-1",
	}
	if got.ID <= 0 {
		t.Fatalf("CreateJob: ID = %d, want a positive id", got.ID)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("CreateJob returned a different job:%s", d)
	}
	if d := diff(want, get(t, s, got.ID)); d != "" {
		t.Errorf("GetJob after CreateJob differs:%s", d)
	}
	if g := get(t, s, got.ID); !g.SubmittedAt.Equal(t0) || g.SubmittedAt.Nanosecond() != t0.Nanosecond() {
		t.Errorf("SubmittedAt = %v, want %v to the nanosecond", g.SubmittedAt, t0)
	}

	// A spec with empty optional fields round-trips as well.
	bare := domain.Spec{Name: "bare", Project: "p", Pool: "cpu", Entrypoint: []string{"true"}}
	bp := newJob(t, bare, "bob", at(1))
	bj := create(t, s, bp)
	g := get(t, s, bj.ID)
	if !reflect.DeepEqual(g.Spec, bare) || string(g.SpecJSON) != string(bp.SpecJSON) {
		t.Errorf("bare spec round trip: got %+v / %s, want %+v / %s", g.Spec, g.SpecJSON, bare, bp.SpecJSON)
	}
	if !g.StartedAt.IsZero() || !g.FinishedAt.IsZero() || !g.NextAttempt.IsZero() {
		t.Errorf("new job has non-zero StartedAt/FinishedAt/NextAttempt: %v %v %v", g.StartedAt, g.FinishedAt, g.NextAttempt)
	}
}

func testIDsIncreasing(t *testing.T, s store.Store) {
	jobs := createN(t, s, "p", 20)
	for i := 1; i < len(jobs); i++ {
		if jobs[i].ID <= jobs[i-1].ID {
			t.Fatalf("job %d has id %d, not greater than the previous id %d", i, jobs[i].ID, jobs[i-1].ID)
		}
	}
}

func testSubmitEvent(t *testing.T, s store.Store) {
	j := create(t, s, newJob(t, testSpec("a", "p"), "alice", t0))
	evs := events(t, s, j.ID)
	if len(evs) != 1 {
		t.Fatalf("ListEvents: got %d events, want 1 submit event: %+v", len(evs), evs)
	}
	want := domain.Event{ID: evs[0].ID, JobID: j.ID, At: t0, From: "", To: domain.JobQueued,
		Actor: "user:alice", Reason: domain.ReasonSubmitted}
	if d := diff(want, evs[0]); d != "" {
		t.Errorf("submit event differs:%s", d)
	}
}

func testIdempotency(t *testing.T, s store.Store) {
	ctx := context.Background()
	p := newJob(t, testSpec("a", "p"), "alice", t0)
	p.IdempotencyKey = "retry-42"
	first := create(t, s, p)

	// Same key, same submitter, even with a different spec: the first job.
	again := newJob(t, testSpec("b", "p"), "alice", at(5))
	again.IdempotencyKey = "retry-42"
	got, created, err := s.CreateJob(ctx, again, setupAudit)
	if err != nil {
		t.Fatalf("CreateJob with a repeated key: %v", err)
	}
	if created {
		t.Errorf("CreateJob with a repeated key: created = true, want false")
	}
	if d := diff(get(t, s, first.ID), got); d != "" {
		t.Errorf("CreateJob with a repeated key returned a different job than the first:%s", d)
	}
	counts, err := s.CountJobs(ctx)
	if err != nil {
		t.Fatalf("CountJobs: %v", err)
	}
	if counts[domain.JobQueued] != 1 {
		t.Errorf("after a repeated key: %d queued jobs, want 1", counts[domain.JobQueued])
	}
	if evs := events(t, s, first.ID); len(evs) != 1 {
		t.Errorf("after a repeated key: %d events, want 1", len(evs))
	}

	// Same key, another submitter: a new job.
	other := newJob(t, testSpec("a", "p"), "bob", at(6))
	other.IdempotencyKey = "retry-42"
	oj := create(t, s, other)
	if oj.ID == first.ID {
		t.Errorf("another submitter's key returned the first job %d", first.ID)
	}
	// No key: always a new job.
	create(t, s, newJob(t, testSpec("a", "p"), "alice", at(7)))
	create(t, s, newJob(t, testSpec("a", "p"), "alice", at(8)))
	counts, err = s.CountJobs(ctx)
	if err != nil {
		t.Fatalf("CountJobs: %v", err)
	}
	if counts[domain.JobQueued] != 4 {
		t.Errorf("%d queued jobs, want 4", counts[domain.JobQueued])
	}
}

func testOutputDirConflict(t *testing.T, s store.Store) {
	ctx := context.Background()
	fixed := func(int64) string { return "/artifacts/shared" }
	p := newJob(t, testSpec("a", "p"), "alice", t0)
	p.OutputDir = fixed
	first := create(t, s, p)

	clash := newJob(t, testSpec("clash", "p"), "alice", at(1))
	clash.OutputDir = fixed
	clash.IdempotencyKey = "clash-key"
	if _, _, err := s.CreateJob(ctx, clash, setupAudit); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("CreateJob with a used output directory: err = %v, want ErrConflict", err)
	}
	jobs, err := s.ListJobs(ctx, store.JobFilter{})
	if err != nil {
		t.Fatalf("ListJobs: %v", err)
	}
	if len(jobs) != 1 || jobs[0].ID != first.ID {
		t.Fatalf("after the clash ListJobs = %d jobs, want only job %d", len(jobs), first.ID)
	}
	// Nothing of the failed create remains: its idempotency key is free.
	clash.OutputDir = func(id int64) string { return fmt.Sprintf("/artifacts/own/%d", id) }
	next, created, err := s.CreateJob(ctx, clash, setupAudit)
	if err != nil || !created {
		t.Fatalf("CreateJob after a clash: created=%v err=%v, want a new job", created, err)
	}
	if next.ID <= first.ID {
		t.Errorf("job after the clash has id %d, want more than %d", next.ID, first.ID)
	}
	if evs := events(t, s, next.ID); len(evs) != 1 {
		t.Errorf("job after the clash has %d events, want 1", len(evs))
	}
}

func testSnapshotDedupe(t *testing.T, s store.Store) {
	spec := testSpec("same", "p")
	a := create(t, s, newJob(t, spec, "alice", t0))
	b := create(t, s, newJob(t, spec, "bob", at(1)))
	ga, gb := get(t, s, a.ID), get(t, s, b.ID)
	if ga.SpecHash != gb.SpecHash || string(ga.SpecJSON) != string(gb.SpecJSON) {
		t.Errorf("two jobs of the same spec: hashes %s / %s, JSON equal %v", ga.SpecHash, gb.SpecHash, string(ga.SpecJSON) == string(gb.SpecJSON))
	}
	if !reflect.DeepEqual(ga.Spec, spec) || !reflect.DeepEqual(gb.Spec, spec) {
		t.Errorf("shared snapshot does not decode to the spec")
	}
}

func testListJobs(t *testing.T, s store.Store) {
	ctx := context.Background()
	// Six jobs: ids[0..2] in project "a", ids[3..5] in project "b".
	jobs := append(createN(t, s, "a", 3), createN(t, s, "b", 3)...)
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	// Move some: ids[1] held, ids[4] to starting, ids[5] failed (started first).
	mustApply(t, s,
		store.Change{JobID: ids[1], Move: domain.MoveHold(), Actor: "user:alice", At: at(10)},
		store.Change{JobID: ids[4], Move: domain.MoveStart(), Actor: "system:scheduler", At: at(11)},
		store.Change{JobID: ids[5], Move: domain.MoveStart(), Actor: "system:scheduler", At: at(12)},
		store.Change{JobID: ids[5], Move: domain.MoveFail(), Actor: "system:executor", At: at(12)},
	)
	rev := func(xs ...int64) []int64 { xs = slices.Clone(xs); slices.Reverse(xs); return xs }
	tests := map[string]struct {
		f    store.JobFilter
		want []int64
	}{
		"all newest first":           {store.JobFilter{}, rev(ids...)},
		"limit":                      {store.JobFilter{Limit: 2}, []int64{ids[5], ids[4]}},
		"cursor":                     {store.JobFilter{BeforeID: ids[3]}, []int64{ids[2], ids[1], ids[0]}},
		"cursor and limit":           {store.JobFilter{BeforeID: ids[4], Limit: 2}, []int64{ids[3], ids[2]}},
		"one state":                  {store.JobFilter{States: states(domain.JobQueued)}, []int64{ids[3], ids[2], ids[0]}},
		"two states":                 {store.JobFilter{States: states(domain.JobHeld, domain.JobFailed)}, []int64{ids[5], ids[1]}},
		"two states limit":           {store.JobFilter{States: states(domain.JobQueued, domain.JobHeld), Limit: 3}, []int64{ids[3], ids[2], ids[1]}},
		"states and cursor":          {store.JobFilter{States: states(domain.JobQueued, domain.JobHeld), BeforeID: ids[2], Limit: 5}, []int64{ids[1], ids[0]}},
		"duplicate states":           {store.JobFilter{States: states(domain.JobHeld, domain.JobHeld), Limit: 5}, []int64{ids[1]}},
		"project":                    {store.JobFilter{Project: "b"}, []int64{ids[5], ids[4], ids[3]}},
		"project and state":          {store.JobFilter{Project: "a", States: states(domain.JobQueued)}, []int64{ids[2], ids[0]}},
		"unknown project":            {store.JobFilter{Project: "zzz"}, nil},
		"no match":                   {store.JobFilter{States: states(domain.JobSucceeded)}, nil},
		"ascending":                  {store.JobFilter{Ascending: true}, ids},
		"ascending ignores cursor":   {store.JobFilter{Ascending: true, BeforeID: ids[1], Limit: 2}, []int64{ids[0], ids[1]}},
		"ascending queue":            {store.JobFilter{Ascending: true, States: states(domain.JobQueued)}, []int64{ids[0], ids[2], ids[3]}},
		"ascending two states limit": {store.JobFilter{Ascending: true, States: states(domain.JobQueued, domain.JobHeld), Limit: 2}, []int64{ids[0], ids[1]}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := s.ListJobs(ctx, tc.f)
			if err != nil {
				t.Fatalf("ListJobs(%+v): %v", tc.f, err)
			}
			gotIDs := make([]int64, len(got))
			for i, j := range got {
				gotIDs[i] = j.ID
			}
			if !slices.Equal(gotIDs, tc.want) {
				t.Errorf("ListJobs(%+v) ids = %v, want %v", tc.f, gotIDs, tc.want)
			}
		})
	}

	// List rows carry every field but Spec and SpecJSON.
	got, err := s.ListJobs(ctx, store.JobFilter{States: states(domain.JobStarting)})
	if err != nil || len(got) != 1 {
		t.Fatalf("ListJobs(starting) = %d jobs, %v; want 1", len(got), err)
	}
	want := get(t, s, ids[4])
	if want.Resources != want.Spec.Resources {
		t.Errorf("job Resources = %+v, want the spec's %+v", want.Resources, want.Spec.Resources)
	}
	want.Spec, want.SpecJSON = domain.Spec{}, nil
	if d := diff(want, got[0]); d != "" {
		t.Errorf("list row differs from GetJob without the spec:%s", d)
	}
}

func testCountJobs(t *testing.T, s store.Store) {
	ctx := context.Background()
	counts, err := s.CountJobs(ctx)
	if err != nil {
		t.Fatalf("CountJobs on an empty store: %v", err)
	}
	for st, n := range counts {
		if n != 0 {
			t.Errorf("empty store: %d jobs in state %s", n, st)
		}
	}
	jobs := createN(t, s, "p", 5)
	mustApply(t, s,
		store.Change{JobID: jobs[0].ID, Move: domain.MoveHold(), At: at(10)},
		store.Change{JobID: jobs[1].ID, Move: domain.MoveCancel().Only(domain.JobQueued), At: at(10)},
		store.Change{JobID: jobs[2].ID, Move: domain.MoveCancel().Only(domain.JobQueued), At: at(10)},
	)
	counts, err = s.CountJobs(ctx)
	if err != nil {
		t.Fatalf("CountJobs: %v", err)
	}
	want := map[domain.JobState]int{domain.JobQueued: 2, domain.JobHeld: 1, domain.JobCanceled: 2}
	for _, st := range domain.JobStates() {
		if counts[st] != want[st] {
			t.Errorf("CountJobs[%s] = %d, want %d (all: %v)", st, counts[st], want[st], counts)
		}
	}
}

func testApplyGuards(t *testing.T, s store.Store) {
	jobs := createN(t, s, "p", 3)
	a, b, c := jobs[0].ID, jobs[1].ID, jobs[2].ID
	errs := apply(t, s,
		store.Change{JobID: a, Move: domain.MoveHold(), Actor: "user:alice", At: at(10)},
		store.Change{JobID: b, Move: domain.MoveSucceed().Only(domain.JobRunning), Actor: "system:executor", At: at(10)},
		store.Change{JobID: c + 1000, Move: domain.MoveHold(), At: at(10)},
		store.Change{JobID: c, Move: domain.MoveCancel().Only(domain.JobQueued, domain.JobHeld), At: at(10)},
		// Sees the first change of the same call: a is held now.
		store.Change{JobID: a, Move: domain.MoveCancel().Only(domain.JobQueued), At: at(11)},
	)
	if errs[0] != nil || errs[3] != nil {
		t.Errorf("valid changes failed: %v, %v", errs[0], errs[3])
	}
	if !errors.Is(errs[1], store.ErrConflict) {
		t.Errorf("change from the wrong state: err = %v, want ErrConflict", errs[1])
	}
	if !errors.Is(errs[2], store.ErrNotFound) {
		t.Errorf("change of a missing job: err = %v, want ErrNotFound", errs[2])
	}
	if !errors.Is(errs[4], store.ErrConflict) {
		t.Errorf("change guarded by a state an earlier change left: err = %v, want ErrConflict", errs[4])
	}
	if got := get(t, s, a).State; got != domain.JobHeld {
		t.Errorf("job a is %s, want held", got)
	}
	gb := get(t, s, b)
	if gb.State != domain.JobQueued || !gb.FinishedAt.IsZero() || !gb.UpdatedAt.Equal(at(1)) {
		t.Errorf("job b changed despite its failed guard: %s finished=%v updated=%v", gb.State, gb.FinishedAt, gb.UpdatedAt)
	}
	if evs := events(t, s, b); len(evs) != 1 {
		t.Errorf("job b has %d events after a failed guard, want 1", len(evs))
	}
	if got := get(t, s, c).State; got != domain.JobCanceled {
		t.Errorf("job c is %s, want canceled", got)
	}
	if evs := events(t, s, a); len(evs) != 2 {
		t.Errorf("job a has %d events, want 2 (submit, hold)", len(evs))
	}

	// An empty call is not an error.
	errs, err := s.Apply(context.Background(), nil)
	if err != nil || len(errs) != 0 {
		t.Errorf("Apply(nil) = %v, %v; want no results and no error", errs, err)
	}
}

func testApplyEventFrom(t *testing.T, s store.Store) {
	j := create(t, s, newJob(t, testSpec("a", "p"), "alice", t0))
	mustApply(t, s, store.Change{JobID: j.ID, Move: domain.MoveHold(),
		Actor: "user:admin", Reason: "HeldByAdmin", Message: "maintenance", At: at(1)})
	mustApply(t, s, store.Change{JobID: j.ID, Move: domain.MoveCancel().Only(domain.JobQueued, domain.JobHeld, domain.JobStarting),
		Actor: "user:alice", Reason: domain.ReasonCanceledByUser, Message: "not needed", At: at(2)})
	evs := events(t, s, j.ID)
	if len(evs) != 3 {
		t.Fatalf("got %d events, want 3", len(evs))
	}
	want := []domain.Event{
		{ID: evs[0].ID, JobID: j.ID, At: t0, To: domain.JobQueued, Actor: "user:alice", Reason: domain.ReasonSubmitted},
		{ID: evs[1].ID, JobID: j.ID, At: at(1), From: domain.JobQueued, To: domain.JobHeld, Actor: "user:admin", Reason: "HeldByAdmin", Message: "maintenance"},
		{ID: evs[2].ID, JobID: j.ID, At: at(2), From: domain.JobHeld, To: domain.JobCanceled, Actor: "user:alice", Reason: domain.ReasonCanceledByUser, Message: "not needed"},
	}
	for i := range want {
		if d := diff(want[i], evs[i]); d != "" {
			t.Errorf("event %d differs:%s", i, d)
		}
	}
	g := get(t, s, j.ID)
	if g.Reason != domain.ReasonCanceledByUser || g.Message != "not needed" {
		t.Errorf("job reason/message = %q/%q, want the last change's", g.Reason, g.Message)
	}
}

func testApplySideEffects(t *testing.T, s store.Store) {
	j := create(t, s, newJob(t, testSpec("a", "p"), "alice", t0))
	id := j.ID
	step := func(name string, c store.Change, check func(g domain.Job) string) {
		t.Helper()
		c.JobID = id
		mustApply(t, s, c)
		if msg := check(get(t, s, id)); msg != "" {
			t.Errorf("%s: %s", name, msg)
		}
	}
	step("schedule", store.Change{Move: domain.MoveStart(), Reason: domain.ReasonScheduled, At: at(1),
		Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting, Node: "n1", GPUs: []int{0, 1}}},
		func(g domain.Job) string {
			if g.State != domain.JobStarting || !g.UpdatedAt.Equal(at(1)) || !g.StartedAt.IsZero() || g.Attempts != 1 {
				return fmt.Sprintf("state %s updated %v started %v attempts %d", g.State, g.UpdatedAt, g.StartedAt, g.Attempts)
			}
			return ""
		})
	step("start", store.Change{Move: domain.MoveRun(), Reason: domain.ReasonStarted, At: at(2)},
		func(g domain.Job) string {
			if !g.StartedAt.Equal(at(2)) || !g.UpdatedAt.Equal(at(2)) || !g.FinishedAt.IsZero() {
				return fmt.Sprintf("started %v updated %v finished %v", g.StartedAt, g.UpdatedAt, g.FinishedAt)
			}
			return ""
		})
	step("request cancel", store.Change{In: states(domain.JobRunning), RequestCancel: true, At: at(3)},
		func(g domain.Job) string {
			if !g.CancelRequested || g.State != domain.JobRunning {
				return fmt.Sprintf("cancel requested %v state %s", g.CancelRequested, g.State)
			}
			return ""
		})
	step("requeue with backoff", store.Change{Move: domain.MoveRequeue().Only(domain.JobRunning), Reason: domain.ReasonBackoff,
		NextAttempt: at(60), At: at(4)},
		func(g domain.Job) string {
			if !g.NextAttempt.Equal(at(60)) || g.CancelRequested || !g.StartedAt.Equal(at(2)) || !g.FinishedAt.IsZero() {
				return fmt.Sprintf("next %v cancel %v started %v finished %v", g.NextAttempt, g.CancelRequested, g.StartedAt, g.FinishedAt)
			}
			return ""
		})
	step("schedule again", store.Change{Move: domain.MoveStart(), At: at(61)},
		func(g domain.Job) string {
			if !g.NextAttempt.IsZero() {
				return fmt.Sprintf("next attempt %v, want cleared", g.NextAttempt)
			}
			return ""
		})
	step("run again", store.Change{Move: domain.MoveRun(), At: at(62)},
		func(g domain.Job) string {
			if !g.StartedAt.Equal(at(2)) {
				return fmt.Sprintf("started %v, want the first start %v kept", g.StartedAt, at(2))
			}
			return ""
		})
	step("cancel while running", store.Change{In: states(domain.JobRunning), RequestCancel: true, At: at(63)},
		func(g domain.Job) string {
			if !g.CancelRequested {
				return "cancel not requested"
			}
			return ""
		})
	step("finish", store.Change{Move: domain.MoveCancel().Only(domain.JobRunning), Reason: domain.ReasonCanceledByUser, At: at(70)},
		func(g domain.Job) string {
			if !g.FinishedAt.Equal(at(70)) || g.CancelRequested || g.State != domain.JobCanceled {
				return fmt.Sprintf("finished %v cancel %v state %s", g.FinishedAt, g.CancelRequested, g.State)
			}
			return ""
		})
	if evs := events(t, s, id); len(evs) != 7 {
		t.Errorf("%d events, want 7 (submit and six transitions; cancel requests record none)", len(evs))
	}
}

func testApplyWithoutTarget(t *testing.T, s store.Store) {
	j := create(t, s, newJob(t, testSpec("a", "p"), "alice", t0))
	mustApply(t, s, store.Change{JobID: j.ID, In: states(domain.JobQueued), SetReason: true,
		Reason: domain.ReasonNoCapacity, Message: "pool standard has 0 of 8 GPUs free", At: at(5)})
	g := get(t, s, j.ID)
	if g.State != domain.JobQueued || g.Reason != domain.ReasonNoCapacity || g.Message != "pool standard has 0 of 8 GPUs free" {
		t.Errorf("after SetReason: state %s reason %s message %q", g.State, g.Reason, g.Message)
	}
	if !g.UpdatedAt.Equal(t0) {
		t.Errorf("SetReason changed UpdatedAt to %v; only Reason and Message may change", g.UpdatedAt)
	}
	// Without SetReason the reason stays.
	mustApply(t, s, store.Change{JobID: j.ID, In: states(domain.JobQueued), Reason: "Ignored", Message: "ignored", At: at(6)})
	if g := get(t, s, j.ID); g.Reason != domain.ReasonNoCapacity {
		t.Errorf("change without SetReason set reason %s", g.Reason)
	}
	// The guard still applies.
	errs := apply(t, s, store.Change{JobID: j.ID, In: states(domain.JobHeld), SetReason: true, Reason: "X", At: at(7)})
	if !errors.Is(errs[0], store.ErrConflict) {
		t.Errorf("SetReason from the wrong state: err = %v, want ErrConflict", errs[0])
	}
	if evs := events(t, s, j.ID); len(evs) != 1 {
		t.Errorf("%d events, want only the submit event", len(evs))
	}
}

func testAttemptNumbering(t *testing.T, s store.Store) {
	j := create(t, s, newJob(t, testSpec("a", "p"), "alice", t0))
	schedule := func(n int) store.Change {
		return store.Change{JobID: j.ID, Move: domain.MoveStart(), At: at(n),
			Attempt: &store.AttemptChange{Number: n, Create: true, To: domain.AttemptStarting, Node: "n1"}}
	}
	errs := apply(t, s, schedule(2))
	if !errors.Is(errs[0], store.ErrConflict) {
		t.Fatalf("create attempt 2 as the first: err = %v, want ErrConflict", errs[0])
	}
	// The job part of the failed change was rolled back too.
	if g := get(t, s, j.ID); g.State != domain.JobQueued || g.Attempts != 0 {
		t.Errorf("after a failed attempt create the job is %s with %d attempts, want queued with 0", g.State, g.Attempts)
	}
	if evs := events(t, s, j.ID); len(evs) != 1 {
		t.Errorf("after a failed attempt create: %d events, want 1", len(evs))
	}
	if as := attempts(t, s, j.ID); len(as) != 0 {
		t.Errorf("after a failed attempt create: %d attempts, want 0", len(as))
	}
	mustApply(t, s, schedule(1))
	if g := get(t, s, j.ID); g.Attempts != 1 {
		t.Errorf("Attempts = %d, want 1", g.Attempts)
	}
	mustApply(t, s, store.Change{JobID: j.ID, Move: domain.MoveRequeue().Only(domain.JobStarting), At: at(3),
		Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptLost}})
	errs = apply(t, s, schedule(1))
	if !errors.Is(errs[0], store.ErrConflict) {
		t.Errorf("create attempt 1 twice: err = %v, want ErrConflict", errs[0])
	}
	mustApply(t, s, schedule(2))
	as := attempts(t, s, j.ID)
	if len(as) != 2 || as[0].Number != 1 || as[1].Number != 2 {
		t.Fatalf("attempts = %+v, want numbers 1, 2", as)
	}
	if g := get(t, s, j.ID); g.Attempts != 2 {
		t.Errorf("Attempts = %d, want 2", g.Attempts)
	}
	evs := events(t, s, j.ID)
	if last := evs[len(evs)-1]; last.Attempt != 2 {
		t.Errorf("event of the change that created attempt 2 has Attempt %d", last.Attempt)
	}
}

// startJob creates a job and moves it to running with attempt 1 running.
func startJob(t *testing.T, s store.Store, name string, gpus []int) domain.Job {
	t.Helper()
	j := create(t, s, newJob(t, testSpec(name, "p"), "alice", t0))
	mustApply(t, s,
		store.Change{JobID: j.ID, Move: domain.MoveStart(), At: at(1),
			Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting, Node: "node-a", GPUs: gpus}},
		store.Change{JobID: j.ID, Move: domain.MoveRun(), At: at(2),
			Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}},
	)
	return get(t, s, j.ID)
}

func testAttemptGuard(t *testing.T, s store.Store) {
	j := startJob(t, s, "a", nil)
	errs := apply(t, s,
		store.Change{JobID: j.ID, Move: domain.MoveSucceed().Only(domain.JobRunning), At: at(3),
			Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptSucceeded, ExitCode: ptr(0)}},
		store.Change{JobID: j.ID, Move: domain.MoveFail().Only(domain.JobRunning), At: at(3),
			Attempt: &store.AttemptChange{Number: 7, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptFailed}},
	)
	if !errors.Is(errs[0], store.ErrConflict) {
		t.Errorf("attempt change from the wrong state: err = %v, want ErrConflict", errs[0])
	}
	if !errors.Is(errs[1], store.ErrNotFound) && !errors.Is(errs[1], store.ErrConflict) {
		t.Errorf("change of a missing attempt: err = %v, want ErrNotFound or ErrConflict", errs[1])
	}
	// Both changes were rolled back whole: the job part too.
	g := get(t, s, j.ID)
	if g.State != domain.JobRunning || !g.FinishedAt.IsZero() {
		t.Errorf("job is %s finished %v, want running and unfinished", g.State, g.FinishedAt)
	}
	as := attempts(t, s, j.ID)
	if len(as) != 1 || as[0].State != domain.AttemptRunning || as[0].ExitCode != nil {
		t.Errorf("attempts = %+v, want attempt 1 running without exit code", as)
	}
	if evs := events(t, s, j.ID); len(evs) != 3 {
		t.Errorf("%d events, want 3", len(evs))
	}
	// A job guard failure skips the attempt part.
	errs = apply(t, s, store.Change{JobID: j.ID, Move: domain.MoveStart(), At: at(4),
		Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptFailed}})
	if !errors.Is(errs[0], store.ErrConflict) {
		t.Errorf("job guard failure: err = %v, want ErrConflict", errs[0])
	}
	if as := attempts(t, s, j.ID); as[0].State != domain.AttemptRunning {
		t.Errorf("attempt moved to %s although its job guard failed", as[0].State)
	}
}

func testAttemptFields(t *testing.T, s store.Store) {
	ok := startJob(t, s, "ok", []int{0, 1, 3})
	bad := startJob(t, s, "bad", nil)
	lost := startJob(t, s, "lost", []int{2})
	mustApply(t, s,
		store.Change{JobID: ok.ID, Move: domain.MoveSucceed().Only(domain.JobRunning), Reason: domain.ReasonCompleted, At: at(9),
			Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptSucceeded,
				Reason: domain.ReasonCompleted, Message: "exit 0", ExitCode: ptr(0),
				Usage: &domain.Usage{CPUSeconds: 12.25, MaxRSS: 3 << 30, GPUSeconds: 7.5}}},
		store.Change{JobID: bad.ID, Move: domain.MoveFail().Only(domain.JobRunning), Reason: domain.ReasonExitCode, At: at(9),
			Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptFailed,
				Reason: domain.ReasonExitCode, Message: "exit 3", ExitCode: ptr(3)}},
		store.Change{JobID: lost.ID, Move: domain.MoveRequeue().Only(domain.JobRunning), Reason: domain.ReasonNodeLost, At: at(9),
			Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptLost,
				Reason: domain.ReasonNodeLost}},
	)
	tests := map[string]struct {
		job  domain.Job
		want domain.Attempt
	}{
		"exit 0": {ok, domain.Attempt{JobID: ok.ID, Number: 1, State: domain.AttemptSucceeded, Reason: domain.ReasonCompleted,
			Message: "exit 0", ExitCode: ptr(0), Node: "node-a", GPUs: []int{0, 1, 3}, CreatedAt: at(1), StartedAt: at(2), FinishedAt: at(9),
			Usage: domain.Usage{CPUSeconds: 12.25, MaxRSS: 3 << 30, GPUSeconds: 7.5}}},
		"exit 3": {bad, domain.Attempt{JobID: bad.ID, Number: 1, State: domain.AttemptFailed, Reason: domain.ReasonExitCode,
			Message: "exit 3", ExitCode: ptr(3), Node: "node-a", CreatedAt: at(1), StartedAt: at(2), FinishedAt: at(9)}},
		"no exit code": {lost, domain.Attempt{JobID: lost.ID, Number: 1, State: domain.AttemptLost, Reason: domain.ReasonNodeLost,
			Node: "node-a", GPUs: []int{2}, CreatedAt: at(1), StartedAt: at(2), FinishedAt: at(9)}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			as := attempts(t, s, tc.job.ID)
			if len(as) != 1 {
				t.Fatalf("%d attempts, want 1", len(as))
			}
			got := as[0]
			if len(got.GPUs) == 0 && len(tc.want.GPUs) == 0 {
				got.GPUs = tc.want.GPUs
			}
			if d := diff(tc.want, got); d != "" {
				t.Errorf("attempt differs:%s", d)
			}
		})
	}
	if g := get(t, s, lost.ID); !g.FinishedAt.IsZero() {
		t.Errorf("requeued job has FinishedAt %v", g.FinishedAt)
	}
}

func testActiveAttempts(t *testing.T, s store.Store) {
	ctx := context.Background()
	if as, err := s.ActiveAttempts(ctx); err != nil || len(as) != 0 {
		t.Fatalf("ActiveAttempts on an empty store = %v, %v", as, err)
	}
	a := startJob(t, s, "a", []int{0})
	b := create(t, s, newJob(t, testSpec("b", "p"), "alice", t0))
	c := startJob(t, s, "c", []int{1})
	mustApply(t, s, store.Change{JobID: b.ID, Move: domain.MoveStart(), At: at(3),
		Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting, Node: "node-b"}})
	// c's first attempt ends; its second starts.
	mustApply(t, s,
		store.Change{JobID: c.ID, Move: domain.MoveRequeue().Only(domain.JobRunning), At: at(4),
			Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptPreempted}},
		store.Change{JobID: c.ID, Move: domain.MoveStart(), At: at(5),
			Attempt: &store.AttemptChange{Number: 2, Create: true, To: domain.AttemptStarting, Node: "node-c"}},
	)
	// a finishes.
	mustApply(t, s, store.Change{JobID: a.ID, Move: domain.MoveSucceed().Only(domain.JobRunning), At: at(6),
		Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptSucceeded, ExitCode: ptr(0)}})
	as, err := s.ActiveAttempts(ctx)
	if err != nil {
		t.Fatalf("ActiveAttempts: %v", err)
	}
	type key struct {
		job   int64
		n     int
		state domain.AttemptState
	}
	var got []key
	for _, x := range as {
		got = append(got, key{x.JobID, x.Number, x.State})
	}
	want := []key{{b.ID, 1, domain.AttemptStarting}, {c.ID, 2, domain.AttemptStarting}}
	if !slices.Equal(got, want) {
		t.Errorf("ActiveAttempts = %v, want %v", got, want)
	}
}

func testListEventsOrder(t *testing.T, s store.Store) {
	j := startJob(t, s, "a", nil)
	other := create(t, s, newJob(t, testSpec("other", "p"), "bob", t0))
	mustApply(t, s, store.Change{JobID: other.ID, Move: domain.MoveHold(), At: at(3)})
	// The event time goes backwards; the order is still the order of changes.
	mustApply(t, s, store.Change{JobID: j.ID, Move: domain.MoveFail().Only(domain.JobRunning), At: at(-100),
		Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptFailed, ExitCode: ptr(1)}})
	evs := events(t, s, j.ID)
	var tos []domain.JobState
	for i, e := range evs {
		tos = append(tos, e.To)
		if e.JobID != j.ID {
			t.Errorf("event %d belongs to job %d", i, e.JobID)
		}
		if i > 0 && e.ID <= evs[i-1].ID {
			t.Errorf("event ids not increasing: %d after %d", e.ID, evs[i-1].ID)
		}
	}
	want := []domain.JobState{domain.JobQueued, domain.JobStarting, domain.JobRunning, domain.JobFailed}
	if !slices.Equal(tos, want) {
		t.Errorf("event targets = %v, want %v", tos, want)
	}
	if evs[1].Attempt != 1 || evs[0].Attempt != 0 {
		t.Errorf("event attempts = %d, %d; want 0 for submit and 1 for the attempt's change", evs[0].Attempt, evs[1].Attempt)
	}
	if evs, err := s.ListEvents(context.Background(), 1<<40); err != nil || len(evs) != 0 {
		t.Errorf("ListEvents of a missing job = %v, %v; want none", evs, err)
	}
}

func testTokens(t *testing.T, s store.Store) {
	ctx := context.Background()
	if n, err := s.CountTokens(ctx); err != nil || n != 0 {
		t.Fatalf("CountTokens on an empty store = %d, %v", n, err)
	}
	tok := store.Token{Name: "bootstrap", Subject: "admin", Role: "admin", Hash: "sha256:aa", CreatedAt: t0, ExpiresAt: at(86400)}
	created, err := s.CreateToken(ctx, tok, setupAudit)
	if err != nil {
		t.Fatalf("CreateToken: %v", err)
	}
	if created.ID <= 0 {
		t.Errorf("CreateToken: ID = %d, want positive", created.ID)
	}
	tok.ID = created.ID
	if d := diff(tok, created); d != "" {
		t.Errorf("CreateToken returned a different token:%s", d)
	}
	got, err := s.TokenByHash(ctx, "sha256:aa")
	if err != nil {
		t.Fatalf("TokenByHash: %v", err)
	}
	if d := diff(tok, got); d != "" {
		t.Errorf("TokenByHash differs:%s", d)
	}
	revoked := store.Token{Name: "old", Subject: "bob", Role: "member", Hash: "sha256:bb", CreatedAt: t0, RevokedAt: at(5)}
	r, err := s.CreateToken(ctx, revoked, setupAudit)
	if err != nil {
		t.Fatalf("CreateToken: %v", err)
	}
	if r.ID == created.ID {
		t.Errorf("two tokens share id %d", r.ID)
	}
	if g, err := s.TokenByHash(ctx, "sha256:bb"); err != nil || !g.RevokedAt.Equal(at(5)) || !g.ExpiresAt.IsZero() {
		t.Errorf("revoked token = %+v, %v", g, err)
	}
	if _, err := s.CreateToken(ctx, store.Token{Name: "dup", Subject: "x", Role: "admin", Hash: "sha256:aa", CreatedAt: t0}, setupAudit); !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateToken with a duplicate hash: err = %v, want ErrConflict", err)
	}
	if n, err := s.CountTokens(ctx); err != nil || n != 2 {
		t.Errorf("CountTokens = %d, %v; want 2", n, err)
	}
	if _, err := s.TokenByHash(ctx, "sha256:none"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("TokenByHash of an unknown hash: err = %v, want ErrNotFound", err)
	}
}

// testConcurrentCreateFailures submits jobs concurrently, so that they
// share the backend's write transactions, with every fifth one failing in
// the store (its output directory is taken): each failure leaves nothing
// behind, and every other job is stored whole, with its event and its
// audit record, on an unbroken chain.
func testConcurrentCreateFailures(t *testing.T, s store.Store) {
	ctx := context.Background()
	taken := newJob(t, testSpec("taken", "p"), "alice", t0)
	taken.OutputDir = func(int64) string { return "/artifacts/taken" }
	create(t, s, taken)
	const workers, perWorker = 16, 10
	type outcome struct {
		name string
		job  domain.Job
		err  error
	}
	var (
		mu  sync.Mutex
		out []outcome
		wg  sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				name := fmt.Sprintf("w%d-%d", w, i)
				p := newJob(t, testSpec(name, "p"), "bob", at(i))
				if (w+i)%5 == 0 {
					p.OutputDir = func(int64) string { return "/artifacts/taken" }
				}
				if i%3 == 0 {
					p.IdempotencyKey = name
				}
				rec := domain.AuditRecord{Actor: "user:bob", Action: "job.submit", Target: "job/" + store.AuditIDPlaceholder,
					After: `{"name":"` + name + `"}`, Result: domain.AuditOK}
				if (w+i)%5 == 3 {
					rec.Result = "maybe" // malformed: fails once the job's row is written
				}
				j, created, err := s.CreateJob(ctx, p, rec)
				if err == nil && !created {
					err = errors.New("created = false for a new job")
				}
				mu.Lock()
				out = append(out, outcome{name, j, err})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	stored := map[string]int64{} // job/<id> → id, of the jobs stored
	for _, o := range out {
		var w, i int
		fmt.Sscanf(o.name, "w%d-%d", &w, &i)
		switch {
		case (w+i)%5 == 0:
			if !errors.Is(o.err, store.ErrConflict) {
				t.Errorf("%s with a taken output directory: err = %v, want ErrConflict", o.name, o.err)
			}
			continue
		case (w+i)%5 == 3:
			if !errors.Is(o.err, store.ErrInvalid) {
				t.Errorf("%s with a malformed audit record: err = %v, want ErrInvalid", o.name, o.err)
			}
			continue
		}
		if o.err != nil {
			t.Errorf("%s: %v", o.name, o.err)
			continue
		}
		target := "job/" + strconv.FormatInt(o.job.ID, 10)
		if _, dup := stored[target]; dup {
			t.Errorf("%s: id %d returned twice", o.name, o.job.ID)
		}
		stored[target] = o.job.ID
		g := get(t, s, o.job.ID)
		if g.Name != o.name || g.OutputDir != fmt.Sprintf("/artifacts/p/%s/%d", o.name, o.job.ID) || g.State != domain.JobQueued {
			t.Errorf("%s: stored as name %q, output %q, state %s", o.name, g.Name, g.OutputDir, g.State)
		}
		if evs := events(t, s, o.job.ID); len(evs) != 1 || evs[0].To != domain.JobQueued {
			t.Errorf("%s: events %+v, want its submit event alone", o.name, evs)
		}
	}
	all, err := s.ListJobs(ctx, store.JobFilter{})
	if err != nil {
		t.Fatalf("ListJobs: %v", err)
	}
	if len(all) != len(stored)+1 {
		t.Errorf("%d jobs stored, want %d (and nothing of the failed submits)", len(all), len(stored)+1)
	}
	recs := auditLog(t, s)
	checkChain(t, recs)
	seen := map[string]bool{}
	for _, r := range ours(recs) {
		if _, ok := stored[r.Target]; !ok || seen[r.Target] {
			t.Errorf("audit record %d names %s: not a stored job, or twice", r.Seq, r.Target)
		}
		seen[r.Target] = true
	}
	if len(seen) != len(stored) {
		t.Errorf("%d audit records of submits, want one for each of the %d stored jobs", len(seen), len(stored))
	}
}

func testConcurrentCreate(t *testing.T, s store.Store) {
	const workers, perWorker = 8, 25
	var (
		mu  sync.Mutex
		ids = map[int64]bool{}
		wg  sync.WaitGroup
	)
	errs := make(chan error, workers*perWorker)
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				p := newJob(t, testSpec(fmt.Sprintf("w%d-%d", w, i), "p"), fmt.Sprintf("user%d", w), at(i))
				if i%5 == 0 {
					p.IdempotencyKey = fmt.Sprintf("k%d", i)
				}
				j, created, err := s.CreateJob(context.Background(), p, setupAudit)
				if err != nil || !created {
					errs <- fmt.Errorf("worker %d job %d: created=%v err=%v", w, i, created, err)
					continue
				}
				mu.Lock()
				if ids[j.ID] {
					errs <- fmt.Errorf("id %d returned twice", j.ID)
				}
				ids[j.ID] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(ids) != workers*perWorker {
		t.Errorf("%d distinct ids, want %d", len(ids), workers*perWorker)
	}
	counts, err := s.CountJobs(context.Background())
	if err != nil {
		t.Fatalf("CountJobs: %v", err)
	}
	if counts[domain.JobQueued] != workers*perWorker {
		t.Errorf("CountJobs[queued] = %d, want %d", counts[domain.JobQueued], workers*perWorker)
	}
	all, err := s.ListJobs(context.Background(), store.JobFilter{})
	if err != nil || len(all) != workers*perWorker {
		t.Errorf("ListJobs = %d jobs, %v; want %d", len(all), err, workers*perWorker)
	}
}

func testNotFound(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.GetJob(ctx, 12345); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetJob of a missing job: err = %v, want ErrNotFound", err)
	}
	j := create(t, s, newJob(t, testSpec("a", "p"), "alice", t0))
	if _, err := s.GetJob(ctx, j.ID+1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetJob(%d): err = %v, want ErrNotFound", j.ID+1, err)
	}
	errs := apply(t, s, store.Change{JobID: j.ID + 1, In: states(domain.JobQueued), SetReason: true, Reason: "x", At: at(1)})
	if !errors.Is(errs[0], store.ErrNotFound) {
		t.Errorf("Apply to a missing job: err = %v, want ErrNotFound", errs[0])
	}
	if as, err := s.ListAttempts(ctx, j.ID); err != nil || len(as) != 0 {
		t.Errorf("ListAttempts of a job without attempts = %v, %v", as, err)
	}
}

func testPingAndKind(t *testing.T, s store.Store) {
	if err := s.Ping(context.Background()); err != nil {
		t.Errorf("Ping: %v", err)
	}
	if k := s.Kind(); k != "sqlite" && k != "postgres" {
		t.Errorf("Kind() = %q, want sqlite or postgres", k)
	}
}
