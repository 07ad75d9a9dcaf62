package sqlite

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/audit"
	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/storetest"
)

// openTest opens a store in a fresh temporary directory (inside a directory
// that does not exist yet, so Open must create it) and closes it at cleanup.
func openTest(t testing.TB) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "data", "trainyard.db"))
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

// Two stores on one file stand for two processes writing it.
func TestConformanceReplicas(t *testing.T) {
	storetest.ExerciseReplicas(t, func(t *testing.T) (store.Store, store.Store) {
		path := filepath.Join(t.TempDir(), "trainyard.db")
		return openAt(t, path), openAt(t, path)
	})
}

// openAt opens the store at path and closes it at cleanup.
func openAt(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
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

func TestReopenKeepsDataAndMigrationsAreIdempotent(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "trainyard.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	j, _, err := s.CreateJob(ctx, testNewJob(t, "a"), domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK})
	if err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ms, err := migrations()
	if err != nil {
		t.Fatalf("migrations: %v", err)
	}
	for i := range 2 {
		s, err = Open(ctx, path)
		if err != nil {
			t.Fatalf("reopen %d: %v", i, err)
		}
		got, err := s.GetJob(ctx, j.ID)
		if err != nil {
			t.Fatalf("GetJob after reopen: %v", err)
		}
		if got.Name != "a" || !got.SubmittedAt.Equal(t0) {
			t.Errorf("job after reopen = %s %v", got.Name, got.SubmittedAt)
		}
		var n int
		if err := s.readDB.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations").Scan(&n); err != nil {
			t.Fatalf("count migrations: %v", err)
		}
		if n != len(ms) {
			t.Errorf("schema_migrations has %d rows, want %d", n, len(ms))
		}
		// Ids keep increasing across reopen.
		k, _, err := s.CreateJob(ctx, testNewJob(t, fmt.Sprintf("b%d", i)), domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK})
		if err != nil || k.ID <= j.ID {
			t.Errorf("CreateJob after reopen: id %d, %v; want an id above %d", k.ID, err, j.ID)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
}

func TestNewerSchemaIsRefused(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "trainyard.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	err = s.write(ctx, func(w *writer) error {
		_, err := w.exec("INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_future.sql', 0)")
		return err
	})
	if err != nil {
		t.Fatalf("insert future migration: %v", err)
	}
	s.Close()
	if _, err := Open(ctx, path); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Open of a newer schema: err = %v, want a newer-schema error", err)
	}
}

func TestSnapshotsAreImmutable(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	j, _, err := s.CreateJob(ctx, testNewJob(t, "a"), domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK})
	if err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	tests := map[string]string{
		"update": "UPDATE snapshots SET spec_json = '{}' WHERE hash = ?",
		"delete": "DELETE FROM snapshots WHERE hash = ?",
	}
	for name, q := range tests {
		t.Run(name, func(t *testing.T) {
			err := s.write(ctx, func(w *writer) error {
				_, err := w.exec(q, j.SpecHash)
				return err
			})
			if err == nil || !strings.Contains(err.Error(), "immutable") {
				t.Fatalf("%s of a snapshot: err = %v, want the immutability trigger to refuse", name, err)
			}
		})
	}
	got, err := s.GetJob(ctx, j.ID)
	if err != nil || string(got.SpecJSON) != string(j.SpecJSON) {
		t.Fatalf("snapshot changed: %s, %v", got.SpecJSON, err)
	}
}

func TestCreateJobRejectsWrongHash(t *testing.T) {
	s := openTest(t)
	p := testNewJob(t, "a")
	p.SpecHash = "sha256:00"
	if _, _, err := s.CreateJob(context.Background(), p, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); !errors.Is(err, domain.ErrInvalid) {
		t.Fatalf("CreateJob with a wrong hash: err = %v, want ErrInvalid", err)
	}
}

func TestOutputDirPanicFailsOnlyThatCreate(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	p := testNewJob(t, "a")
	p.OutputDir = func(int64) string { panic("boom") }
	if _, _, err := s.CreateJob(ctx, p, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("CreateJob with a panicking OutputDir: err = %v", err)
	}
	if _, _, err := s.CreateJob(ctx, testNewJob(t, "b"), domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); err != nil {
		t.Fatalf("CreateJob after a panic: %v", err)
	}
	if counts, _ := s.CountJobs(ctx); counts[domain.JobQueued] != 1 {
		t.Fatalf("queued = %d, want 1", counts[domain.JobQueued])
	}
}

