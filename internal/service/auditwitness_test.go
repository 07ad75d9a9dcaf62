package service_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/audit"
	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
)

// witnessEnv is a service on a real SQLite store that keeps an audit
// witness, with a second connection to the database for tampering.
type witnessEnv struct {
	auditEnv
	path    string // the witness file
	db      *sql.DB
	logs    *syncBuffer
	storeAt string
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// newWitnessEnv seeds a log of pool, quota and n submits and brings the
// witness up to it.
func newWitnessEnv(t *testing.T, n int) *witnessEnv {
	t.Helper()
	dir := t.TempDir()
	e := &witnessEnv{path: filepath.Join(dir, "witness", "audit-witness"), logs: &syncBuffer{}, storeAt: filepath.Join(dir, "db.sqlite")}
	if err := os.Mkdir(filepath.Dir(e.path), 0o700); err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), e.storeAt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e.st = st
	e.clk = clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	e.svc = e.newService()
	if err := e.svc.Audit.LoadAuditWitness(); err != nil {
		t.Fatal(err)
	}
	pool := domain.Pool{Name: "default", Nodes: []domain.Node{{Name: "n1", CPUs: 8, Memory: 32 << 30}}}
	if _, _, err := e.svc.Pools.PutPool(context.Background(), admin, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Pools.SetQuota(context.Background(), admin, domain.Quota{Project: "default", Pool: "default",
		Guaranteed: pool.Capacity(), MaxPriority: domain.PriorityUrgent}); err != nil {
		t.Fatal(err)
	}
	e.submit(t, n)
	if w, err := e.svc.Audit.UpdateAuditWitness(context.Background()); err != nil || w.Seq != int64(n+2) {
		t.Fatalf("UpdateAuditWitness = head %d, %v; want %d", w.Seq, err, n+2)
	}
	e.db, err = sql.Open("sqlite", "file:"+e.storeAt)
	if err != nil {
		t.Fatal(err)
	}
	e.db.SetMaxOpenConns(1)
	t.Cleanup(func() { e.db.Close() })
	return e
}

// newService returns a service on the same store and witness file, as the
// server after a restart.
func (e *witnessEnv) newService() *service.Service {
	return service.New(service.Config{Store: e.st, Clock: e.clk, AuditWitness: e.path,
		Logger: slog.New(slog.NewTextHandler(e.logs, nil)), ArtifactsRoot: filepath.Join(filepath.Dir(e.path), "artifacts")})
}

func (e *witnessEnv) submit(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		e.clk.Advance(time.Second)
		if _, _, err := e.svc.Jobs.Submit(context.Background(), admin, service.SubmitInput{Doc: []byte("name: w" + strconv.Itoa(i) + "\nentrypoint: [true]\n")}); err != nil {
			t.Fatal(err)
		}
	}
}

