package audit_test

import (
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"testing"
	"time"

	"trainyard/internal/audit"
	"trainyard/internal/domain"
)

var t0 = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

// record returns the unchained record number i of a test log.
func record(i int) domain.AuditRecord {
	return domain.AuditRecord{
		At:     t0.Add(time.Duration(i) * time.Second),
		Actor:  fmt.Sprintf("user:u%d", i%3),
		Action: "quota.write",
		Target: fmt.Sprintf("quota/p%d/standard", i),
		Before: `{"gpus":1}`,
		After:  fmt.Sprintf(`{"gpus":%d}`, i),
		Result: domain.AuditOK,
		Client: "127.0.0.1:5000",
	}
}

// chain returns an intact log of n records.
func chain(n int) []domain.AuditRecord {
	recs := make([]domain.AuditRecord, n)
	for i := range recs {
		recs[i] = record(i + 1)
	}
	return audit.Chain(0, "", recs)
}

func TestHashCoversEveryField(t *testing.T) {
	base := chain(2)[1]
	edits := map[string]func(r *domain.AuditRecord){
		"Seq":      func(r *domain.AuditRecord) { r.Seq++ },
		"At":       func(r *domain.AuditRecord) { r.At = r.At.Add(time.Nanosecond) },
		"Actor":    func(r *domain.AuditRecord) { r.Actor += "x" },
		"Action":   func(r *domain.AuditRecord) { r.Action += "x" },
		"Target":   func(r *domain.AuditRecord) { r.Target += "x" },
		"Before":   func(r *domain.AuditRecord) { r.Before += " " },
		"After":    func(r *domain.AuditRecord) { r.After = "" },
		"Result":   func(r *domain.AuditRecord) { r.Result = domain.AuditDenied },
		"Detail":   func(r *domain.AuditRecord) { r.Detail = "why" },
		"Client":   func(r *domain.AuditRecord) { r.Client = "" },
		"PrevHash": func(r *domain.AuditRecord) { r.PrevHash = "sha256:00" },
		// Moving bytes between adjacent fields must change the hash too.
		"Boundary": func(r *domain.AuditRecord) { r.Actor, r.Action = r.Actor+"q", strings.TrimPrefix(r.Action, "q") },
	}
	for name, edit := range edits {
		t.Run(name, func(t *testing.T) {
			r := base
			edit(&r)
			if audit.Hash(r) == base.Hash {
				t.Errorf("changing %s kept the hash %s", name, base.Hash)
			}
		})
	}
	if got := audit.Hash(base); got != base.Hash {
		t.Errorf("Hash(record) = %s, Chain stored %s", got, base.Hash)
	}
	other := base
	other.At = other.At.In(time.FixedZone("X", 3600))
	if audit.Hash(other) != base.Hash {
		t.Error("the hash depends on At's time zone; it must cover the instant only")
	}
}

func TestHashIsStable(t *testing.T) {
	// A change to the canonical encoding breaks every stored log: this
	// value may only change together with the encoding's tag.
	r := domain.AuditRecord{Seq: 1, At: t0, Actor: "user:admin", Action: "job.submit", Target: "job/1",
		After: `{"name":"a"}`, Result: domain.AuditOK}
	const want = "sha256:909e86791feeb519affcca29edf729d77ce8dc6ca9360e450ec1e8cb1ba89dbd"
	if got := audit.Hash(r); got != want {
		t.Errorf("Hash = %s, want %s", got, want)
	}
}

func TestChainContinuesFromHead(t *testing.T) {
	all := chain(5)
	tail := audit.Chain(all[2].Seq, all[2].Hash, []domain.AuditRecord{record(4), record(5)})
	if !slices.Equal(tail, all[3:]) {
		t.Errorf("Chain from record 3 = %+v, want %+v", tail, all[3:])
	}
	if all[0].PrevHash != "" || all[0].Seq != 1 {
		t.Errorf("first record: Seq %d PrevHash %q, want 1 and empty", all[0].Seq, all[0].PrevHash)
	}
}

// at returns the index of record seq in an untampered log.
func at(seq int) int { return seq - 1 }

