package postgres

import (
	"errors"

	"github.com/jackc/pgx/v5"

	"trainyard/internal/domain"
	"trainyard/internal/store/column"
	"trainyard/internal/store/sqlstore"
)

// The audit log lives in table audit (migration 0004). Records are appended
// only by the writer, inside the transaction of the change they describe,
// after the transaction took the audit lock (auditLockSQL) and read the
// chain's head: transactions that append are serialized across replicas, so
// Seq has no gaps and a change that rolls back leaves no record. Reads are
// shared (sqlstore.Shared.ListAudit).

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
	// locked reports that this transaction holds the audit lock; head is
	// then the newest record as this transaction sees it.
	locked bool
	head   auditHead
}

// auditHead is the newest audit record as the running transaction sees it.
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
	if r.fenced {
		if err := w.checkFence(r.fence); err != nil {
			return err
		}
	}
	if err := r.fn(w); err != nil {
		return err
	}
	if len(r.audit) == 0 || w.audit.skip {
		return nil
	}
	return w.appendAudit(column.AuditForJob(r.audit, w.audit.id))
}

// appendAudit chains recs to the newest stored record and queues their
// inserts. The head it advances is restored by the batch when the request
// fails.
func (w *writer) appendAudit(recs []domain.AuditRecord) error {
	if !w.audit.locked {
		// Requests announce their records, so begin took the lock; this
		// is the fallback for one that did not.
		w.queue("append audit: take the audit lock", auditLockSQL)
		var h auditHead
		if err := w.queryRow(`SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1`).Scan(&h.seq, &h.hash); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return interpretError("append audit: read the newest record", err)
		}
		h.known = true
		w.audit.head, w.audit.locked = h, true
	}
	b := &w.bulk
	seq, head, err := sqlstore.ChainAudit(w.audit.head.seq, w.audit.head.hash, recs, func(rec domain.AuditRecord) error {
		b.auSeq, b.auAt, b.auActor = append(b.auSeq, rec.Seq), append(b.auAt, rec.At.UnixNano()), append(b.auActor, rec.Actor)
		b.auAction, b.auTarget, b.auBefore = append(b.auAction, rec.Action), append(b.auTarget, rec.Target), append(b.auBefore, rec.Before)
		b.auAfter, b.auResult, b.auDetail = append(b.auAfter, rec.After), append(b.auResult, rec.Result), append(b.auDetail, rec.Detail)
		b.auClient, b.auPrev, b.auHash = append(b.auClient, rec.Client), append(b.auPrev, rec.PrevHash), append(b.auHash, rec.Hash)
		return nil
	})
	if err != nil {
		return err
	}
	w.audit.head = auditHead{seq: seq, hash: head, known: true}
	return nil
}
