package alerting_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"trainyard/internal/alerting"
	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// A run far past what its user's successful runs of the name took, with
// no progress for the quiet window, fires runaway once, with the numbers;
// progress resolves it. The same run by a user without a successful run
// to go by raises nothing.
func TestRunawayFiresPastTheExpectedDurationWithoutProgress(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	t0 := time.Date(2026, 12, 10, 0, 0, 0, 0, time.UTC)
	audit := func(action string) domain.AuditRecord {
		return domain.AuditRecord{At: t0, Actor: "user:admin", Action: action, Target: "test", Result: domain.AuditOK}
	}
	if _, err := st.PutPool(ctx, domain.Pool{Name: "gpu", Nodes: []domain.Node{{Name: "gpu-1", CPUs: 64, Memory: 512 << 30, GPUs: []int{0, 1}}}},
		audit("pool.write")); err != nil {
		t.Fatal(err)
	}
	apply := func(changes ...store.Change) {
		t.Helper()
		errs, err := st.Apply(ctx, changes)
		if err == nil {
			err = errors.Join(errs...)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// submit creates a job of submitter and runs its first attempt from
	// start; for > 0 ends it succeeded that much later.
	submit := func(submitter string, start time.Time, ran time.Duration) domain.Job {
		t.Helper()
		spec := domain.Spec{Name: "train", Project: "vision", Pool: "gpu", Entrypoint: []string{"true"}, Resources: domain.Resources{GPUs: 1, Nodes: 1}}
		b, _ := json.Marshal(spec)
		sum := sha256.Sum256(b)
		j, _, err := st.CreateJob(ctx, store.NewJob{Spec: spec, SpecJSON: b, SpecHash: "sha256:" + hex.EncodeToString(sum[:]),
			Submitter: submitter, SubmittedAt: start, Actor: "user:" + submitter, OutputDir: func(id int64) string { return fmt.Sprintf("/out/%d", id) }},
			audit("job.submit"))
		if err != nil {
			t.Fatal(err)
		}
		apply(store.Change{JobID: j.ID, Move: domain.MoveStart(), At: start,
			Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting, Node: "gpu-1"}},
			store.Change{JobID: j.ID, Move: domain.MoveRun(), At: start,
				Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}})
		if ran > 0 {
			apply(store.Change{JobID: j.ID, Move: domain.MoveSucceed().Only(domain.JobRunning), At: start.Add(ran),
				Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptSucceeded}})
		}
		j, err = st.GetJob(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	// Nine runs of up to 2h and one of 20h: the p90 is 2h, the outlier
	// left out.
	submit("alice", t0, 20*time.Hour)
	for i := range 9 {
		submit("alice", t0.Add(time.Duration(i)*time.Minute), 90*time.Minute+time.Duration(i)*time.Minute*30/8)
	}
	start := t0.Add(25 * time.Hour)
	long := submit("alice", start, 0)
	other := submit("bob", start, 0) // bob has no successful run of "train"
	if err := st.RecordProgress(ctx, long.ID, 1, start.Add(10*time.Minute)); err != nil {
		t.Fatal(err)
	}

	clk := clock.NewFake(start.Add(6*time.Hour + 30*time.Minute)) // over 3× 2h, 6h20m without progress
	h := &hook{}
	srv := httptest.NewServer(h)
	defer srv.Close()
	a, stop, done := newAlerterWith(t, st, srv.URL, func(c *alerting.Config) { c.Clock = clk })
	defer func() { stop(); <-done }()
	pass := func() {
		observe(a, map[int64]domain.Job{long.ID: long, other.ID: other},
			[]domain.Attempt{{JobID: long.ID, Number: 1}, {JobID: other.ID, Number: 1}})
	}
	pass()
	key := fmt.Sprintf("runaway/job=%d/attempt=1", long.ID)
	waitFor(t, "the runaway alert", func() bool { return len(h.list()) >= 1 })
	if got := h.list(); len(got) != 1 || got[0] != "firing "+key {
		t.Fatalf("receiver got %v, want only the firing of %s", got, key)
	}
	firing, err := st.ListAlerts(ctx, store.AlertFilter{State: domain.AlertFiring})
	if err != nil || len(firing) != 1 {
		t.Fatalf("firing = %+v, %v", firing, err)
	}
	want := fmt.Sprintf("job %d (train) attempt 1 has run 6h30m, over 3× the 2h (p90) of its user's last 10 successful runs of this name, with no training progress for 6h20m", long.ID)
	if s := firing[0].Summary; !strings.HasPrefix(s, want) || !strings.Contains(s, fmt.Sprintf("trainyard cancel %d", long.ID)) {
		t.Fatalf("summary = %q, want it to start %q", s, want)
	}

	if err := st.RecordProgress(ctx, long.ID, 1, clk.Now()); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	pass()
	waitFor(t, "the resolution", func() bool { return len(h.list()) == 2 })
	if got := h.list()[1]; got != "resolved "+key {
		t.Fatalf("receiver got %q, want the resolution", got)
	}
}

// healthCounter counts a store's reads of the active attempts' health
// and of earlier runs.
type healthCounter struct {
	store.Store
	health, runs atomic.Int64
}

func (s *healthCounter) ActiveHealth(ctx context.Context) ([]store.AttemptHealth, error) {
	s.health.Add(1)
	return s.Store.ActiveHealth(ctx)
}

func (s *healthCounter) RecentRuns(ctx context.Context, submitter, name string, limit int) ([]time.Duration, error) {
	s.runs.Add(1)
	return s.Store.RecentRuns(ctx, submitter, name, limit)
}

// Running attempts none of which has a successful run to go by cannot be
// runaways: their health is not read.
func TestRunawayReadsNoHealthWithoutExpectations(t *testing.T) {
	st := &healthCounter{Store: openStore(t)}
	a, stop, done := newAlerterWith(t, st, "http://127.0.0.1:1", nil)
	defer func() { stop(); <-done }()
	// bob's attempt runs (it has a health row), with no earlier run.
	ctx := context.Background()
	spec := domain.Spec{Name: "train", Project: "vision", Pool: "gpu", Entrypoint: []string{"true"}, Resources: domain.Resources{CPUs: 1, Nodes: 1}}
	b, _ := json.Marshal(spec)
	sum := sha256.Sum256(b)
	job, _, err := st.CreateJob(ctx, store.NewJob{Spec: spec, SpecJSON: b, SpecHash: "sha256:" + hex.EncodeToString(sum[:]),
		Submitter: "bob", SubmittedAt: time.Now(), Actor: "user:bob", OutputDir: func(id int64) string { return fmt.Sprintf("/out/%d", id) }},
		domain.AuditRecord{At: time.Now(), Actor: "user:bob", Action: "job.submit", Target: "test", Result: domain.AuditOK})
	if err != nil {
		t.Fatal(err)
	}
	errs, err := st.Apply(ctx, []store.Change{{JobID: job.ID, Move: domain.MoveStart(), At: time.Now(),
		Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting, Node: "n"}},
		{JobID: job.ID, Move: domain.MoveRun(), At: time.Now(),
			Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}}})
	if err == nil {
		err = errors.Join(errs...)
	}
	if err != nil {
		t.Fatal(err)
	}
	if job, err = st.GetJob(ctx, job.ID); err != nil {
		t.Fatal(err)
	}
	observe(a, map[int64]domain.Job{job.ID: job}, []domain.Attempt{{JobID: job.ID, Number: 1}})
	waitFor(t, "the rule to look at bob's earlier runs", func() bool { return st.runs.Load() > 0 })
	if n := st.health.Load(); n != 0 {
		t.Errorf("attempt health read %d times; no attempt has an expected duration", n)
	}
}

