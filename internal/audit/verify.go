package audit

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"iter"

	"trainyard/internal/domain"
)

// Kind classifies a break in the chain.
type Kind string

// Kinds of problems Verify reports.
const (
	// Modified: the record's hash does not match its content.
	Modified Kind = "modified"
	// Missing: one or more records were removed (a gap in Seq, or later
	// records renumbered to close it).
	Missing Kind = "missing"
	// Inserted: a record that is not part of the chain sits between two
	// that are.
	Inserted Kind = "inserted"
	// Swapped: two records hold each other's content.
	Swapped Kind = "swapped"
	// Unlinked: two records are each intact but do not link; one of them
	// was changed and its hash recomputed.
	Unlinked Kind = "unlinked"
	// OutOfOrder: Seq does not increase (a duplicate, or a log read out
	// of order).
	OutOfOrder Kind = "out_of_order"
	// Truncated: the log ends before the head a witness saw (its newest
	// records, or all of them, were deleted).
	Truncated Kind = "truncated"
	// Rewritten: a record's hash differs from the one a witness saw at its
	// number; it and the records before it were replaced with hashes
	// recomputed (or the numbers were reused after a truncation).
	Rewritten Kind = "rewritten"
	// WitnessReplaced: a witness holds an older head than one seen before
	// it (see CompareWitnesses), or was deleted or damaged.
	WitnessReplaced Kind = "witness_replaced"
)

// Problem is the first break Verify found.
type Problem struct {
	Kind Kind
	// Seq is the record the problem is about: the modified, inserted or
	// first missing record, or the first of two swapped ones.
	Seq int64
	// Other is the second record involved: the last missing one, the other
	// swapped one, or the record that fails to link. 0 when none.
	Other int64
	// Message says what is wrong in one sentence, naming the records.
	Message string
}

// Error returns the message, so a Problem can travel as an error.
func (p *Problem) Error() string { return p.Message }

// Report is the outcome of Verify.
type Report struct {
	// Records is how many records were checked and found intact; with a
	// Problem, how many came before it.
	Records int64
	// LastSeq and LastHash are the newest intact record (the head of the
	// log when there is no Problem). Keep them elsewhere, as a Witness: a
	// later Verify whose log no longer holds this hash at this Seq shows
	// truncation or a rewrite.
	LastSeq  int64
	LastHash string
	// Problem is the first break, nil when the chain is intact.
	Problem *Problem
}

// OK reports whether the chain is intact.
func (r Report) OK() bool { return r.Problem == nil }

// window bounds how many records Verify reads past a break to tell a swap, an
// insertion or a modification apart; memory stays bounded by it.
const window = 1024

// Records adapts a slice to the iterator Verify reads.
func Records(recs []domain.AuditRecord) iter.Seq2[domain.AuditRecord, error] {
	return func(yield func(domain.AuditRecord, error) bool) {
		for _, r := range recs {
			if !yield(r, nil) {
				return
			}
		}
	}
}

// Verify walks records, which must come in Seq order starting at the first
// record of the log, and reports the first break in the chain. It streams:
// memory does not grow with the log (at most a window of 1024 records past a
// break is kept to classify it).
//
// With witnesses, the log must also hold, at each witnessed number (a head
// or a checkpoint), the hash the witness saw (Rewritten otherwise), and must
// reach every witness's head (Truncated otherwise).
//
// A *domain.AuditRecordError from the iterator is a record that cannot be
// read: it is reported as modified, by number. Any other error stops the
// walk and is returned with the report so far.
func Verify(records iter.Seq2[domain.AuditRecord, error], witnesses ...Witness) (Report, error) {
	v := &verifier{h: sha256.New(), witnessed: witnessPoints(witnesses)}
	for rec, err := range records {
		if err != nil {
			var bad *domain.AuditRecordError
			if !errors.As(err, &bad) {
				return v.report(), err
			}
			v.unreadable(bad)
			break
		}
		if v.add(rec) {
			break
		}
	}
	if v.suspect != nil && v.problem == nil {
		v.problem = v.classify()
	}
	if v.problem == nil {
		// The log must reach the furthest witnessed head.
		last := v.report().LastSeq
		var far *Witness
		for i := range witnesses {
			if w := &witnesses[i]; w.Seq > last && (far == nil || w.Seq > far.Seq) {
				far = w
			}
		}
		if far != nil {
			v.problem = truncated(last, far)
		}
	}
	return v.report(), nil
}

