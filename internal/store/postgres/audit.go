package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"trainyard/internal/audit"
	"trainyard/internal/domain"
	"trainyard/internal/store/column"
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
	for _, rec := range recs {
		if err := column.CheckAudit(rec); err != nil {
			return fmt.Errorf("append audit: %w", err)
		}
	}
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
		b := &w.bulk
		b.auSeq, b.auAt, b.auActor = append(b.auSeq, rec.Seq), append(b.auAt, rec.At.UnixNano()), append(b.auActor, rec.Actor)
		b.auAction, b.auTarget, b.auBefore = append(b.auAction, rec.Action), append(b.auTarget, rec.Target), append(b.auBefore, rec.Before)
		b.auAfter, b.auResult, b.auDetail = append(b.auAfter, rec.After), append(b.auResult, rec.Result), append(b.auDetail, rec.Detail)
		b.auClient, b.auPrev, b.auHash = append(b.auClient, rec.Client), append(b.auPrev, rec.PrevHash), append(b.auHash, rec.Hash)
		seq, head = rec.Seq, rec.Hash
	}
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
	}, appendsAudit)
}
