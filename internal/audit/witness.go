package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"trainyard/internal/domain"
)

// The chain alone cannot show that its newest records were removed, or that
// someone able to write the database replaced records and recomputed every
// later hash: what is left is a valid, shorter or different chain. A witness
// closes that gap. It is the head of the chain (the newest record's sequence
// number and hash) as it was seen at some time, kept where whoever can write
// the database cannot: another disk, another host, an operator's archive. A
// store that no longer holds the witnessed hash at the witnessed number lost
// or replaced records, and a later witness whose head is older than an
// earlier one was itself replaced.
//
// Because each hash covers the one before it, the head alone vouches for
// every record up to it. The checkpoints (the hashes of every
// CheckpointEvery-th record, the newest MaxCheckpoints of them) narrow down
// where a rewrite starts: the newest checkpoint that still matches bounds it
// from below.

// Witness checkpoints: the hash of every CheckpointEvery-th record, the newest
// MaxCheckpoints of them.
const (
	CheckpointEvery = 1000
	MaxCheckpoints  = 64
)

// witnessFormat starts every witness file, so the format can change under a
// new tag.
const witnessFormat = "trainyard-audit-witness-v1"

// Witness is the head of the audit chain as it was seen at some time.
type Witness struct {
	// Seq and Hash are the newest record witnessed (0 and "" for an
	// empty log); At is that record's time.
	Seq  int64
	Hash string
	At   time.Time
	// WrittenAt is when the witness was last written.
	WrittenAt time.Time
	// Checkpoints are older records' hashes, oldest first.
	Checkpoints []Checkpoint
	// Name says whose witness it is in messages, e.g. "the server's
	// witness"; it is not stored. Empty reads "the witness".
	Name string
}

// Checkpoint is one witnessed record below the head.
type Checkpoint struct {
	Seq  int64  `json:"seq"`
	Hash string `json:"hash"`
}

// witnessFile is a witness's stored form (JSON).
type witnessFile struct {
	Format      string       `json:"format"`
	Seq         int64        `json:"seq"`
	Hash        string       `json:"hash"`
	At          time.Time    `json:"at,omitzero"`
	WrittenAt   time.Time    `json:"written_at,omitzero"`
	Checkpoints []Checkpoint `json:"checkpoints,omitempty"`
}

// Marshal returns the witness's stored form: indented JSON ending in a
// newline.
func (w Witness) Marshal() []byte {
	b, _ := json.MarshalIndent(witnessFile{Format: witnessFormat, Seq: w.Seq, Hash: w.Hash, At: w.At.UTC(),
		WrittenAt: w.WrittenAt.UTC(), Checkpoints: w.Checkpoints}, "", "  ")
	return append(b, '\n')
}

// ParseWitness reads a witness written by Marshal, checking that it is
// well formed: a known format, hashes of the right shape, checkpoints
// increasing and not past the head.
func ParseWitness(b []byte) (Witness, error) {
	var f witnessFile
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Witness{}, fmt.Errorf("not an audit witness: %w", err)
	}
	if f.Format != witnessFormat {
		return Witness{}, fmt.Errorf("not an audit witness: format is %q, want %q", f.Format, witnessFormat)
	}
	switch {
	case f.Seq < 0:
		return Witness{}, fmt.Errorf("audit witness: seq %d is negative", f.Seq)
	case f.Seq == 0 && (f.Hash != "" || len(f.Checkpoints) > 0):
		return Witness{}, fmt.Errorf("audit witness: seq 0 (an empty log) has a hash or checkpoints")
	case f.Seq > 0 && !validHash(f.Hash):
		return Witness{}, fmt.Errorf("audit witness: hash %q is not sha256:<64 hex digits>", clip(f.Hash))
	}
	var prev int64
	for _, c := range f.Checkpoints {
		if c.Seq <= prev || c.Seq > f.Seq {
			return Witness{}, fmt.Errorf("audit witness: checkpoint %d is out of order or past the head %d", c.Seq, f.Seq)
		}
		if !validHash(c.Hash) {
			return Witness{}, fmt.Errorf("audit witness: checkpoint %d: hash %q is not sha256:<64 hex digits>", c.Seq, clip(c.Hash))
		}
		prev = c.Seq
	}
	return Witness{Seq: f.Seq, Hash: f.Hash, At: f.At, WrittenAt: f.WrittenAt, Checkpoints: f.Checkpoints}, nil
}

func validHash(h string) bool {
	hexPart, ok := strings.CutPrefix(h, HashPrefix)
	if !ok || len(hexPart) != 64 {
		return false
	}
	_, err := hex.DecodeString(hexPart)
	return err == nil
}

// clip shortens a value quoted in a message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

func (w Witness) name() string {
	if w.Name == "" {
		return "the witness"
	}
	return w.Name
}

// written says when w was written, for messages.
func (w Witness) written() string {
	if w.WrittenAt.IsZero() {
		return ""
	}
	return " (written " + w.WrittenAt.UTC().Format(time.RFC3339) + ")"
}

