package sqlite

import (
	"database/sql"
	"errors"
	"fmt"

	"trainyard/internal/domain"
	"trainyard/internal/store/column"
	"trainyard/internal/store/sqlstore"
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
	if !w.audit.head.known {
		var h auditHead
		if err := w.queryRow(auditHeadSQL).Scan(&h.seq, &h.hash); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return interpretError("append audit: read the newest record", err)
		}
		h.known = true
		w.audit.head = h
	}
	seq, head, err := sqlstore.ChainAudit(w.audit.head.seq, w.audit.head.hash, recs, func(rec domain.AuditRecord) error {
		_, err := w.exec(insertAuditSQL, rec.Seq, rec.At.UnixNano(), rec.Actor, rec.Action, rec.Target,
			rec.Before, rec.After, rec.Result, rec.Detail, rec.Client, rec.PrevHash, rec.Hash)
		if err != nil {
			return interpretError(fmt.Sprintf("append audit record %d (%s)", rec.Seq, rec.Action), err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Only now, with every insert done: a failure above rolls the
	// request's savepoint back and must leave the cached head as it was.
	// Nothing runs after this in the request's savepoint (runRequest and
	// AppendAudit append last), so the head stays true until the batch
	// ends; commitBatch forgets it when the next transaction begins.
	w.audit.head = auditHead{seq: seq, hash: head, known: true}
	return nil
}