// blockWriter occupies the writer with a request that waits until the
// returned function is called, so the test can queue requests behind it.
func blockWriter(t *testing.T, s *Store) (release func()) {
	t.Helper()
	started, unblock := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.write(context.Background(), func(*writer) error {
			close(started)
			<-unblock
			return nil
		})
	}()
	<-started
	return func() {
		close(unblock)
		if err := <-done; err != nil {
			t.Errorf("blocking request: %v", err)
		}
	}
}

// waitQueued polls until n requests wait for the writer.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(s.reqs) < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d requests queued", len(s.reqs), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestGroupCommitIsolatesFailures(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	release := blockWriter(t, s)
	batchesBefore := s.batches.Load()

	type result struct {
		name    string
		job     domain.Job
		created bool
		err     error
	}
	fixed := func(int64) string { return "/artifacts/same" }
	// badaudit fails after its job's row is written: its audit record is
	// malformed.
	inputs := []store.NewJob{testNewJob(t, "ok1"), testNewJob(t, "clash1"), testNewJob(t, "clash2"), testNewJob(t, "badaudit"), testNewJob(t, "ok2")}
	inputs[1].OutputDir, inputs[2].OutputDir = fixed, fixed
	results := make(chan result, len(inputs))
	for i, p := range inputs {
		go func() {
			rec := domain.AuditRecord{Actor: "user:test", Action: "test", Target: "job/" + store.AuditIDPlaceholder, Result: domain.AuditOK}
			if p.Spec.Name == "badaudit" {
				rec.Result = "maybe"
			}
			j, created, err := s.CreateJob(ctx, p, rec)
			results <- result{p.Spec.Name, j, created, err}
		}()
		waitQueued(t, s, i+1) // keep the queue order
	}
	release()
	got := map[string]result{}
	for range inputs {
		r := <-results
		got[r.name] = r
	}
	if n := s.batches.Load() - batchesBefore; n != 2 {
		t.Errorf("%d batches committed, want 2 (the blocking one and one for the five creates)", n)
	}
	for _, name := range []string{"ok1", "clash1", "ok2"} {
		if r := got[name]; r.err != nil || !r.created {
			t.Errorf("%s: created=%v err=%v, want created", name, r.created, r.err)
		}
	}
	if r := got["clash2"]; !errors.Is(r.err, store.ErrConflict) {
		t.Errorf("clash2: err = %v, want ErrConflict", r.err)
	}
	if r := got["badaudit"]; !errors.Is(r.err, store.ErrInvalid) {
		t.Errorf("badaudit: err = %v, want ErrInvalid", r.err)
	}
	counts, err := s.CountJobs(ctx)
	if err != nil || counts[domain.JobQueued] != 3 {
		t.Errorf("queued = %d (%v), want 3", counts[domain.JobQueued], err)
	}
	for _, name := range []string{"ok1", "clash1", "ok2"} {
		if _, err := s.GetJob(ctx, got[name].job.ID); err != nil {
			t.Errorf("GetJob(%s): %v", name, err)
		}
		if evs, err := s.ListEvents(ctx, got[name].job.ID); err != nil || len(evs) != 1 {
			t.Errorf("ListEvents(%s) = %d events (%v), want its submit event", name, len(evs), err)
		}
	}
	// The failed create left no record, and the chain runs on unbroken
	// across it, in the order the creates committed.
	recs, err := s.ListAudit(ctx, store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	prev := ""
	for i, r := range recs {
		if r.Seq != int64(i+1) || r.PrevHash != prev {
			t.Errorf("audit record %d at position %d names previous hash %q, want %q", r.Seq, i, r.PrevHash, prev)
		}
		prev = r.Hash
		targets = append(targets, r.Target)
	}
	want := []string{"job/" + strconv.FormatInt(got["ok1"].job.ID, 10), "job/" + strconv.FormatInt(got["clash1"].job.ID, 10),
		"job/" + strconv.FormatInt(got["ok2"].job.ID, 10)}
	if !slices.Equal(targets, want) {
		t.Errorf("audit targets %v, want %v", targets, want)
	}
	if rep, err := audit.Verify(audit.Records(recs)); err != nil || !rep.OK() {
		t.Errorf("audit.Verify: %+v, %v", rep, err)
	}
}

func TestCanceledWhileQueuedWritesNothing(t *testing.T) {
	s := openTest(t)
	release := blockWriter(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, _, err := s.CreateJob(ctx, testNewJob(t, "a"), domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK})
		errc <- err
	}()
	waitQueued(t, s, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("CreateJob canceled while queued: err = %v, want context.Canceled", err)
	}
	release()
	// The writer skipped the abandoned request: a later write still works
	// and the canceled job was never stored.
	if _, _, err := s.CreateJob(context.Background(), testNewJob(t, "b"), domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	if counts, _ := s.CountJobs(context.Background()); counts[domain.JobQueued] != 1 {
		t.Fatalf("queued = %d, want 1", counts[domain.JobQueued])
	}
}

