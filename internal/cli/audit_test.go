package cli

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api"
	"trainyard/internal/api/apitypes"
	"trainyard/internal/audit"
	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store/sqlite"
)

// realAudit is a real API server on SQLite, for driving the audit commands
// against a log that can be tampered with underneath.
type realAudit struct {
	h       *harness
	db      *sql.DB // a second connection to the server's database file
	size    int     // records in the log after seeding
	svc     *service.Service
	witness string // the server's audit witness file
}

func newRealAudit(t *testing.T) *realAudit {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	witness := filepath.Join(dir, "audit-witness")
	svc := service.New(service.Config{Store: st, ArtifactsRoot: filepath.Join(dir, "artifacts"), AuditWitness: witness,
		Logger: slog.New(slog.DiscardHandler)})
	token, err := svc.Identity.Bootstrap(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	admin := service.Principal{Subject: "admin", Role: domain.RoleAdmin}
	pool := domain.Pool{Name: "default", Nodes: []domain.Node{{Name: "n1", CPUs: 8, Memory: 32 << 30}}}
	if _, _, err := svc.Pools.PutPool(context.Background(), admin, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Pools.SetQuota(context.Background(), admin, domain.Quota{Project: "default", Pool: "default",
		Guaranteed: pool.Capacity()}); err != nil {
		t.Fatal(err)
	}
	for i := range 25 {
		if _, _, err := svc.Jobs.Submit(context.Background(), admin, service.SubmitInput{Doc: fmt.Appendf(nil, "name: j%d\nentrypoint: [true]\n", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.Audit.UpdateAuditWitness(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler(api.Config{Service: svc}))
	db, err := sql.Open("sqlite", "file:"+st.Path())
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close(); srv.Close(); st.Close() })
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM audit`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.vars[EnvServer], h.vars[EnvToken] = srv.URL, token
	return &realAudit{h: h, db: db, size: n, svc: svc, witness: witness}
}

// rehashFrom changes the actor of record seq and recomputes its hash and
// every later one, as someone who can write the database would.
func (r *realAudit) rehashFrom(seq int) {
	r.h.t.Helper()
	rows, err := r.db.Query(`SELECT seq, at, actor, action, target, before_json, after_json, result, detail, client, prev_hash FROM audit WHERE seq >= ? ORDER BY seq`, seq)
	if err != nil {
		r.h.t.Fatal(err)
	}
	var recs []domain.AuditRecord
	for rows.Next() {
		var (
			rec domain.AuditRecord
			at  int64
		)
		if err := rows.Scan(&rec.Seq, &at, &rec.Actor, &rec.Action, &rec.Target, &rec.Before, &rec.After, &rec.Result, &rec.Detail, &rec.Client, &rec.PrevHash); err != nil {
			r.h.t.Fatal(err)
		}
		rec.At = time.Unix(0, at).UTC()
		recs = append(recs, rec)
	}
	rows.Close()
	prev := recs[0].PrevHash
	recs[0].Actor = "user:nobody"
	for _, rec := range recs {
		rec.PrevHash = prev
		rec.Hash = audit.Hash(rec)
		r.exec(`UPDATE audit SET actor = ?, prev_hash = ?, hash = ? WHERE seq = ?`, rec.Actor, rec.PrevHash, rec.Hash, rec.Seq)
		prev = rec.Hash
	}
}

func (r *realAudit) exec(query string, args ...any) {
	r.h.t.Helper()
	if _, err := r.db.Exec(query, args...); err != nil {
		r.h.t.Fatalf("%s: %v", query, err)
	}
}

// TestAuditVerifyDetectsTampering is the acceptance test of the audit log:
// each kind of change made directly in the database is reported by
// `trainyard audit verify` with the exact record, and an untouched log
// verifies.
func TestAuditVerifyDetectsTampering(t *testing.T) {
	tests := map[string]struct {
		tamper func(r *realAudit)
		want   string // on stderr; "" means intact
	}{
		"untouched": {tamper: func(*realAudit) {}},
		"field edited": {
			tamper: func(r *realAudit) { r.exec(`UPDATE audit SET actor = 'user:nobody' WHERE seq = 17`) },
			want:   "error: audit log is not intact: record 17 was modified: its hash does not match its content; the 16 records before it are intact\n",
		},
		"row deleted": {
			tamper: func(r *realAudit) { r.exec(`DELETE FROM audit WHERE seq = 18`) },
			want:   "error: audit log is not intact: record 18 is missing (records 17 and 19 are not linked); the 17 records before it are intact\n",
		},
		"forged row inserted": {
			tamper: func(r *realAudit) {
				var prev string
				if err := r.db.QueryRow(`SELECT hash FROM audit WHERE seq = 9`).Scan(&prev); err != nil {
					r.h.t.Fatal(err)
				}
				f := domain.AuditRecord{Seq: 10, At: time.Now().UTC(), Actor: "user:admin", Action: "quota.write",
					Target: "quota/default/default", After: `{"gpus":64}`, Result: domain.AuditOK, PrevHash: prev}
				f.Hash = audit.Hash(f)
				r.exec(`UPDATE audit SET seq = -(seq + 1) WHERE seq >= 10`)
				r.exec(`UPDATE audit SET seq = -seq WHERE seq < 0`)
				r.exec(`INSERT INTO audit (seq, at, actor, action, target, after_json, result, prev_hash, hash)
					VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, f.Seq, f.At.UnixNano(), f.Actor, f.Action, f.Target, f.After, f.Result, f.PrevHash, f.Hash)
			},
			want: "error: audit log is not intact: record 10 was inserted: it is not part of the chain (record 11 links to record 9); the 10 records before it are intact\n",
		},
		"rows swapped": {
			tamper: func(r *realAudit) {
				cols := `at, actor, action, target, before_json, after_json, result, detail, client, prev_hash, hash`
				r.exec(`CREATE TEMP TABLE swap AS SELECT seq, ` + cols + ` FROM audit WHERE seq IN (5, 12)`)
				r.exec(`DELETE FROM audit WHERE seq IN (5, 12)`)
				r.exec(`INSERT INTO audit (seq, ` + cols + `) SELECT 17 - seq, ` + cols + ` FROM swap`)
			},
			want: "error: audit log is not intact: records 5 and 12 were swapped: each holds the other's content; the 4 records before it are intact\n",
		},
		"tail truncated": {
			tamper: func(r *realAudit) { r.exec(`DELETE FROM audit WHERE seq > ?`, r.size-3) },
			want:   "error: audit log is not intact: records 28 to 30 are missing from the end of the log: it ends at record 27, but the server's witness saw record 30 (written *); the 27 records before it are intact\n",
		},
		"everything deleted": {
			tamper: func(r *realAudit) { r.exec(`DELETE FROM audit`) },
			want:   "error: audit log is not intact: records 1 to 30 are missing: the log is empty, but the server's witness saw record 30 (written *); every record was deleted; the 0 records before it are intact\n",
		},
		"last records rewritten with hashes recomputed": {
			tamper: func(r *realAudit) { r.rehashFrom(r.size - 1) },
			want:   "error: audit log is not intact: record 30 was rewritten: its hash differs from the one the server's witness saw at that number (written *); the change lies in records 1 to 30; the 29 records before it are intact\n",
		},
		"time made unreadable": {
			tamper: func(r *realAudit) { r.exec(`UPDATE audit SET at = 'yesterday' WHERE seq = 9`) },
			want:   "error: audit log is not intact: record 9 was modified: its time (at) is \"yesterday\", not Unix nanoseconds; the 8 records before it are intact\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := newRealAudit(t)
			tc.tamper(r)
			res := r.h.run("audit", "verify")
			if tc.want == "" {
				want := fmt.Sprintf("audit log intact: %d records\n", r.size)
				if res.code != ExitOK || !strings.HasPrefix(res.stdout, want) {
					t.Fatalf("verify of an untouched log: exit %d, stdout %q, stderr %q; want exit 0 and %q", res.code, res.stdout, res.stderr, want)
				}
				return
			}
			if res.code != ExitFailure || !matchStar(tc.want, res.stderr) {
				t.Fatalf("verify: exit %d, stderr %q\nwant exit 1, stderr %q", res.code, res.stderr, tc.want)
			}
		})
	}
}

