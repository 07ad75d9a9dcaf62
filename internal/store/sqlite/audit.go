package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"trainyard/internal/audit"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/column"
)

// The audit log lives in table audit (migration 0004). Records are appended
// only by the writer goroutine, which assigns Seq, PrevHash and Hash inside
// the transaction of the change they describe, so Seq has no gaps and a
// change that rolls back leaves no record.

const (
	auditHeadSQL   = `SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1`
	insertAuditSQL = `INSERT INTO audit (seq, at, actor, action, target, before_json, after_json, result,
		detail, client, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	auditCols = `seq, at, actor, action, target, before_json, after_json, result, detail, client, prev_hash, hash`
)

// auditState is the audit hook's state in the writer: what the running
// request tells the hook (id and skip, reset by runRequest before each
// request), and the chain's head for the running transaction.
type auditState struct {
	// id replaces the placeholder "{id}" in the Target of the records
	// attached to the request (CreateJob sets it to the new job's id).
	id int64
	// skip drops the attached records: the request changed nothing (an
	// idempotent replay, an Apply whose guards all failed), or it
	// appended its own (AppendAudit).
	skip bool
	// head is the newest record, cached for one batch transaction;
	// commitBatch clears it when a transaction begins.
	head auditHead
}

// auditHead is the newest audit record as the running transaction sees it.
// The writer caches it for the length of one batch transaction so that
// appending does not read it back for every request.
type auditHead struct {
	seq   int64
	hash  string
	known bool
}

// runRequest runs one write request inside its savepoint: the request's
// function, then the audit records the mutation was given (withAudit). An error from either
// rolls back both.
func runRequest(w *writer, r *writeReq) error {
	w.audit.id, w.audit.skip = 0, false
	if err := r.fn(w); err != nil {
		return err
	}
	if len(r.audit) == 0 || w.audit.skip {
		return nil
	}
	return w.appendAudit(column.AuditForJob(r.audit, w.audit.id))
}

// appendAudit chains recs to the newest stored record and inserts them. It
// runs in the writer goroutine, inside the caller's savepoint.
func (w *writer) appendAudit(recs []domain.AuditRecord) error {
	for _, rec := range recs {
		if err := column.CheckAudit(rec); err != nil {
			return fmt.Errorf("append audit: %w", err)
		}
	}
	if !w.audit.head.known {
		var h auditHead
		if err := w.queryRow(auditHeadSQL).Scan(&h.seq, &h.hash); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return interpretError("append audit: read the newest record", err)
		}
		h.known = true
		w.audit.head = h
	}
	seq, head := w.audit.head.seq, w.audit.head.hash
	var buf []byte
	for _, rec := range recs {
		if rec.At.IsZero() {
			rec.At = time.Now()
		}
		rec.At = normTime(rec.At)
		rec.Seq, rec.PrevHash = seq+1, head
		buf = audit.AppendCanonical(buf[:0], rec)
		sum := sha256.Sum256(buf)
		rec.Hash = "sha256:" + hex.EncodeToString(sum[:])
		if _, err := w.exec(insertAuditSQL, rec.Seq, rec.At.UnixNano(), rec.Actor, rec.Action, rec.Target,
			rec.Before, rec.After, rec.Result, rec.Detail, rec.Client, rec.PrevHash, rec.Hash); err != nil {
			return interpretError(fmt.Sprintf("append audit record %d (%s)", rec.Seq, rec.Action), err)
		}
		seq, head = rec.Seq, rec.Hash
	}
	// Only now, with every insert done: a failure above rolls the
	// request's savepoint back and must leave the cached head as it was.
	// Nothing runs after this in the request's savepoint (runRequest and
	// AppendAudit append last), so the head stays true until the batch
	// ends; commitBatch forgets it when the next transaction begins.
	w.audit.head = auditHead{seq: seq, hash: head, known: true}
	return nil
}

// AppendAudit appends recs on their own, in order, in one transaction: for
// denials and failures that change nothing else. Seq, PrevHash and Hash are
// assigned here; a zero At is the current time. An actor, an action and a
// result of ok, denied or failed are required (store.ErrInvalid otherwise,
// and nothing is written).
func (s *Store) AppendAudit(ctx context.Context, recs ...domain.AuditRecord) error {
	for _, rec := range recs {
		if err := column.CheckAudit(rec); err != nil {
			return fmt.Errorf("append audit: %w", err)
		}
	}
	if len(recs) == 0 {
		return s.checkOpen()
	}
	return s.write(ctx, func(w *writer) error {
		w.audit.skip = true // the attached records, if any, are not ours to write
		return w.appendAudit(recs)
	})
}

// ListAudit returns the records f selects in Seq order. A record whose time
// column holds something other than an integer (the store never writes one)
// ends the list: the records before it come back with a
// *domain.AuditRecordError naming it.
func (s *Store) ListAudit(ctx context.Context, f store.AuditFilter) ([]domain.AuditRecord, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if f.Limit < 0 {
		return nil, fmt.Errorf("list audit records: limit %d is negative; use 0 for no limit: %w", f.Limit, store.ErrInvalid)
	}
	query, args := listAuditQuery(f)
	st, err := s.readStmt(ctx, query)
	if err != nil {
		return nil, interpretError("list audit records", err)
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, interpretError("list audit records", err)
	}
	defer rows.Close()
	out := make([]domain.AuditRecord, 0, min(max(f.Limit, 16), 1024))
	for rows.Next() {
		var (
			r  domain.AuditRecord
			at any // an integer, unless someone stored something else
		)
		if err := rows.Scan(&r.Seq, &at, &r.Actor, &r.Action, &r.Target, &r.Before, &r.After, &r.Result,
			&r.Detail, &r.Client, &r.PrevHash, &r.Hash); err != nil {
			return nil, interpretError("list audit records", err)
		}
		ns, ok := at.(int64)
		if !ok {
			return out, &domain.AuditRecordError{Seq: r.Seq, Reason: fmt.Sprintf("its time (at) is %s, not Unix nanoseconds", describeValue(at))}
		}
		r.At = time.Unix(0, ns).UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("list audit records", err)
	}
	return out, nil
}

// listAuditQuery builds the SQL for f. The text depends only on which fields
// are set, so prepared statements are reused.
func listAuditQuery(f store.AuditFilter) (string, []any) {
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
		// A prefix as a range, so the index serves it: "job/" ≤ t < "job0".
		conds = append(conds, "target >= ? AND target < ?")
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
	q := "SELECT " + auditCols + " FROM audit"
	if len(conds) > 0 {
		q += " WHERE " + strings.Join(conds, " AND ")
	}
	q += " ORDER BY seq"
	if f.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, f.Limit)
	}
	return q, args
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
