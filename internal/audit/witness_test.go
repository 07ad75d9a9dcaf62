package audit_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"trainyard/internal/audit"
	"trainyard/internal/domain"
)

// witnessOf returns the witness of recs as a server following them from the
// start would hold it.
func witnessOf(t *testing.T, recs []domain.AuditRecord) audit.Witness {
	t.Helper()
	w, err := audit.Witness{Name: "the server's witness"}.Extend(recs)
	if err != nil {
		t.Fatalf("Extend over an intact log: %v", err)
	}
	return w
}

// rehash rewrites recs from index i on with recomputed hashes, as someone
// able to write the database would after editing record i+1.
func rehash(recs []domain.AuditRecord, i int) []domain.AuditRecord {
	prev := ""
	if i > 0 {
		prev = recs[i-1].Hash
	}
	for j := i; j < len(recs); j++ {
		recs[j].PrevHash = prev
		recs[j].Hash = audit.Hash(recs[j])
		prev = recs[j].Hash
	}
	return recs
}

func TestVerifyAgainstWitness(t *testing.T) {
	const n = 2500
	tests := map[string]struct {
		tamper func(recs []domain.AuditRecord) []domain.AuditRecord
		kind   audit.Kind
		seq    int64
		msg    string
	}{
		"intact": {tamper: func(r []domain.AuditRecord) []domain.AuditRecord { return r }},
		"grown since": {tamper: func(r []domain.AuditRecord) []domain.AuditRecord {
			return append(r, audit.Chain(n, r[n-1].Hash, []domain.AuditRecord{record(n + 1)})...)
		}},
		"tail removed": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord { return r[:n-3] },
			kind:   audit.Truncated, seq: n - 2,
			msg: "records 2498 to 2500 are missing from the end of the log: it ends at record 2497, but the server's witness saw record 2500",
		},
		"last removed": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord { return r[:n-1] },
			kind:   audit.Truncated, seq: n,
			msg: "record 2500 is missing from the end of the log: it ends at record 2499, but the server's witness saw record 2500",
		},
		"everything deleted": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord { return nil },
			kind:   audit.Truncated, seq: 1,
			msg: "records 1 to 2500 are missing: the log is empty, but the server's witness saw record 2500; every record was deleted",
		},
		"last records rewritten with hashes recomputed": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord {
				r[n-2].Actor = "user:nobody"
				return rehash(r, n-2)
			},
			kind: audit.Rewritten, seq: n,
			msg: "record 2500 was rewritten: its hash differs from the one the server's witness saw at that number; the change lies in records 2001 to 2500 (record 2000 still matches)",
		},
		"old record rewritten with hashes recomputed": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord {
				r[1500].Actor = "user:nobody"
				return rehash(r, 1500)
			},
			kind: audit.Rewritten, seq: 2000,
			msg: "record 2000 was rewritten: its hash differs from the one the server's witness saw at that number; the change lies in records 1001 to 2000 (record 1000 still matches)",
		},
		"truncated, then numbers reused": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord {
				r = r[:n-10]
				more := make([]domain.AuditRecord, 20)
				for i := range more {
					more[i] = record(9000 + i)
				}
				return append(r, audit.Chain(int64(len(r)), r[len(r)-1].Hash, more)...)
			},
			kind: audit.Rewritten, seq: n,
			msg: "record 2500 was rewritten: its hash differs from the one the server's witness saw at that number; the change lies in records 2001 to 2500 (record 2000 still matches)",
		},
		"chain break comes first": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord { r[99].Actor = "user:nobody"; return r[:n-5] },
			kind:   audit.Modified, seq: 100, msg: "record 100 was modified: its hash does not match its content",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			recs := chain(n)
			w := witnessOf(t, recs)
			recs = tc.tamper(chain(n))
			rep, err := audit.Verify(audit.Records(recs), w)
			if err != nil {
				t.Fatal(err)
			}
			if tc.kind == "" {
				if !rep.OK() {
					t.Fatalf("Verify against the witness found %q in an intact log", rep.Problem.Message)
				}
				return
			}
			if rep.OK() {
				t.Fatalf("Verify against the witness passed; want %q", tc.msg)
			}
			if p := rep.Problem; p.Kind != tc.kind || p.Seq != tc.seq || p.Message != tc.msg {
				t.Errorf("problem = %s at %d: %q\nwant       %s at %d: %q", p.Kind, p.Seq, p.Message, tc.kind, tc.seq, tc.msg)
			}
			// Without the witness, the same log verifies (or breaks
			// only where the chain does): the witness is what catches it.
			if bare, _ := audit.Verify(audit.Records(recs)); tc.kind != audit.Modified && !bare.OK() {
				t.Errorf("without a witness Verify found %q; the case no longer shows what only a witness catches", bare.Problem.Message)
			}
		})
	}
}

func TestVerifyNamesTheFurthestWitness(t *testing.T) {
	recs := chain(50)
	older := witnessOf(t, recs[:30])
	older.Name = "the witness you gave"
	newer := witnessOf(t, recs)
	rep, _ := audit.Verify(audit.Records(recs[:20]), older, newer)
	if rep.OK() || rep.Problem.Kind != audit.Truncated || rep.Problem.Other != 50 || !strings.Contains(rep.Problem.Message, "the server's witness saw record 50") {
		t.Fatalf("problem = %+v; want the truncation measured against the newer witness (record 50)", rep.Problem)
	}
}