// Extend moves w forward over recs, the records of the log from w's head on:
// when w.Seq > 0, recs[0] must be the witnessed head itself, unchanged; the
// records after it must continue the chain. It returns the witness moved to
// the newest record that does, and a *Problem when the log no longer holds
// the witnessed head (Truncated), holds another record at its number
// (Rewritten), or holds a record that does not continue the chain. A witness
// never moves backwards: on a problem it stays at the last good head, as
// evidence. WrittenAt is left for the caller to set.
func (w Witness) Extend(recs []domain.AuditRecord) (Witness, error) {
	if w.Seq > 0 {
		if len(recs) == 0 || recs[0].Seq != w.Seq {
			return w, &Problem{Kind: Truncated, Seq: w.Seq, Other: w.Seq,
				Message: fmt.Sprintf("the log no longer holds record %d, which %s saw as its newest%s; the newest records were removed",
					w.Seq, w.name(), w.written())}
		}
		if recs[0].Hash != w.Hash {
			return w, &Problem{Kind: Rewritten, Seq: w.Seq,
				Message: fmt.Sprintf("record %d is not the record %s saw at that number%s; the newest records were replaced",
					w.Seq, w.name(), w.written())}
		}
		recs = recs[1:]
	}
	out := w
	out.Checkpoints = append([]Checkpoint(nil), w.Checkpoints...)
	var buf []byte
	h := sha256.New()
	for _, r := range recs {
		if r.Seq != out.Seq+1 || r.PrevHash != out.Hash || hashWith(h, &buf, r) != r.Hash {
			return out, &Problem{Kind: Unlinked, Seq: out.Seq, Other: r.Seq,
				Message: fmt.Sprintf("record %d does not continue the chain after record %d; run trainyard audit verify", r.Seq, out.Seq)}
		}
		out.Seq, out.Hash, out.At = r.Seq, r.Hash, r.At
		if r.Seq%CheckpointEvery == 0 {
			out.Checkpoints = append(out.Checkpoints, Checkpoint{Seq: r.Seq, Hash: r.Hash})
			if n := len(out.Checkpoints); n > MaxCheckpoints {
				out.Checkpoints = append(out.Checkpoints[:0], out.Checkpoints[n-MaxCheckpoints:]...)
			}
		}
	}
	return out, nil
}

// CompareWitnesses reports a current witness whose head is older than an
// earlier one's (kept): someone replaced it with an older copy or reset it,
// which hides the removal of the records in between. nil when current is
// at or past kept.
func CompareWitnesses(kept, current Witness) *Problem {
	if current.Seq >= kept.Seq {
		return nil
	}
	return &Problem{Kind: WitnessReplaced, Seq: current.Seq, Other: kept.Seq,
		Message: fmt.Sprintf("%s moved backwards: it holds record %d as the newest%s, but %s already saw record %d%s; it was replaced by an older copy or reset",
			current.name(), current.Seq, current.written(), kept.name(), kept.Seq, kept.written())}
}

// witnessPoint is one witnessed hash Verify checks.
type witnessPoint struct {
	hash string
	w    *Witness
}

// witnessPoints indexes ws by witnessed sequence number.
func witnessPoints(ws []Witness) map[int64][]witnessPoint {
	if len(ws) == 0 {
		return nil
	}
	m := map[int64][]witnessPoint{}
	for i := range ws {
		w := &ws[i]
		if w.Seq > 0 {
			m[w.Seq] = append(m[w.Seq], witnessPoint{w.Hash, w})
		}
		for _, c := range w.Checkpoints {
			if c.Seq != w.Seq {
				m[c.Seq] = append(m[c.Seq], witnessPoint{c.Hash, w})
			}
		}
	}
	return m
}

// rewritten describes record seq, whose hash differs from what w saw there;
// matched is the newest witnessed record that still matches (0: none).
func rewritten(seq, matched int64, w *Witness) *Problem {
	scope := fmt.Sprintf("records 1 to %d", seq)
	if matched > 0 {
		scope = fmt.Sprintf("records %d to %d (record %d still matches)", matched+1, seq, matched)
	}
	return &Problem{Kind: Rewritten, Seq: seq, Other: matched,
		Message: fmt.Sprintf("record %d was rewritten: its hash differs from the one %s saw at that number%s; the change lies in %s",
			seq, w.name(), w.written(), scope)}
}

// truncated describes a log whose newest record is last while w saw record
// w.Seq.
func truncated(last int64, w *Witness) *Problem {
	which := fmt.Sprintf("records %d to %d are missing", last+1, w.Seq)
	if w.Seq == last+1 {
		which = fmt.Sprintf("record %d is missing", w.Seq)
	}
	var msg string
	if last == 0 {
		msg = fmt.Sprintf("%s: the log is empty, but %s saw record %d%s; every record was deleted", which, w.name(), w.Seq, w.written())
	} else {
		msg = fmt.Sprintf("%s from the end of the log: it ends at record %d, but %s saw record %d%s", which, last, w.name(), w.Seq, w.written())
	}
	return &Problem{Kind: Truncated, Seq: last + 1, Other: w.Seq, Message: msg}
}
