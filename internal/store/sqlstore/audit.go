package sqlstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"trainyard/internal/audit"
	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/column"
)

// The audit log lives in table audit. Appending, which chains each record to
// the newest one inside the writer's transaction, is the backends' (SQLite
// inserts each record, PostgreSQL bulk-inserts them under a lock), over
// the one chaining rule, ChainAudit; reading it is shared.

// AppendAudit appends recs on their own, in order, in one transaction: for
// denials and failures that change nothing else. Seq, PrevHash and Hash are
// assigned here; a zero At is the current time. An actor, an action and a
// result of ok, denied or failed are required (store.ErrInvalid otherwise,
// and nothing is written).
func (s Shared) AppendAudit(ctx context.Context, recs ...domain.AuditRecord) error {
	for _, rec := range recs {
		if err := column.CheckAudit(rec); err != nil {
			return fmt.Errorf("append audit: %w", err)
		}
	}
	if len(recs) == 0 {
		_, err := s.b.Reader()
		return err
	}
	return s.b.WriteAuditing(ctx, func(x Exec) error { return x.AppendAudit(recs) })
}

// ChainAudit chains recs after the record (seq, hash), the newest stored:
// each gets the next Seq, the previous record's hash as PrevHash, and the
// hash of its canonical form; a zero At becomes the current time. It checks
// every record first (nothing is inserted if one is malformed), then passes
// each to insert in order, and returns the new head.
func ChainAudit(seq int64, hash string, recs []domain.AuditRecord, insert func(domain.AuditRecord) error) (int64, string, error) {
	for _, rec := range recs {
		if err := column.CheckAudit(rec); err != nil {
			return seq, hash, fmt.Errorf("append audit: %w", err)
		}
	}
	var buf []byte
	for _, rec := range recs {
		if rec.At.IsZero() {
			rec.At = time.Now()
		}
		rec.At = NormTime(rec.At)
		rec.Seq, rec.PrevHash = seq+1, hash
		buf = audit.AppendCanonical(buf[:0], rec)
		sum := sha256.Sum256(buf)
		rec.Hash = "sha256:" + hex.EncodeToString(sum[:])
		if err := insert(rec); err != nil {
			return seq, hash, err
		}
		seq, hash = rec.Seq, rec.Hash
	}
	return seq, hash, nil
}

const auditColumns = `seq, at, actor, action, target, before_json, after_json, result, detail, client, prev_hash, hash`

// ListAudit returns the records f selects in Seq order. On SQLite, a record
// whose time column holds something other than an integer (the store never
// writes one) ends the list: the records before it come back with a
// *domain.AuditRecordError naming it. PostgreSQL's column is BIGINT NOT
// NULL, so it scans the time as an integer and pays nothing for the check.
func (s Shared) ListAudit(ctx context.Context, f store.AuditFilter) ([]domain.AuditRecord, error) {
	r, err := s.b.Reader()
	if err != nil {
		return nil, err
	}
	if f.Limit < 0 {
		return nil, fmt.Errorf("list audit records: limit %d is negative; use 0 for no limit: %w", f.Limit, store.ErrInvalid)
	}
	q, args := listAuditQuery(f)
	out := make([]domain.AuditRecord, 0, min(max(f.Limit, 16), 1024))
	// One set of destinations serves every row: Scan sets each field.
	var (
		rec domain.AuditRecord
		ns  int64
		at  any // on SQLite an integer, unless someone stored something else
		bad error
	)
	dst := []any{&rec.Seq, &ns, &rec.Actor, &rec.Action, &rec.Target, &rec.Before, &rec.After, &rec.Result,
		&rec.Detail, &rec.Client, &rec.PrevHash, &rec.Hash}
	if s.e == SQLite {
		dst[1] = &at
	}
	if err := r.Query(ctx, func(row Row) error {
		if err := row.Scan(dst...); err != nil {
			return err
		}
		if s.e == SQLite {
			n, ok := at.(int64)
			if !ok {
				bad = &domain.AuditRecordError{Seq: rec.Seq, Reason: fmt.Sprintf("its time (at) is %s, not Unix nanoseconds", describeValue(at))}
				return bad
			}
			ns = n
		}
		rec.At = time.Unix(0, ns).UTC()
		out = append(out, rec)
		return nil
	}, q, args...); err != nil {
		if bad != nil {
			return out, bad
		}
		return nil, s.err("list audit records", err)
	}
	return out, nil
}

// listAuditQuery builds the statement for f. Its text depends only on which
// fields are set, so prepared statements are reused.
func listAuditQuery(f store.AuditFilter) (Query, []any) {
	var (
		conds []string
		args  []any
	)
	if f.Actor != "" {
		conds = append(conds, "actor = ?")
		args = append(args, f.Actor)
	}
	if f.Action != "" {
		conds = append(conds, "action = ?")
		args = append(args, f.Action)
	}
	switch {
	case f.Target == "":
	case strings.HasSuffix(f.Target, "/"):
		// A prefix as a range, so the index serves it: "job/" ≤ t < "job0"
		// (comparing bytes, as the range assumes).
		conds = append(conds, "target{C} >= ? AND target{C} < ?")
		args = append(args, f.Target, f.Target[:len(f.Target)-1]+"0")
	default:
		conds = append(conds, "target = ?")
		args = append(args, f.Target)
	}
	if !f.Since.IsZero() {
		conds = append(conds, "at >= ?")
		args = append(args, f.Since.UnixNano())
	}
	if f.AfterSeq > 0 {
		conds = append(conds, "seq > ?")
		args = append(args, f.AfterSeq)
	}
	q := "SELECT " + auditColumns + " FROM audit"
	if len(conds) > 0 {
		q += " WHERE " + strings.Join(conds, " AND ")
	}
	q += " ORDER BY seq"
	if f.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, f.Limit)
	}
	return Q(q), args
}

// describeValue quotes a column value that is not what the store writes, for
// a message: at most 40 bytes of it.
func describeValue(v any) string {
	switch v := v.(type) {
	case nil:
		return "NULL"
	case []byte:
		return describeValue(string(v))
	case string:
		if len(v) > 40 {
			return fmt.Sprintf("%q…", v[:40])
		}
		return fmt.Sprintf("%q", v)
	default:
		return fmt.Sprintf("%v", v)
	}
}