func TestWitnessExtend(t *testing.T) {
	recs := chain(2100)
	w := witnessOf(t, recs[:1500])
	if w.Seq != 1500 || w.Hash != recs[1499].Hash || !w.At.Equal(recs[1499].At) {
		t.Fatalf("witness head = %d %s %v, want record 1500", w.Seq, w.Hash, w.At)
	}
	if len(w.Checkpoints) != 1 || w.Checkpoints[0] != (audit.Checkpoint{Seq: 1000, Hash: recs[999].Hash}) {
		t.Fatalf("checkpoints = %+v, want record 1000", w.Checkpoints)
	}
	// Following on: the head first, then what came after it.
	w2, err := w.Extend(recs[1499:])
	if err != nil || w2.Seq != 2100 || len(w2.Checkpoints) != 2 {
		t.Fatalf("Extend = %d with %d checkpoints, %v; want 2100 with 2", w2.Seq, len(w2.Checkpoints), err)
	}
	if len(w.Checkpoints) != 1 {
		t.Fatal("Extend changed the witness it was called on")
	}

	var p *audit.Problem
	// The head is gone: the witness stays, as evidence.
	got, err := w2.Extend(recs[1999:2050])
	if !errors.As(err, &p) || p.Kind != audit.Truncated || got.Seq != 2100 {
		t.Fatalf("Extend over a truncated log = %d, %v; want a truncation and the witness unmoved", got.Seq, err)
	}
	// The head was rewritten.
	bad := append([]domain.AuditRecord(nil), recs[2099:]...)
	bad[0].Actor = "user:nobody"
	bad[0].Hash = audit.Hash(bad[0])
	if got, err = w2.Extend(bad); !errors.As(err, &p) || p.Kind != audit.Rewritten || got.Seq != 2100 {
		t.Fatalf("Extend over a rewritten head = %d, %v; want a rewrite and the witness unmoved", got.Seq, err)
	}
	// A record after the head does not link: taken up to it.
	next := audit.Chain(2100, recs[2099].Hash, []domain.AuditRecord{record(1), record(2), record(3)})
	next[1].Detail = "edited"
	if got, err = w2.Extend(append([]domain.AuditRecord{recs[2099]}, next...)); !errors.As(err, &p) || got.Seq != 2101 {
		t.Fatalf("Extend over a broken continuation = %d, %v; want the witness moved to 2101 and a problem", got.Seq, err)
	}

	// Checkpoints are bounded.
	long := chain(audit.CheckpointEvery * (audit.MaxCheckpoints + 3))
	lw := witnessOf(t, long)
	if len(lw.Checkpoints) != audit.MaxCheckpoints || lw.Checkpoints[0].Seq != 4*audit.CheckpointEvery {
		t.Fatalf("%d checkpoints from %d; want the newest %d", len(lw.Checkpoints), lw.Checkpoints[0].Seq, audit.MaxCheckpoints)
	}
}

func TestWitnessFileRoundTrip(t *testing.T) {
	w := witnessOf(t, chain(1200))
	w.WrittenAt = t0.Add(time.Hour)
	got, err := audit.ParseWitness(w.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if got.Seq != w.Seq || got.Hash != w.Hash || !got.At.Equal(w.At) || !got.WrittenAt.Equal(w.WrittenAt) || len(got.Checkpoints) != 1 || got.Checkpoints[0] != w.Checkpoints[0] {
		t.Fatalf("round trip = %+v\nwant         %+v", got, w)
	}
	empty, err := audit.ParseWitness(audit.Witness{}.Marshal())
	if err != nil || empty.Seq != 0 {
		t.Fatalf("empty witness round trip = %+v, %v", empty, err)
	}

	h := `"sha256:` + strings.Repeat("ab", 32) + `"`
	bad := map[string]string{
		"not JSON":              "seq=4",
		"other format":          `{"format":"x","seq":1,"hash":` + h + `}`,
		"unknown field":         `{"format":"trainyard-audit-witness-v1","seq":1,"hash":` + h + `,"extra":1}`,
		"negative seq":          `{"format":"trainyard-audit-witness-v1","seq":-1}`,
		"bad hash":              `{"format":"trainyard-audit-witness-v1","seq":1,"hash":"md5:00"}`,
		"checkpoint past head":  `{"format":"trainyard-audit-witness-v1","seq":1,"hash":` + h + `,"checkpoints":[{"seq":2,"hash":` + h + `}]}`,
		"empty log with a hash": `{"format":"trainyard-audit-witness-v1","seq":0,"hash":` + h + `}`,
	}
	for name, b := range bad {
		if _, err := audit.ParseWitness([]byte(b)); err == nil {
			t.Errorf("%s: ParseWitness accepted %s", name, b)
		}
	}
}

func TestCompareWitnesses(t *testing.T) {
	recs := chain(40)
	kept := witnessOf(t, recs)
	kept.Name = "the witness you gave"
	cur := witnessOf(t, recs[:25])
	if p := audit.CompareWitnesses(kept, witnessOf(t, recs)); p != nil {
		t.Fatalf("same head: %q", p.Message)
	}
	p := audit.CompareWitnesses(kept, cur)
	want := "the server's witness moved backwards: it holds record 25 as the newest, but the witness you gave already saw record 40; it was replaced by an older copy or reset"
	if p == nil || p.Kind != audit.WitnessReplaced || p.Seq != 25 || p.Other != 40 || p.Message != want {
		t.Fatalf("problem = %+v\nwant message %q", p, want)
	}
}