func TestApplyAbortsOnNonGuardFailure(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	j, _, err := s.CreateJob(ctx, testNewJob(t, "a"), domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK})
	if err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	// An attempt number the schema refuses (CHECK number > 0) past the
	// numbering guard cannot happen through the API; simulate a storage
	// failure instead with a job whose attempt count is corrupt.
	if err := s.write(ctx, func(w *writer) error {
		_, err := w.exec("UPDATE jobs SET attempts = -1 WHERE id = ?", j.ID)
		return err
	}); err != nil {
		t.Fatalf("corrupt attempts: %v", err)
	}
	slots, err := s.Apply(ctx, []store.Change{
		{JobID: j.ID, Move: domain.MoveHold(), At: t0},
		{JobID: j.ID, Move: domain.MoveRelease(), At: t0},
		{JobID: j.ID, Move: domain.MoveStart(), At: t0,
			Attempt: &store.AttemptChange{Number: 0, Create: true, To: domain.AttemptStarting}},
	})
	if err == nil {
		t.Fatalf("Apply with a failing statement: slots %v, want a transaction error", slots)
	}
	if got, _ := s.GetJob(ctx, j.ID); got.State != domain.JobQueued {
		t.Fatalf("job is %s, want queued: nothing of a failed Apply may commit", got.State)
	}
}

func TestClose(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "trainyard.db"))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	release := blockWriter(t, s)
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	wg.Go(func() {
		_, _, err := s.CreateJob(ctx, testNewJob(t, "queued-at-close"), domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK})
		errc <- err
	})
	waitQueued(t, s, 1)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	release()
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	wg.Wait()
	// The queued create either ran before Close took effect or was refused.
	if err := <-errc; err != nil && !errors.Is(err, errClosed) {
		t.Errorf("create queued at Close: err = %v, want success or errClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	checks := map[string]error{}
	_, _, checks["CreateJob"] = s.CreateJob(ctx, testNewJob(t, "late"), domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK})
	_, checks["GetJob"] = s.GetJob(ctx, 1)
	_, checks["Apply"] = s.Apply(ctx, []store.Change{{JobID: 1, In: []domain.JobState{domain.JobQueued}}})
	checks["Ping"] = s.Ping(ctx)
	// The reads memory may answer (detailcache.go, listcache.go).
	_, checks["JobDetail"] = s.JobDetail(ctx, 1)
	_, checks["ListJobs"] = s.ListJobs(ctx, store.JobFilter{Limit: 10})
	_, checks["AttemptTimes"] = s.AttemptTimes(ctx, []int64{1})
	_, checks["RateHistory"] = s.RateHistory(ctx)
	for name, err := range checks {
		if !errors.Is(err, errClosed) {
			t.Errorf("%s after Close: err = %v, want errClosed", name, err)
		}
	}
}

func TestOpenAppliesPragmasAtAnOddPath(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "dir with space?and#hash", "trainyard data.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	defer s.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database file not at the given path: %v", err)
	}
	var mode string
	var fk, syncMode, busy, ckpt int
	err = s.write(ctx, func(w *writer) error {
		for q, dst := range map[string]any{
			"PRAGMA journal_mode": &mode, "PRAGMA foreign_keys": &fk,
			"PRAGMA synchronous": &syncMode, "PRAGMA busy_timeout": &busy,
			"PRAGMA wal_autocheckpoint": &ckpt,
		} {
			if err := w.conn.QueryRowContext(w.ctx, q).Scan(dst); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || fk != 1 || syncMode != 1 || busy != busyTimeoutMS || ckpt != walCheckpointPages {
		t.Errorf("writer pragmas: journal_mode=%s foreign_keys=%d synchronous=%d busy_timeout=%d wal_autocheckpoint=%d; want wal 1 1 %d %d",
			mode, fk, syncMode, busy, ckpt, busyTimeoutMS, walCheckpointPages)
	}
	if _, err := s.readDB.ExecContext(ctx, "INSERT INTO tokens (name, subject, role, hash) VALUES ('x', 'x', 'x', 'x')"); err == nil {
		t.Errorf("a read connection accepted a write; it must be query-only")
	}
	var mmap int64
	if err := s.readDB.QueryRowContext(ctx, "PRAGMA mmap_size").Scan(&mmap); err != nil {
		t.Fatal(err)
	}
	if mmap != 0 {
		t.Errorf("read connections map %d bytes of the file; want none (each read after a write would unmap it)", mmap)
	}
}
