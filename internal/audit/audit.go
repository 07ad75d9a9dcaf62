// Package audit makes the audit log tamper-evident: it defines the canonical
// encoding of a record, the SHA-256 hash chain that links each record to the
// one before it, and Verify, which walks a log and names the first record that
// was modified, deleted, inserted or moved.
//
// The chain: record n carries PrevHash = Hash of record n-1 ("" for record 1)
// and Hash = "sha256:" + hex(SHA-256(Canonical(record n))). Canonical covers
// every field but Hash, PrevHash included, so changing any field of any
// record, or removing, adding or reordering records, breaks the chain at that
// point. The chain is not keyed: someone able to rewrite the database and
// recompute every later hash goes unnoticed, and removing the newest records
// leaves a shorter valid chain. A Witness, the head (last Seq and Hash) kept
// somewhere else, detects both (witness.go).
//
// The package is pure: no I/O, no clock. Stores use it (or an exact copy of
// Canonical) to fill Seq, PrevHash and Hash as they append.
package audit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"hash"

	"trainyard/internal/domain"
)

// canonicalTag starts every canonical encoding, so the format can change
// under a new tag without ambiguity.
const canonicalTag = "trainyard-audit-v1\x00"

// HashPrefix starts every record hash.
const HashPrefix = "sha256:"

// AppendCanonical appends the canonical encoding of rec to dst and returns
// the extended slice. The encoding is, in order: the tag
// "trainyard-audit-v1\x00"; Seq as a big-endian int64; At as big-endian int64
// Unix nanoseconds (UTC, so the time zone does not matter); then Actor,
// Action, Target, Before, After, Result, Detail, Client and PrevHash, each as
// a big-endian uint32 byte length followed by its bytes. Hash is not part of
// it.
func AppendCanonical(dst []byte, rec domain.AuditRecord) []byte {
	dst = append(dst, canonicalTag...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(rec.Seq))
	dst = binary.BigEndian.AppendUint64(dst, uint64(rec.At.UnixNano()))
	for _, s := range [...]string{rec.Actor, rec.Action, rec.Target, rec.Before, rec.After,
		rec.Result, rec.Detail, rec.Client, rec.PrevHash} {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(s)))
		dst = append(dst, s...)
	}
	return dst
}

// Hash returns "sha256:<hex>" of the canonical encoding of rec (its Hash
// field is ignored).
func Hash(rec domain.AuditRecord) string {
	var buf []byte
	return hashWith(sha256.New(), &buf, rec)
}

// hashWith hashes rec with h, reusing *buf for the encoding.
func hashWith(h hash.Hash, buf *[]byte, rec domain.AuditRecord) string {
	*buf = AppendCanonical((*buf)[:0], rec)
	h.Reset()
	h.Write(*buf)
	var sum [sha256.Size]byte
	return HashPrefix + hex.EncodeToString(h.Sum(sum[:0]))
}

// Chain links recs to a log whose newest record has sequence number headSeq
// and hash headHash (0 and "" for an empty log): it returns copies with Seq,
// PrevHash and Hash filled in, ready to append in order. At is converted to
// UTC so the record reads back as it was hashed.
func Chain(headSeq int64, headHash string, recs []domain.AuditRecord) []domain.AuditRecord {
	out := make([]domain.AuditRecord, len(recs))
	h := sha256.New()
	var buf []byte
	for i, r := range recs {
		r.Seq = headSeq + 1
		r.At = r.At.UTC()
		r.PrevHash = headHash
		r.Hash = hashWith(h, &buf, r)
		out[i] = r
		headSeq, headHash = r.Seq, r.Hash
	}
	return out
}

// JSON returns the compact JSON encoding of v for a record's Before or After
// field, or "" when v is nil. Callers pass small summaries built for the
// purpose, never whole objects that may hold secret values. A value that
// cannot be encoded yields an object naming the error, so building a record
// never fails.
func JSON(v any) string {
	if v == nil {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"encoding_error": err.Error()})
	}
	return string(b)
}
