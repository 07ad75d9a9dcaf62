package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/postgres/pgtest"
	"trainyard/internal/store/storetest"
)

// testDSN returns the database the tests use (pgtest.DSN).
func testDSN(t testing.TB) string { return pgtest.DSN(t) }

// newSchema returns a DSN on a fresh schema of its own (pgtest.Schema).
func newSchema(t testing.TB) string { return pgtest.Schema(t) }

// openTest opens a store on a fresh schema and closes it at cleanup (before
// the schema is dropped).
func openTest(t testing.TB) *Store {
	t.Helper()
	return openOn(t, newSchema(t))
}

// openOn opens a store on the schema of dsn and closes it at cleanup:
// two of them on one schema are two replicas.
func openOn(t testing.TB, dsn string) *Store {
	t.Helper()
	s, err := Open(context.Background(), dsn)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) store.Store { return openTest(t) })
}

func TestConformanceReplicas(t *testing.T) {
	storetest.ExerciseReplicas(t, func(t *testing.T) (store.Store, store.Store) {
		dsn := newSchema(t)
		return openOn(t, dsn), openOn(t, dsn)
	})
}

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 123456789, time.UTC)

func testNewJob(t testing.TB, name string) store.NewJob {
	t.Helper()
	p, err := jobInput(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// jobInput is the CreateJob input of a small spec named name.
func jobInput(name string) (store.NewJob, error) {
	spec := domain.Spec{Name: name, Project: "p", Pool: "standard", Entrypoint: []string{"python", "train.py"},
		Policy: domain.Policy{Priority: domain.PriorityNormal}}
	b, err := json.Marshal(spec)
	if err != nil {
		return store.NewJob{}, fmt.Errorf("marshal spec: %w", err)
	}
	sum := sha256.Sum256(b)
	return store.NewJob{
		Spec: spec, SpecJSON: b, SpecHash: "sha256:" + hex.EncodeToString(sum[:]),
		Submitter: "alice", SubmittedAt: t0, Actor: "user:alice",
		OutputDir: func(id int64) string { return fmt.Sprintf("/artifacts/p/%s/%d", name, id) },
	}, nil
}

func TestOpenRejectsEmptyAndMalformedDSN(t *testing.T) {
	ctx := context.Background()
	if _, err := Open(ctx, ""); err == nil || !strings.Contains(err.Error(), "connection string is empty") {
		t.Errorf("Open(\"\") = %v, want an error saying the connection string is empty", err)
	}
	_, err := Open(ctx, "postgres://bob:hunter2@host:notaport/db")
	if err == nil {
		t.Fatal("Open with a malformed port succeeded")
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Open error reveals the password: %v", err)
	}
}

// TestChangedJobsSeesWritesThatCommitLate: a transaction that wrote a job
// before a look but committed after it must show up in the next look,
// although transactions commit out of id order.
func TestChangedJobsSeesWritesThatCommitLate(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	a := createTestJob(t, s, "a")
	b := createTestJob(t, s, "b")
	_, c0, err := s.LiveJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A slow writer: updates job a and holds its transaction open.
	slow, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Rollback(ctx)
	if _, err := slow.Exec(ctx, `UPDATE jobs SET changed_xid = pg_current_xact_id(), reason = $1, message = $2 WHERE id = $3 AND state = $4`, string(domain.ReasonQuotaExceeded), "slow", a.ID, string(domain.JobQueued)); err != nil {
		t.Fatal(err)
	}
	// A fast writer updates job b and commits first.
	if _, err := s.Apply(ctx, []store.Change{{JobID: b.ID, In: []domain.JobState{domain.JobQueued}, SetReason: true,
		Reason: domain.ReasonQuotaExceeded, Message: "fast", At: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	seen, c1, err := s.ChangedJobs(ctx, c0)
	if err != nil {
		t.Fatal(err)
	}
	// The cursor may repeat jobs (another session's open transaction on
	// the server holds the snapshot's xmin back), never miss or leak one.
	fast, leaked := false, false
	for _, j := range seen {
		fast = fast || (j.ID == b.ID && j.Message == "fast")
		leaked = leaked || j.Message == "slow"
	}
	if !fast || leaked {
		t.Fatalf("ChangedJobs while the slow writer is open = %+v, want job %d with the fast write and no uncommitted one", seen, b.ID)
	}
	if err := slow.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	seen, _, err = s.ChangedJobs(ctx, c1)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, j := range seen {
		found = found || (j.ID == a.ID && j.Message == "slow")
	}
	if !found {
		t.Fatalf("ChangedJobs after the slow writer committed = %+v, want job %d with message slow", seen, a.ID)
	}
}

func createTestJob(t *testing.T, s *Store, name string) domain.Job {
	t.Helper()
	j, _, err := s.CreateJob(context.Background(), testNewJob(t, name), domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK})
	if err != nil {
		t.Fatal(err)
	}
	return j
}