func (e *witnessEnv) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	if _, err := e.db.Exec(query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// rehashFrom changes the actor of record seq and recomputes its hash and
// every later one, as someone who can write the database and knows the
// algorithm would.
func (e *witnessEnv) rehashFrom(t *testing.T, seq int64) {
	t.Helper()
	recs, err := e.st.ListAudit(context.Background(), store.AuditFilter{AfterSeq: seq - 1})
	if err != nil {
		t.Fatal(err)
	}
	prev := recs[0].PrevHash
	for i, r := range recs {
		if i == 0 {
			r.Actor = "user:nobody"
		}
		r.PrevHash = prev
		r.Hash = audit.Hash(r)
		e.exec(t, `UPDATE audit SET actor = ?, prev_hash = ?, hash = ? WHERE seq = ?`, r.Actor, r.PrevHash, r.Hash, r.Seq)
		prev = r.Hash
	}
}

func (e *witnessEnv) verify(t *testing.T, svc *service.Service, kept []byte) service.AuditVerification {
	t.Helper()
	rep, err := svc.Audit.VerifyAudit(context.Background(), admin, kept)
	if err != nil {
		t.Fatalf("VerifyAudit: %v", err)
	}
	return rep
}

func wantProblem(t *testing.T, rep service.AuditVerification, kind audit.Kind, seq int64, msg string) {
	t.Helper()
	p := rep.Problem
	if p == nil {
		t.Fatalf("VerifyAudit passed the log (%d records); want %s at %d: %q", rep.Records, kind, seq, msg)
	}
	if p.Kind != kind || p.Seq != seq || p.Message != msg {
		t.Fatalf("problem = %s at %d: %q\nwant       %s at %d: %q", p.Kind, p.Seq, p.Message, kind, seq, msg)
	}
}

func TestAuditWitnessFollowsTheLog(t *testing.T) {
	e := newWitnessEnv(t, 30) // records 1 to 32
	b, err := os.ReadFile(e.path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := audit.ParseWitness(b)
	recs := e.records(t, "")
	if err != nil || w.Seq != 32 || w.Hash != recs[31].Hash || !w.At.Equal(recs[31].At) || !w.WrittenAt.Equal(e.clk.Now()) {
		t.Fatalf("witness file = %+v, %v; want record 32 written now", w, err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(e.path), ".audit-witness-*")); len(left) > 0 {
		t.Errorf("temporary files left beside the witness: %v", left)
	}
	rep := e.verify(t, e.svc, nil)
	if !rep.OK() || rep.Records != 32 || rep.Witness == nil || rep.Witness.Seq != 32 {
		t.Fatalf("VerifyAudit of an intact log = %+v; want 32 records, witnessed up to 32", rep)
	}
	// It keeps following.
	e.submit(t, 3)
	if w, err := e.svc.Audit.UpdateAuditWitness(context.Background()); err != nil || w.Seq != 35 {
		t.Fatalf("UpdateAuditWitness = %d, %v; want 35", w.Seq, err)
	}
}

func TestAuditWitnessCatchesTampering(t *testing.T) {
	tests := map[string]struct {
		tamper func(t *testing.T, e *witnessEnv)
		kind   audit.Kind
		seq    int64
		msg    string
	}{
		"tail truncated": {
			tamper: func(t *testing.T, e *witnessEnv) { e.exec(t, `DELETE FROM audit WHERE seq > 29`) },
			kind:   audit.Truncated, seq: 30,
			msg: "records 30 to 32 are missing from the end of the log: it ends at record 29, but the server's witness saw record 32 (written 2025-06-01T12:00:30Z)",
		},
		"everything deleted": {
			tamper: func(t *testing.T, e *witnessEnv) { e.exec(t, `DELETE FROM audit`) },
			kind:   audit.Truncated, seq: 1,
			msg: "records 1 to 32 are missing: the log is empty, but the server's witness saw record 32 (written 2025-06-01T12:00:30Z); every record was deleted",
		},
		"last records rewritten with hashes recomputed": {
			tamper: func(t *testing.T, e *witnessEnv) { e.rehashFrom(t, 30) },
			kind:   audit.Rewritten, seq: 32,
			msg: "record 32 was rewritten: its hash differs from the one the server's witness saw at that number (written 2025-06-01T12:00:30Z); the change lies in records 1 to 32",
		},
		"tail truncated, then numbers reused": {
			tamper: func(t *testing.T, e *witnessEnv) {
				e.exec(t, `DELETE FROM audit WHERE seq > 25`)
				e.submit(t, 10) // records 26 to 35 take the numbers again
			},
			kind: audit.Rewritten, seq: 32,
			msg: "record 32 was rewritten: its hash differs from the one the server's witness saw at that number (written 2025-06-01T12:00:30Z); the change lies in records 1 to 32",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := newWitnessEnv(t, 30)
			if bare, err := audit.Verify(store.AuditRecords(context.Background(), e.st, 0, 7)); err != nil || !bare.OK() {
				t.Fatalf("untampered chain: %+v, %v", bare, err)
			}
			tc.tamper(t, e)
			// The chain alone cannot tell.
			if bare, err := audit.Verify(store.AuditRecords(context.Background(), e.st, 0, 7)); err != nil || !bare.OK() {
				t.Fatalf("the chain alone found %+v, %v; the case no longer shows what only the witness catches", bare.Problem, err)
			}
			wantProblem(t, e.verify(t, e.svc, nil), tc.kind, tc.seq, tc.msg)
			// A restarted server, which knows only the file, sees it too.
			wantProblem(t, e.verify(t, e.newService(), nil), tc.kind, tc.seq, tc.msg)

			// The witness does not follow the log backwards: it stays as
			// evidence, and the problem is logged once.
			for range 2 {
				var p *audit.Problem
				if w, err := e.svc.Audit.UpdateAuditWitness(context.Background()); !errors.As(err, &p) || w.Seq != 32 {
					t.Fatalf("UpdateAuditWitness after tampering = %d, %v; want a problem and the witness at 32", w.Seq, err)
				}
			}
			if n := strings.Count(e.logs.String(), "the audit log no longer continues its witness"); n != 1 {
				t.Errorf("the problem was logged %d times, want once:\n%s", n, e.logs)
			}
			wantProblem(t, e.verify(t, e.svc, nil), tc.kind, tc.seq, tc.msg)
		})
	}
}

func TestAuditWitnessMovedBackwards(t *testing.T) {
	e := newWitnessEnv(t, 10) // records 1 to 12
	old, err := os.ReadFile(e.path)
	if err != nil {
		t.Fatal(err)
	}
	e.submit(t, 5)
	if _, err := e.svc.Audit.UpdateAuditWitness(context.Background()); err != nil {
		t.Fatal(err)
	}
	kept, err := os.ReadFile(e.path) // the operator's copy, at record 17
	if err != nil {
		t.Fatal(err)
	}

	// The file is put back to an older copy under the running server.
	if err := os.WriteFile(e.path, old, 0o644); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, e.verify(t, e.svc, nil), audit.WitnessReplaced, 12,
		"the server's witness moved backwards: it holds record 12 as the newest (written 2025-06-01T12:00:10Z), but the witness this server wrote already saw record 17 (written 2025-06-01T12:00:15Z); it was replaced by an older copy or reset")

	// After a restart only the operator's copy knows better.
	restarted := e.newService()
	wantProblem(t, e.verify(t, restarted, kept), audit.WitnessReplaced, 12,
		"the server's witness moved backwards: it holds record 12 as the newest (written 2025-06-01T12:00:10Z), but the witness you gave already saw record 17 (written 2025-06-01T12:00:15Z); it was replaced by an older copy or reset")

	// Rolled back together with the log, the operator's copy catches it.
	e.exec(t, `DELETE FROM audit WHERE seq > 12`)
	wantProblem(t, e.verify(t, restarted, kept), audit.Truncated, 13,
		"records 13 to 17 are missing from the end of the log: it ends at record 12, but the witness you gave saw record 17 (written 2025-06-01T12:00:15Z)")

	// Deleting the file under the running server is reported too.
	if err := os.Remove(e.path); err != nil {
		t.Fatal(err)
	}
	rep := e.verify(t, e.svc, nil)
	if rep.Problem == nil || rep.Problem.Kind != audit.Truncated {
		t.Fatalf("problem = %+v; want the truncation the server's own witness still sees", rep.Problem)
	}
	e.submit(t, 10) // the log grows past what was removed: only the deletion shows
	e.exec(t, `DELETE FROM audit`)
	e.submit(t, 20)
	rep = e.verify(t, e.svc, nil)
	if rep.Problem == nil || rep.Problem.Kind != audit.Rewritten {
		t.Fatalf("problem = %+v; want record 17 rewritten", rep.Problem)
	}
}