func TestVerify(t *testing.T) {
	const n = 40
	forged := func(seq int64, prevHash string) domain.AuditRecord {
		r := domain.AuditRecord{Seq: seq, At: t0, Actor: "user:mallory", Action: "quota.write",
			Target: "quota/x/standard", Result: domain.AuditOK, PrevHash: prevHash}
		r.Hash = audit.Hash(r)
		return r
	}
	// renumber sets Seq to position+1 for every record from index i on,
	// as someone closing a gap or making room would.
	renumber := func(recs []domain.AuditRecord) []domain.AuditRecord {
		for i := range recs {
			recs[i].Seq = int64(i + 1)
		}
		return recs
	}
	swap := func(recs []domain.AuditRecord, a, b int) []domain.AuditRecord {
		i, j := at(a), at(b)
		recs[i], recs[j] = recs[j], recs[i]
		recs[i].Seq, recs[j].Seq = int64(a), int64(b) // contents move, row numbers stay
		return recs
	}
	tests := map[string]struct {
		tamper func(recs []domain.AuditRecord) []domain.AuditRecord
		kind   audit.Kind
		seq    int64
		msg    string
	}{
		"intact": {tamper: func(r []domain.AuditRecord) []domain.AuditRecord { return r }},
		"empty":  {tamper: func(r []domain.AuditRecord) []domain.AuditRecord { return nil }},
		"field edited": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord { r[at(17)].After = `{"gpus":999}`; return r },
			kind:   audit.Modified, seq: 17, msg: "record 17 was modified: its hash does not match its content",
		},
		"time edited": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord {
				r[at(17)].At = r[at(17)].At.Add(time.Hour)
				return r
			},
			kind: audit.Modified, seq: 17, msg: "record 17 was modified: its hash does not match its content",
		},
		"hash edited": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord { r[at(17)].Hash = r[at(16)].Hash; return r },
			kind:   audit.Modified, seq: 17, msg: "record 17 was modified: its hash does not match its content",
		},
		"prev hash edited": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord { r[at(17)].PrevHash = r[at(15)].Hash; return r },
			kind:   audit.Modified, seq: 17, msg: "record 17 was modified: its hash does not match its content",
		},
		"first record edited": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord { r[0].Actor = "user:root"; return r },
			kind:   audit.Modified, seq: 1, msg: "record 1 was modified: its hash does not match its content",
		},
		"last record edited": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord { r[n-1].Detail = "x"; return r },
			kind:   audit.Modified, seq: n, msg: fmt.Sprintf("record %d was modified: its hash does not match its content", n),
		},
		"edited and hash recomputed": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord {
				r[at(17)].Actor = "user:root"
				r[at(17)].Hash = audit.Hash(r[at(17)])
				return r
			},
			kind: audit.Unlinked, seq: 17, msg: "records 17 and 18 are not linked: one of them was changed and its hash recomputed",
		},
		"seq edited": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord { r[at(17)].Seq = 50; return r[:at(18)] },
			kind:   audit.Modified, seq: 17, msg: "record 17 was modified: its sequence number was changed to 50",
		},
		"one deleted": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord { return slices.Delete(r, at(18), at(19)) },
			kind:   audit.Missing, seq: 18, msg: "record 18 is missing (records 17 and 19 are not linked)",
		},
		"three deleted": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord { return slices.Delete(r, at(18), at(21)) },
			kind:   audit.Missing, seq: 18, msg: "records 18 to 20 are missing (records 17 and 21 are not linked)",
		},
		"first deleted": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord { return r[1:] },
			kind:   audit.Missing, seq: 1, msg: "record 1 is missing (the log starts at record 2)",
		},
		"deleted and renumbered": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord {
				return renumber(slices.Delete(r, at(18), at(19)))
			},
			kind: audit.Missing, seq: 18,
			msg: "record 18 is missing (records 17 and 19 are not linked; the records after it were renumbered)",
		},
		"first deleted and renumbered": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord { return renumber(r[1:]) },
			kind:   audit.Missing, seq: 1, msg: "record 1 is missing (the records after it were renumbered)",
		},
		"inserted with a valid hash": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord {
				return renumber(slices.Insert(r, at(18), forged(18, r[at(17)].Hash)))
			},
			kind: audit.Inserted, seq: 18, msg: "record 18 was inserted: it is not part of the chain (record 19 links to record 17)",
		},
		"inserted with a made-up hash": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord {
				f := forged(18, r[at(17)].Hash)
				f.Hash = "sha256:" + strings.Repeat("ab", 32)
				return renumber(slices.Insert(r, at(18), f))
			},
			kind: audit.Inserted, seq: 18, msg: "record 18 was inserted: it is not part of the chain (record 19 links to record 17)",
		},
		"inserted first": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord {
				return renumber(slices.Insert(r, 0, forged(1, "")))
			},
			kind: audit.Inserted, seq: 1, msg: "record 1 was inserted: it is not part of the chain (record 2 starts the chain)",
		},
		"swapped": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord { return swap(r, 5, 7) },
			kind:   audit.Swapped, seq: 5, msg: "records 5 and 7 were swapped: each holds the other's content",
		},
		"swapped neighbours": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord { return swap(r, 20, 21) },
			kind:   audit.Swapped, seq: 20, msg: "records 20 and 21 were swapped: each holds the other's content",
		},
		"swapped first and last": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord { return swap(r, 1, n) },
			kind:   audit.Swapped, seq: 1, msg: fmt.Sprintf("records 1 and %d were swapped: each holds the other's content", n),
		},
		"duplicate": {
			tamper: func(r []domain.AuditRecord) []domain.AuditRecord { return slices.Insert(r, at(18), r[at(17)]) },
			kind:   audit.OutOfOrder, seq: 17, msg: "record 17 appears after record 17: the log is out of order or holds a duplicate",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			recs := tc.tamper(chain(n))
			rep, err := audit.Verify(audit.Records(recs))
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if tc.kind == "" {
				if !rep.OK() {
					t.Fatalf("Verify found %q in an intact log", rep.Problem.Message)
				}
				if rep.Records != int64(len(recs)) {
					t.Errorf("Records = %d, want %d", rep.Records, len(recs))
				}
				if len(recs) > 0 && (rep.LastSeq != recs[len(recs)-1].Seq || rep.LastHash != recs[len(recs)-1].Hash) {
					t.Errorf("head = %d %s, want the last record", rep.LastSeq, rep.LastHash)
				}
				return
			}
			if rep.OK() {
				t.Fatalf("Verify passed a tampered log, want %q", tc.msg)
			}
			p := rep.Problem
			if p.Kind != tc.kind || p.Seq != tc.seq || p.Message != tc.msg {
				t.Errorf("problem = %s at %d: %q\nwant       %s at %d: %q", p.Kind, p.Seq, p.Message, tc.kind, tc.seq, tc.msg)
			}
		})
	}
}