// unreadable takes a record the store could not read. A suspect read
// before it is the first problem; otherwise the unreadable record is, or
// the records missing before it.
func (v *verifier) unreadable(bad *domain.AuditRecordError) {
	if v.suspect != nil {
		v.problem = v.classify()
		return
	}
	if seq, _ := v.expected(); bad.Seq > seq {
		v.problem = missing(seq, bad.Seq-1, v.havePrev, false)
		return
	}
	v.problem = &Problem{Kind: Modified, Seq: bad.Seq,
		Message: fmt.Sprintf("record %d was modified: %s", bad.Seq, bad.Reason)}
}

// verifier is Verify's state: the last two intact records, and once a record
// fails its checks, that record (the suspect) and the records after it.
type verifier struct {
	h   hash.Hash
	buf []byte

	count    int64
	prev, pp domain.AuditRecord // the last and second-to-last intact records
	havePrev bool
	havePP   bool
	suspect  *domain.AuditRecord
	ahead    []domain.AuditRecord
	problem  *Problem

	// witnessed are the hashes witnesses saw, by number; matched is the
	// newest witnessed record found as it was seen.
	witnessed map[int64][]witnessPoint
	matched   int64
}

// hashAs returns the hash rec would have if its Seq were seq.
func (v *verifier) hashAs(rec domain.AuditRecord, seq int64) string {
	rec.Seq = seq
	return hashWith(v.h, &v.buf, rec)
}

func (v *verifier) report() Report {
	r := Report{Records: v.count, Problem: v.problem}
	if v.havePrev {
		r.LastSeq, r.LastHash = v.prev.Seq, v.prev.Hash
	}
	return r
}

func (v *verifier) expected() (seq int64, prevHash string) {
	if !v.havePrev {
		return 1, ""
	}
	return v.prev.Seq + 1, v.prev.Hash
}

// add takes the next record and reports whether the walk is over.
func (v *verifier) add(rec domain.AuditRecord) bool {
	if v.suspect != nil {
		v.ahead = append(v.ahead, rec)
		s := *v.suspect
		if len(v.ahead) >= window || (v.hashAs(rec, s.Seq) == rec.Hash && v.hashAs(s, rec.Seq) == s.Hash) {
			v.problem = v.classify()
			return true
		}
		return false
	}
	seq, prevHash := v.expected()
	if rec.Seq == seq && rec.PrevHash == prevHash && v.hashAs(rec, rec.Seq) == rec.Hash {
		for _, p := range v.witnessed[rec.Seq] {
			if p.hash != rec.Hash {
				v.problem = rewritten(rec.Seq, v.matched, p.w)
				return true
			}
		}
		if len(v.witnessed[rec.Seq]) > 0 {
			v.matched = rec.Seq
		}
		v.pp, v.havePP = v.prev, v.havePrev
		v.prev, v.havePrev = rec, true
		v.count++
		return false
	}
	v.suspect = &rec
	if rec.Seq != seq {
		// A numbering problem needs no look-ahead.
		v.problem = v.classify()
		return true
	}
	return false
}