// The alerter wakes at every attempt end and on every interval, but
// judges running attempts for the runaway rule (reading their health) at
// most every ten seconds at the default quiet hour.
func TestRunawayJudgesAtMostEveryTenSeconds(t *testing.T) {
	ctx := context.Background()
	st := &healthCounter{Store: openStore(t)}
	t0 := time.Date(2026, 12, 10, 0, 0, 0, 0, time.UTC)
	spec := domain.Spec{Name: "train", Project: "vision", Pool: "gpu", Entrypoint: []string{"true"}, Resources: domain.Resources{CPUs: 1, Nodes: 1}}
	b, _ := json.Marshal(spec)
	sum := sha256.Sum256(b)
	// run creates alice's job of spec and runs it from start; for > 0
	// ends it succeeded that much later.
	run := func(start time.Time, ran time.Duration) domain.Job {
		t.Helper()
		j, _, err := st.CreateJob(ctx, store.NewJob{Spec: spec, SpecJSON: b, SpecHash: "sha256:" + hex.EncodeToString(sum[:]),
			Submitter: "alice", SubmittedAt: start, Actor: "user:alice", OutputDir: func(id int64) string { return fmt.Sprintf("/out/%d", id) }},
			domain.AuditRecord{At: start, Actor: "user:alice", Action: "job.submit", Target: "test", Result: domain.AuditOK})
		if err != nil {
			t.Fatal(err)
		}
		changes := []store.Change{{JobID: j.ID, Move: domain.MoveStart(), At: start,
			Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting, Node: "n"}},
			{JobID: j.ID, Move: domain.MoveRun(), At: start,
				Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}}}
		if ran > 0 {
			changes = append(changes, store.Change{JobID: j.ID, Move: domain.MoveSucceed().Only(domain.JobRunning), At: start.Add(ran),
				Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptSucceeded}})
		}
		errs, err := st.Apply(ctx, changes)
		if err == nil {
			err = errors.Join(errs...)
		}
		if err != nil {
			t.Fatal(err)
		}
		if j, err = st.GetJob(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		return j
	}
	run(t0, time.Hour) // what alice's runs of "train" take
	long := run(t0.Add(2*time.Hour), 0)
	clk := clock.NewFake(t0.Add(3 * time.Hour))
	var evaluations atomic.Int64
	a, stop, done := newAlerterWith(t, st, "http://127.0.0.1:1", func(c *alerting.Config) {
		c.Clock = clk
		c.Samples = func() []alerting.Sample { evaluations.Add(1); return nil }
	})
	defer func() { stop(); <-done }()
	observe(a, map[int64]domain.Job{long.ID: long}, []domain.Attempt{{JobID: long.ID, Number: 1}})
	waitFor(t, "the first judgement", func() bool { return st.health.Load() == 1 })
	// Many evaluations (every 10ms of the alerter's interval) at the
	// same time on the clock judge nothing again.
	seen := evaluations.Load()
	waitFor(t, "twenty more evaluations", func() bool { return evaluations.Load() >= seen+20 })
	if n := st.health.Load(); n != 1 {
		t.Fatalf("attempt health read %d times in %d evaluations at one moment; want once", n, evaluations.Load())
	}
	clk.Advance(10 * time.Second)
	waitFor(t, "the judgement ten seconds later", func() bool { return st.health.Load() == 2 })
}
