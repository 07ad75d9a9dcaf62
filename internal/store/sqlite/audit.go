package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
	"trainyard/internal/audit"

	"trainyard/internal/domain"
	"trainyard/internal/store/column"
)

// The audit log lives in table audit (migration 0004). Records are appended
// only by the writer goroutine, which assigns Seq, PrevHash and Hash inside
// the transaction of the change they describe, so Seq has no gaps and a
// change that rolls back leaves no record. Reads are shared
// (sqlstore.Shared.ListAudit).

const (
	auditHeadSQL   = `SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1`
	auditCols      = `seq, at, actor, action, target, before_json, after_json, result, detail, client, prev_hash, hash`
	insertAuditSQL = `INSERT INTO audit (` + auditCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
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