// classify names the problem with the suspect, using the records read after
// it.
func (v *verifier) classify() *Problem {
	r := *v.suspect
	seq, prevHash := v.expected()
	linked := r.PrevHash == prevHash
	if r.Seq < seq {
		return &Problem{Kind: OutOfOrder, Seq: r.Seq, Other: seq - 1,
			Message: fmt.Sprintf("record %d appears after record %d: the log is out of order or holds a duplicate", r.Seq, seq-1)}
	}
	if r.Seq > seq {
		if linked && v.hashAs(r, seq) == r.Hash {
			return &Problem{Kind: Modified, Seq: seq, Other: r.Seq,
				Message: fmt.Sprintf("record %d was modified: its sequence number was changed to %d", seq, r.Seq)}
		}
		return missing(seq, r.Seq-1, v.havePrev, false)
	}
	hashOK := v.hashAs(r, r.Seq) == r.Hash
	var next *domain.AuditRecord
	if len(v.ahead) > 0 && v.ahead[0].Seq == r.Seq+1 {
		next = &v.ahead[0]
	}
	for _, x := range v.ahead {
		if v.hashAs(x, r.Seq) == x.Hash && v.hashAs(r, x.Seq) == r.Hash {
			return &Problem{Kind: Swapped, Seq: r.Seq, Other: x.Seq,
				Message: fmt.Sprintf("records %d and %d were swapped: each holds the other's content", r.Seq, x.Seq)}
		}
	}
	if linked {
		// hashOK is false here, or the record would have been accepted.
		// An inserted record pushed the next one up by one: that one
		// still links past it and hashes as its old number.
		if v.havePrev && next != nil && next.PrevHash == prevHash && v.hashAs(*next, next.Seq-1) == next.Hash {
			return inserted(r.Seq, next.Seq, v.prev.Seq)
		}
		return modified(r.Seq)
	}
	if v.havePrev && (hashOK || v.hashAs(r, r.Seq-1) == r.Hash) {
		// The previous record was inserted: this one links past it.
		if v.havePP && r.PrevHash == v.pp.Hash {
			return inserted(v.prev.Seq, r.Seq, v.pp.Seq)
		}
		if !v.havePP && r.PrevHash == "" {
			return &Problem{Kind: Inserted, Seq: v.prev.Seq, Other: r.Seq,
				Message: fmt.Sprintf("record %d was inserted: it is not part of the chain (record %d starts the chain)", v.prev.Seq, r.Seq)}
		}
	}
	if !hashOK {
		if v.hashAs(r, r.Seq+1) == r.Hash {
			// The record hashes as its successor: one record was removed
			// and the later ones renumbered to hide the gap.
			return missing(r.Seq, r.Seq, v.havePrev, true)
		}
		if next != nil && next.PrevHash == r.Hash {
			return modified(r.Seq) // its prev_hash was edited
		}
		p := modified(r.Seq)
		if v.havePrev {
			p.Message += fmt.Sprintf(", and it does not link to record %d", v.prev.Seq)
		}
		return p
	}
	if !v.havePrev {
		return &Problem{Kind: Unlinked, Seq: r.Seq,
			Message: fmt.Sprintf("record %d does not start the chain: its prev_hash should be empty; it was changed and its hash recomputed", r.Seq)}
	}
	return &Problem{Kind: Unlinked, Seq: v.prev.Seq, Other: r.Seq,
		Message: fmt.Sprintf("records %d and %d are not linked: one of them was changed and its hash recomputed", v.prev.Seq, r.Seq)}
}

func modified(seq int64) *Problem {
	return &Problem{Kind: Modified, Seq: seq,
		Message: fmt.Sprintf("record %d was modified: its hash does not match its content", seq)}
}

func inserted(seq, linker, linked int64) *Problem {
	return &Problem{Kind: Inserted, Seq: seq, Other: linker,
		Message: fmt.Sprintf("record %d was inserted: it is not part of the chain (record %d links to record %d)", seq, linker, linked)}
}

// missing describes records first..last as removed. With havePrev false the
// log starts after them; renumbered says later records were renumbered to
// close the gap.
func missing(first, last int64, havePrev, renumbered bool) *Problem {
	which := fmt.Sprintf("record %d is missing", first)
	if last > first {
		which = fmt.Sprintf("records %d to %d are missing", first, last)
	}
	var why string
	switch {
	case !havePrev && renumbered:
		why = "the records after it were renumbered"
	case !havePrev:
		why = fmt.Sprintf("the log starts at record %d", last+1)
	case renumbered:
		why = fmt.Sprintf("records %d and %d are not linked; the records after it were renumbered", first-1, last+1)
	default:
		why = fmt.Sprintf("records %d and %d are not linked", first-1, last+1)
	}
	return &Problem{Kind: Missing, Seq: first, Other: last, Message: fmt.Sprintf("%s (%s)", which, why)}
}