func TestAuditLsAndExport(t *testing.T) {
	r := newRealAudit(t)
	res := r.h.run("audit", "ls", "--action", "job.submit", "--target", "job/", "--limit", "3")
	if res.code != ExitOK {
		t.Fatalf("audit ls: exit %d: %s", res.code, res.stderr)
	}
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "SEQ") || !strings.Contains(lines[1], "user:admin") || !strings.Contains(lines[1], "job/1 ") {
		t.Errorf("audit ls table:\n%s", res.stdout)
	}
	if !strings.Contains(res.stderr, "trainyard audit ls --after ") {
		t.Errorf("audit ls with more records: stderr %q lacks the next-page hint", res.stderr)
	}
	checkAligned(t, res.stdout)

	var byAdmin int
	if err := r.db.QueryRow(`SELECT COUNT(*) FROM audit WHERE actor = 'user:admin'`).Scan(&byAdmin); err != nil || byAdmin < 27 {
		t.Fatalf("%d records by user:admin (%v), want the pool, the quota and 25 submits at least", byAdmin, err)
	}
	res = r.h.run("audit", "ls", "--actor", "admin", "--since", "1h", "-o", "json")
	var list apitypes.AuditList
	if res.code != ExitOK || json.Unmarshal([]byte(res.stdout), &list) != nil || len(list.Records) != byAdmin {
		t.Errorf("audit ls --actor admin -o json: exit %d, %d records, want %d: %s", res.code, len(list.Records), byAdmin, res.stderr)
	}
	res = r.h.run("audit", "ls", "--actor", "nobody")
	if res.code != ExitOK || res.stdout != "" || !strings.Contains(res.stderr, "no audit records match") {
		t.Errorf("audit ls with no match: exit %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
	}
	for _, bad := range [][]string{{"--since", "yesterday"}, {"--limit", "0"}, {"--after", "-1"}} {
		if res := r.h.run(append([]string{"audit", "ls"}, bad...)...); res.code != ExitUsage {
			t.Errorf("audit ls %v: exit %d, want %d", bad, res.code, ExitUsage)
		}
	}

	res = r.h.run("audit", "export")
	if res.code != ExitOK {
		t.Fatalf("audit export: exit %d: %s", res.code, res.stderr)
	}
	var recs []domain.AuditRecord
	sc := bufio.NewScanner(strings.NewReader(res.stdout))
	for sc.Scan() {
		var a apitypes.AuditRecord
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatalf("export line %q: %v", sc.Text(), err)
		}
		recs = append(recs, domain.AuditRecord{Seq: a.Seq, At: a.At, Actor: a.Actor, Action: a.Action, Target: a.Target,
			Before: a.Before, After: a.After, Result: a.Result, Detail: a.Detail, Client: a.Client, PrevHash: a.PrevHash, Hash: a.Hash})
	}
	rep, err := audit.Verify(audit.Records(recs))
	if err != nil || !rep.OK() || len(recs) != r.size {
		t.Errorf("exported log: %d records, verification %+v %v; want %d intact records, verifiable offline", len(recs), rep, err, r.size)
	}
	res = r.h.run("audit", "export", "--after", "20")
	if n := strings.Count(res.stdout, "\n"); res.code != ExitOK || n != r.size-20 {
		t.Errorf("audit export --after 20: exit %d, %d lines, want %d", res.code, n, r.size-20)
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		in   string
		want time.Time
		bad  bool
	}{
		"empty":    {in: "", want: time.Time{}},
		"hours":    {in: "1h", want: now.Add(-time.Hour)},
		"minutes":  {in: "90m", want: now.Add(-90 * time.Minute)},
		"days":     {in: "2d", want: now.Add(-48 * time.Hour)},
		"rfc3339":  {in: "2025-06-01T12:00:00Z", want: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)},
		"negative": {in: "-1h", bad: true},
		"word":     {in: "yesterday", bad: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseSince(now, tc.in)
			if tc.bad {
				if ExitCode(err) != ExitUsage {
					t.Fatalf("parseSince(%q) = %v, %v; want a usage error", tc.in, got, err)
				}
				return
			}
			if err != nil || !got.Equal(tc.want) {
				t.Errorf("parseSince(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

// matchStar reports whether s is pattern with each "*" standing for a run
// of characters other than ")" (a time in a message).
func matchStar(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for _, p := range parts[1:] {
		i := strings.Index(s, p)
		if i < 0 || strings.Contains(s[:i], ")") {
			return false
		}
		s = s[i+len(p):]
	}
	return s == ""
}

// TestAuditWitnessKeptElsewhere keeps the server's witness with 'audit
// witness', then checks the log and the server's witness against it.
func TestAuditWitnessKeptElsewhere(t *testing.T) {
	r := newRealAudit(t)
	res := r.h.run("audit", "witness")
	if res.code != ExitOK || !strings.Contains(res.stdout, fmt.Sprintf(`"seq": %d`, r.size)) {
		t.Fatalf("audit witness: exit %d, stdout %q, stderr %q; want the witness at %d", res.code, res.stdout, res.stderr, r.size)
	}
	kept := filepath.Join(t.TempDir(), "kept.witness")
	if err := os.WriteFile(kept, []byte(res.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	older, err := os.ReadFile(r.witness)
	if err != nil {
		t.Fatal(err)
	}

	res = r.h.run("audit", "verify", "--witness", kept)
	if res.code != ExitOK || !strings.Contains(res.stdout, fmt.Sprintf("matches the server's witness: record %d", r.size)) ||
		!strings.Contains(res.stdout, "matches the witness in "+kept) {
		t.Fatalf("verify --witness of an intact log: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}

	// The log grows; then the server's witness file is put back to the
	// older copy, as after a restore of the whole machine.
	if _, err := r.svc.Identity.CreateUser(context.Background(), service.Principal{Subject: "admin", Role: domain.RoleAdmin}, "late"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.svc.Audit.UpdateAuditWitness(context.Background()); err != nil {
		t.Fatal(err)
	}
	res = r.h.run("audit", "witness")
	if err := os.WriteFile(kept, []byte(res.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.witness, older, 0o644); err != nil {
		t.Fatal(err)
	}
	res = r.h.run("audit", "verify", "--witness", kept)
	want := fmt.Sprintf("error: audit witness replaced: the server's witness moved backwards: it holds record %d as the newest (written *), but the witness this server wrote already saw record %d (written *); it was replaced by an older copy or reset; the log's own chain holds %d intact records\n", r.size, r.size+1, r.size+1)
	if res.code != ExitFailure || !matchStar(want, res.stderr) {
		t.Fatalf("verify after the witness moved back: exit %d, stderr %q\nwant %q", res.code, res.stderr, want)
	}

	// Rolled back together with the log: the kept copy still knows.
	r.exec(`DELETE FROM audit WHERE seq > ?`, r.size)
	res = r.h.run("audit", "verify", "--witness", kept)
	if res.code != ExitFailure || !strings.Contains(res.stderr, fmt.Sprintf("record %d is missing from the end of the log", r.size+1)) {
		t.Fatalf("verify of a rolled-back log: exit %d, stderr %q; want record %d named missing", res.code, res.stderr, r.size+1)
	}

	for name, content := range map[string]string{"not JSON": "seq: 4\n", "not a witness": `{"seq": 4}`} {
		bad := filepath.Join(t.TempDir(), "bad")
		os.WriteFile(bad, []byte(content), 0o600)
		res = r.h.run("audit", "verify", "--witness", bad)
		if res.code == ExitOK || !strings.Contains(res.stderr, "witness") {
			t.Errorf("%s: verify --witness: exit %d, stderr %q; want an error about the witness", name, res.code, res.stderr)
		}
	}
	if res = r.h.run("audit", "verify", "--witness", filepath.Join(t.TempDir(), "none")); res.code != ExitUsage || !strings.Contains(res.stderr, "cannot read --witness") {
		t.Errorf("verify --witness of a missing file: exit %d, stderr %q", res.code, res.stderr)
	}
}