func TestAuditWitnessFileProblems(t *testing.T) {
	e := newWitnessEnv(t, 3)
	if err := os.WriteFile(e.path, []byte("not a witness"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := e.verify(t, e.svc, nil)
	if rep.Problem == nil || rep.Problem.Kind != audit.WitnessReplaced || !strings.Contains(rep.Problem.Message, "the server's witness was damaged or replaced") {
		t.Fatalf("problem = %+v; want the damaged witness reported", rep.Problem)
	}
	// A restart refuses to overwrite it: it may be evidence.
	err := e.newService().Audit.LoadAuditWitness()
	if err == nil || !strings.Contains(err.Error(), "move it aside") {
		t.Fatalf("LoadAuditWitness of a damaged file = %v; want an error saying to move it aside", err)
	}
	if b, _ := os.ReadFile(e.path); string(b) != "not a witness" {
		t.Errorf("the damaged witness was overwritten: %q", b)
	}
	// A witness the caller gives must be one.
	if _, err := e.svc.Audit.VerifyAudit(context.Background(), admin, []byte(`{"seq": 3}`)); !errors.As(err, new(domain.FieldErrors)) {
		t.Errorf("VerifyAudit with a bad witness = %v; want a field error", err)
	}
	// A path that cannot be written fails at load, not later.
	bad := service.New(service.Config{Store: e.st, AuditWitness: filepath.Join(t.TempDir(), "missing", "w")})
	if err := bad.Audit.LoadAuditWitness(); err == nil || !strings.Contains(err.Error(), "audit_witness") {
		t.Errorf("LoadAuditWitness in a missing directory = %v; want an error naming audit_witness", err)
	}
}

func TestVerifyAuditNamesUnreadableRecord(t *testing.T) {
	e := newWitnessEnv(t, 10)
	e.exec(t, `UPDATE audit SET at = 'soon' WHERE seq = 7`)
	rep := e.verify(t, e.svc, nil)
	wantProblem(t, rep, audit.Modified, 7, `record 7 was modified: its time (at) is "soon", not Unix nanoseconds`)
	if rep.Records != 6 {
		t.Errorf("Records = %d, want the 6 before it", rep.Records)
	}
}