// generate yields an intact log of n records without holding it, counting
// how many records were pulled.
func generate(n int, pulled *int, tamper func(r *domain.AuditRecord)) iter.Seq2[domain.AuditRecord, error] {
	return func(yield func(domain.AuditRecord, error) bool) {
		var seq int64
		var head string
		for i := 1; i <= n; i++ {
			r := audit.Chain(seq, head, []domain.AuditRecord{record(i)})[0]
			seq, head = r.Seq, r.Hash
			if tamper != nil {
				tamper(&r)
			}
			*pulled = i
			if !yield(r, nil) {
				return
			}
		}
	}
}

func TestVerifyStreams(t *testing.T) {
	const n = 100_000
	var pulled int
	rep, err := audit.Verify(generate(n, &pulled, nil))
	if err != nil || !rep.OK() || rep.Records != n {
		t.Fatalf("Verify of %d generated records = %+v, %v", n, rep, err)
	}
	// After a break, Verify reads a bounded window to classify it, then
	// stops pulling.
	rep, err = audit.Verify(generate(n, &pulled, func(r *domain.AuditRecord) {
		if r.Seq == 500 {
			r.Actor = "user:root"
		}
	}))
	if err != nil || rep.OK() || rep.Problem.Seq != 500 {
		t.Fatalf("Verify = %+v, %v; want record 500 reported", rep, err)
	}
	if pulled > 500+1100 {
		t.Errorf("Verify pulled %d records after a break at 500; it must stop within its window", pulled)
	}
	if rep.Records != 499 || rep.LastSeq != 499 {
		t.Errorf("Records = %d, LastSeq = %d; want 499 intact records before the break", rep.Records, rep.LastSeq)
	}
}

func TestVerifyReturnsIteratorError(t *testing.T) {
	boom := errors.New("disk on fire")
	recs := chain(3)
	seq := func(yield func(domain.AuditRecord, error) bool) {
		for _, r := range recs {
			if !yield(r, nil) {
				return
			}
		}
		yield(domain.AuditRecord{}, boom)
	}
	rep, err := audit.Verify(seq)
	if !errors.Is(err, boom) {
		t.Fatalf("Verify error = %v, want %v", err, boom)
	}
	if rep.Records != 3 {
		t.Errorf("Records = %d, want 3 checked before the error", rep.Records)
	}
}

func TestVerifyNamesUnreadableRecord(t *testing.T) {
	recs := chain(10)
	seq := func(yield func(domain.AuditRecord, error) bool) {
		for _, r := range recs[:6] {
			if !yield(r, nil) {
				return
			}
		}
		yield(domain.AuditRecord{}, &domain.AuditRecordError{Seq: 7, Reason: `its time (at) is "soon", not Unix nanoseconds`})
	}
	rep, err := audit.Verify(seq)
	if err != nil {
		t.Fatalf("Verify returned %v; an unreadable record is a problem in the report, not an error", err)
	}
	want := `record 7 was modified: its time (at) is "soon", not Unix nanoseconds`
	if rep.OK() || rep.Problem.Kind != audit.Modified || rep.Problem.Seq != 7 || rep.Problem.Message != want || rep.Records != 6 {
		t.Fatalf("report = %+v, problem %+v; want record 7 named as modified after 6 intact records", rep, rep.Problem)
	}
}

func TestJSON(t *testing.T) {
	tests := map[string]struct {
		in   any
		want string
	}{
		"nil":    {nil, ""},
		"map":    {map[string]int{"b": 2, "a": 1}, `{"a":1,"b":2}`},
		"struct": {struct{ GPUs int }{3}, `{"GPUs":3}`},
		"bad":    {map[string]any{"f": func() {}}, `{"encoding_error":"json: unsupported type: func()"}`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := audit.JSON(tc.in); got != tc.want {
				t.Errorf("JSON = %s, want %s", got, tc.want)
			}
		})
	}
}
