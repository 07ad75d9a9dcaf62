package control

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
)

// TestSnapshotKeepsWhatTheStoreSays checks the snapshot's kept settings
// and active attempts against the store's, read afresh, after each of
// random writes — pools, quotas, projects and grants written by this
// store or by a second one on the same database (another process), job
// starts, ends and requeues — and steps of time across the grants' ends.
func TestSnapshotKeepsWhatTheStoreSays(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "db.sqlite")
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	other, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	audit := domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}
	now := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(3, 4))
	pools := []string{"a", "b"}
	projects := []string{"p", "q"}
	putPool := func(s store.Store, name string) {
		p := domain.Pool{Name: name, LogLimit: domain.ByteSize(rng.IntN(4)) << 20, UpdatedAt: now,
			Nodes: []domain.Node{{Name: name + "1", CPUs: float64(1 + rng.IntN(64)), Memory: 1 << 30, GPUs: []int{0, 1}}}}
		if _, err := s.PutPool(ctx, p, audit); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pools {
		putPool(st, p)
	}
	c := New(Config{Store: st, Executor: &executortest.Fake{}, Resync: time.Hour})
	var jobs []domain.Job
	newJob := func() {
		spec := domain.Spec{Name: "train", Project: projects[rng.IntN(2)], Pool: pools[rng.IntN(2)], Entrypoint: []string{"train"},
			Resources: domain.Resources{GPUs: 1, Nodes: 1}}
		js, _ := json.Marshal(spec)
		sum := sha256.Sum256(js)
		j, _, err := st.CreateJob(ctx, store.NewJob{Spec: spec, SpecJSON: js, SpecHash: "sha256:" + hex.EncodeToString(sum[:]),
			Submitter: "alice", SubmittedAt: now, Actor: "user:alice",
			OutputDir: func(id int64) string { return fmt.Sprintf("/out/%d", id) }}, audit)
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	apply := func(ch store.Change) {
		if _, err := st.Apply(ctx, []store.Change{ch}); err != nil {
			t.Fatal(err)
		}
	}
	for step := range 400 {
		// Settings are written by either store: the other stands for
		// another replica or a command run on the database.
		s := store.Store(st)
		if rng.IntN(2) == 0 {
			s = other
		}
		switch op := rng.IntN(9); op {
		case 0:
			putPool(s, pools[rng.IntN(2)])
		case 1:
			q := domain.Quota{Project: projects[rng.IntN(2)], Pool: pools[rng.IntN(2)],
				Guaranteed: domain.Limits{GPUs: rng.IntN(3), CPUs: float64(rng.IntN(3))}, MaxPriority: domain.PriorityHigh}
			if err := s.PutQuota(ctx, q, audit); err != nil {
				t.Fatal(err)
			}
		case 2:
			_ = s.DeleteQuota(ctx, projects[rng.IntN(2)], pools[rng.IntN(2)], audit) // ErrNotFound at times
		case 3:
			if err := s.PutProject(ctx, domain.Project{Name: projects[rng.IntN(2)], Shares: float64(1 + rng.IntN(4))}, audit); err != nil {
				t.Fatal(err)
			}
		case 4:
			// A grant ending a few steps of time from now (or already).
			r, err := s.CreateRequest(ctx, domain.QuotaRequest{Project: projects[rng.IntN(2)], Pool: pools[rng.IntN(2)],
				Extra: domain.Limits{GPUs: 1 + rng.IntN(2)}, Until: now.Add(time.Duration(rng.IntN(5)-1) * time.Minute),
				Requester: "alice", CreatedAt: now}, audit)
			if err != nil {
				t.Fatal(err)
			}
			if rng.IntN(3) > 0 {
				if _, err := s.DecideRequest(ctx, r.ID, domain.RequestApproved, "boss", now, "", audit); err != nil {
					t.Fatal(err)
				}
			}
		case 5:
			now = now.Add(time.Duration(rng.IntN(90)) * time.Second) // grants end; nothing is written
		case 6:
			newJob()
		default:
			// A job moves on: starts, runs, ends or requeues.
			if len(jobs) == 0 {
				newJob()
			}
			j, err := st.GetJob(ctx, jobs[rng.IntN(len(jobs))].ID)
			if err != nil {
				t.Fatal(err)
			}
			n := j.Attempts
			from := func(s domain.AttemptState) []domain.AttemptState { return []domain.AttemptState{s} }
			switch j.State {
			case domain.JobQueued:
				apply(store.Change{JobID: j.ID, Move: domain.MoveStart(), At: now, Attempt: &store.AttemptChange{Number: n + 1,
					Create: true, To: domain.AttemptStarting, Node: fmt.Sprintf("n%d", rng.IntN(3)), GPUs: []int{rng.IntN(2)}}})
			case domain.JobStarting:
				apply(store.Change{JobID: j.ID, Move: domain.MoveRun(), At: now,
					Attempt: &store.AttemptChange{Number: n, From: from(domain.AttemptStarting), To: domain.AttemptRunning}})
			case domain.JobRunning:
				if rng.IntN(2) == 0 {
					apply(store.Change{JobID: j.ID, Move: domain.MoveRequeue().Only(domain.JobRunning), At: now,
						Attempt: &store.AttemptChange{Number: n, From: from(domain.AttemptRunning), To: domain.AttemptPreempted}})
				} else {
					apply(store.Change{JobID: j.ID, Move: domain.MoveSucceed().Only(domain.JobRunning), At: now,
						Attempt: &store.AttemptChange{Number: n, From: from(domain.AttemptRunning), To: domain.AttemptSucceeded}})
				}
			}
		}
		if rng.IntN(4) == 0 {
			continue // several writes between two cycles
		}
		snap, _, atts, err := c.snapshot(ctx, now)
		if err != nil {
			t.Fatalf("step %d: snapshot: %v", step, err)
		}
		wantPools, err := st.ListPools(ctx)
		if err != nil {
			t.Fatal(err)
		}
		base, err := st.ListQuotas(ctx, "", "")
		if err != nil {
			t.Fatal(err)
		}
		grants, err := st.ActiveGrants(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		wantProjects, err := st.ListProjects(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantAtts, err := st.ActiveAttempts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		same := func(what string, got, want any) {
			t.Helper()
			g, w := reflect.ValueOf(got), reflect.ValueOf(want)
			if g.Len() == 0 && w.Len() == 0 {
				return // nil and empty alike
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("step %d: the snapshot's %s differ from the store's:\n got %+v\nwant %+v", step, what, got, want)
			}
		}
		same("pools", snap.Pools, wantPools)
		same("quotas", snap.Quotas, domain.EffectiveQuotas(base, grants, now))
		same("base quotas", c.grants.base, base)
		same("grants", c.grants.now, grants)
		same("projects", snap.Projects, wantProjects)
		same("active attempts", atts, wantAtts)
		facts := map[string]poolFacts{}
		for _, p := range wantPools {
			facts[p.Name] = factsOf(p)
		}
		if !reflect.DeepEqual(c.poolFacts, facts) {
			t.Fatalf("step %d: pool facts %v, want %v", step, c.poolFacts, facts)
		}
		var running []int64
		for _, r := range snap.Running {
			running = append(running, r.JobID)
		}
		var want []int64
		for _, a := range wantAtts {
			if j, ok := c.view[a.JobID]; ok && j.State.Live() {
				want = append(want, a.JobID)
			}
		}
		if !slices.Equal(running, want) {
			t.Fatalf("step %d: running %v, want %v", step, running, want)
		}
	}
}
