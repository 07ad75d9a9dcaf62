package service

import (
	"context"
	"fmt"
	"time"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// AuditService reads, exports and verifies the audit log and keeps its
// witness.
type AuditService struct {
	*core
	st AuditStore
	// witness is the audit witness this server writes (auditwitness.go).
	witness witnessKeeper
}

// AuditStore is what reading, exporting and verifying the audit log
// needs: store.AuditRecords takes a store.Audits, so AppendAudit is part
// of it, though these use cases only read.
type AuditStore interface {
	AppendAudit(ctx context.Context, recs ...domain.AuditRecord) error
	ListAudit(ctx context.Context, f store.AuditFilter) ([]domain.AuditRecord, error)
}

var _ AuditStore = store.Store(nil)

// Audit log use cases. Records are written by the mutations themselves (see
// audited and appendAudit in authorize.go); these read, verify and export
// them, for admins and auditors (authz.AuditRead).

// auditPage is how many records verification and export read at a time, so
// neither holds the whole log in memory.
const auditPage = 1000

// maxAuditLimit bounds one page of ListAudit.
const maxAuditLimit = 1000

// AuditQuery selects audit records; zero fields match everything.
type AuditQuery struct {
	Actor  string // exact, e.g. "user:alice"
	Action string // exact, e.g. "quota.write"
	Target string // exact, or a prefix ending in "/" such as "job/"
	Since  time.Time
	// AfterSeq is a cursor: only records with a larger Seq.
	AfterSeq int64
	// Limit is the page size, 1 to 1000; 0 means 100.
	Limit int
}

func (q AuditQuery) filter() store.AuditFilter {
	return store.AuditFilter{Actor: q.Actor, Action: q.Action, Target: q.Target, Since: q.Since,
		AfterSeq: q.AfterSeq, Limit: q.Limit}
}

// ListAudit returns one page of audit records in log order, and whether
// more match (continue with AfterSeq set to the last Seq returned).
func (s *AuditService) ListAudit(ctx context.Context, p Principal, q AuditQuery) (recs []domain.AuditRecord, more bool, err error) {
	var errs domain.FieldErrors
	if q.Limit < 0 || q.Limit > maxAuditLimit {
		errs.Add("limit", "must be between 1 and %d (got %d)", maxAuditLimit, q.Limit)
	}
	if q.AfterSeq < 0 {
		errs.Add("after", "must be a record number, 0 or more (got %d)", q.AfterSeq)
	}
	if err := errs.Err(); err != nil {
		return nil, false, err
	}
	if err := s.authorize(ctx, p, authz.AuditRead, authz.Resource{Kind: "audit"}); err != nil {
		return nil, false, err
	}
	if q.Limit == 0 {
		q.Limit = 100
	}
	f := q.filter()
	f.Limit = q.Limit + 1
	recs, err = s.st.ListAudit(ctx, f)
	if err != nil {
		return nil, false, fmt.Errorf("list audit records: %w", err)
	}
	if len(recs) > q.Limit {
		return recs[:q.Limit], true, nil
	}
	return recs, false, nil
}

// ExportAudit calls emit with every record after afterSeq (0: all), in log
// order, reading the log a page at a time. It stops at the first error from
// emit or the store.
func (s *AuditService) ExportAudit(ctx context.Context, p Principal, afterSeq int64, emit func(domain.AuditRecord) error) error {
	if afterSeq < 0 {
		return domain.FieldErrors{{Path: "after", Message: fmt.Sprintf("must be a record number, 0 or more (got %d)", afterSeq)}}
	}
	if err := s.authorize(ctx, p, authz.AuditRead, authz.Resource{Kind: "audit"}); err != nil {
		return err
	}
	for rec, err := range store.AuditRecords(ctx, s.st, afterSeq, auditPage) {
		if err != nil {
			return fmt.Errorf("export the audit log: %w", err)
		}
		if err := emit(rec); err != nil {
			return err
		}
	}
	return nil
}
