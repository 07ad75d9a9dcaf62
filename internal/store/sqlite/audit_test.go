package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"iter"
	"testing"
	"time"

	"trainyard/internal/audit"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// auditPages streams the whole log from s in pages, as the service does.
func auditPages(s store.Audits, page int) iter.Seq2[domain.AuditRecord, error] {
	return func(yield func(domain.AuditRecord, error) bool) {
		var after int64
		for {
			recs, err := s.ListAudit(context.Background(), store.AuditFilter{AfterSeq: after, Limit: page})
			if err != nil {
				yield(domain.AuditRecord{}, err)
				return
			}
			for _, r := range recs {
				if !yield(r, nil) {
					return
				}
			}
			if len(recs) < page {
				return
			}
			after = recs[len(recs)-1].Seq
		}
	}
}

// seedAudit writes n records through the store: audited job submits and
// standalone denials.
func seedAudit(t *testing.T, s *Store, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		rec := domain.AuditRecord{At: t0.Add(time.Duration(i) * time.Second), Actor: "user:alice", Action: "job.submit",
			Target: "job/{id}", After: fmt.Sprintf(`{"name":"j%d"}`, i), Result: domain.AuditOK, Client: "192.0.2.1"}
		if i%4 == 0 {
			rec.Target, rec.Result, rec.Detail = "jobs", domain.AuditDenied, "viewer may not submit"
			if err := s.AppendAudit(context.Background(), rec); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, _, err := s.CreateJob(context.Background(), testNewJob(t, fmt.Sprintf("j%d", i)), rec); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAuditHashMatchesPackageAudit(t *testing.T) {
	s := openTest(t)
	seedAudit(t, s, 30)
	recs, err := s.ListAudit(context.Background(), store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if want := audit.Hash(r); r.Hash != want {
			t.Fatalf("record %d: stored hash %s, package audit computes %s", r.Seq, r.Hash, want)
		}
	}
	rep, err := audit.Verify(auditPages(s, 7))
	if err != nil || !rep.OK() || rep.Records != 30 {
		t.Fatalf("Verify of an untouched log = %+v, %v; want 30 intact records", rep, err)
	}
}

// TestAuditTamper edits the database file behind the store's back, as
// someone with access to it could, and checks that verification names the
// exact record.
func TestAuditTamper(t *testing.T) {
	tests := map[string]struct {
		tamper func(t *testing.T, db *sql.DB)
		want   string
	}{
		"untouched": {tamper: func(*testing.T, *sql.DB) {}},
		"field edited": {
			tamper: func(t *testing.T, db *sql.DB) {
				mustExec(t, db, `UPDATE audit SET actor = 'user:mallory' WHERE seq = 17`)
			},
			want: "record 17 was modified: its hash does not match its content",
		},
		"row deleted": {
			tamper: func(t *testing.T, db *sql.DB) { mustExec(t, db, `DELETE FROM audit WHERE seq = 18`) },
			want:   "record 18 is missing (records 17 and 19 are not linked)",
		},
		"row deleted and later rows renumbered": {
			tamper: func(t *testing.T, db *sql.DB) {
				mustExec(t, db, `DELETE FROM audit WHERE seq = 18`)
				mustExec(t, db, `UPDATE audit SET seq = -(seq - 1) WHERE seq > 18`)
				mustExec(t, db, `UPDATE audit SET seq = -seq WHERE seq < 0`)
			},
			want: "record 18 is missing (records 17 and 19 are not linked; the records after it were renumbered)",
		},
		"forged row inserted": {
			tamper: func(t *testing.T, db *sql.DB) {
				var prev string
				if err := db.QueryRow(`SELECT hash FROM audit WHERE seq = 17`).Scan(&prev); err != nil {
					t.Fatal(err)
				}
				f := domain.AuditRecord{Seq: 18, At: t0, Actor: "user:alice", Action: "quota.write",
					Target: "quota/vision/standard", After: `{"gpus":512}`, Result: domain.AuditOK, PrevHash: prev}
				f.Hash = audit.Hash(f)
				mustExec(t, db, `UPDATE audit SET seq = -(seq + 1) WHERE seq >= 18`)
				mustExec(t, db, `UPDATE audit SET seq = -seq WHERE seq < 0`)
				mustExec(t, db, `INSERT INTO audit (`+auditCols+`) VALUES (?, ?, ?, ?, ?, '', ?, ?, '', '', ?, ?)`,
					f.Seq, f.At.UnixNano(), f.Actor, f.Action, f.Target, f.After, f.Result, f.PrevHash, f.Hash)
			},
			want: "record 18 was inserted: it is not part of the chain (record 19 links to record 17)",
		},
		"rows swapped": {
			tamper: func(t *testing.T, db *sql.DB) {
				// Swap every column but seq between rows 5 and 7.
				cols := `at, actor, action, target, before_json, after_json, result, detail, client, prev_hash, hash`
				mustExec(t, db, `CREATE TEMP TABLE tmp AS SELECT seq, `+cols+` FROM audit WHERE seq IN (5, 7)`)
				mustExec(t, db, `DELETE FROM audit WHERE seq IN (5, 7)`)
				mustExec(t, db, `INSERT INTO audit (seq, `+cols+`) SELECT 12 - seq, `+cols+` FROM tmp`)
			},
			want: "records 5 and 7 were swapped: each holds the other's content",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := openTest(t)
			seedAudit(t, s, 40)
			db, err := sql.Open("sqlite", dsn(s.Path(), false))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			tc.tamper(t, db)
			rep, err := audit.Verify(auditPages(s, 10))
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			switch {
			case tc.want == "" && !rep.OK():
				t.Fatalf("untouched log: Verify found %q", rep.Problem.Message)
			case tc.want == "" && rep.Records != 40:
				t.Fatalf("untouched log: %d records verified, want 40", rep.Records)
			case tc.want != "" && rep.OK():
				t.Fatalf("Verify passed a tampered log; want %q", tc.want)
			case tc.want != "" && rep.Problem.Message != tc.want:
				t.Fatalf("Verify = %q\nwant     %q", rep.Problem.Message, tc.want)
			}
		})
	}
}

func mustExec(t *testing.T, db *sql.DB, query string, args ...any) {
	t.Helper()
	if _, err := db.Exec(query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// TestAuditBatchRollback fails a whole write batch after audited requests
// ran in it: their records must go with it, and the next records continue
// the chain without a gap.
func TestAuditBatchRollback(t *testing.T) {
	s := openTest(t)
	seedAudit(t, s, 3)
	// Hold the writer in one request while two more queue up, so they
	// share the next batch: an audited request, then one that breaks the
	// transaction (it releases the savepoint the writer opened, so the
	// writer's own release fails and the whole batch rolls back).
	hold, started := make(chan struct{}), make(chan struct{})
	blocker := &writeReq{fn: func(w *writer) error { close(started); <-hold; return nil }, done: make(chan error, 1)}
	rec := domain.AuditRecord{At: t0, Actor: "user:bob", Action: "pool.write", Target: "pool/x", Result: domain.AuditOK}
	ok := &writeReq{fn: func(w *writer) error { return nil }, audit: []domain.AuditRecord{rec}, done: make(chan error, 1)}
	breaker := &writeReq{fn: func(w *writer) error {
		_, err := w.exec("RELEASE request")
		return err
	}, done: make(chan error, 1)}
	s.reqs <- blocker
	<-started
	s.reqs <- ok
	s.reqs <- breaker
	close(hold)
	if err := <-blocker.done; err != nil {
		t.Fatalf("blocker: %v", err)
	}
	if err := <-ok.done; err == nil {
		t.Fatal("the audited request of a failed batch reported success")
	}
	<-breaker.done
	recs, err := s.ListAudit(context.Background(), store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("after a failed batch the log has %d records, want the 3 from before", len(recs))
	}
	seedAudit(t, s, 2)
	rep, err := audit.Verify(auditPages(s, 100))
	if err != nil || !rep.OK() || rep.Records != 5 {
		t.Fatalf("Verify after a failed batch = %+v, %v", rep, err)
	}
}

// TestAuditUnreadableTime stores a time that is not an integer behind the
// store's back: listing returns the records before it and an error naming
// it, and a stream through store.AuditRecords ends with that error.
func TestAuditUnreadableTime(t *testing.T) {
	s := openTest(t)
	seedAudit(t, s, 12)
	db, err := sql.Open("sqlite", dsn(s.Path(), false))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mustExec(t, db, `UPDATE audit SET at = 'soon' WHERE seq = 7`)

	recs, err := s.ListAudit(context.Background(), store.AuditFilter{AfterSeq: 2, Limit: 10})
	var bad *domain.AuditRecordError
	if !errors.As(err, &bad) || bad.Seq != 7 || bad.Reason != `its time (at) is "soon", not Unix nanoseconds` {
		t.Fatalf("ListAudit error = %v; want record 7 named", err)
	}
	if len(recs) != 4 || recs[0].Seq != 3 || recs[3].Seq != 6 {
		t.Fatalf("ListAudit returned %d records; want 3 to 6, those before the unreadable one", len(recs))
	}
	var seen []int64
	for r, err := range store.AuditRecords(context.Background(), s, 0, 4) {
		if err != nil {
			if !errors.As(err, &bad) {
				t.Fatalf("stream error = %v", err)
			}
			break
		}
		seen = append(seen, r.Seq)
	}
	if len(seen) != 6 || seen[5] != 6 {
		t.Fatalf("the stream yielded %v; want records 1 to 6 before the error", seen)
	}
}
