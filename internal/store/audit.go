package store

import (
	"context"
	"iter"
	"time"

	"trainyard/internal/domain"
)

// AuditIDPlaceholder in the Target of the record given to CreateJob is
// replaced by the new job's id ("job/{id}" becomes "job/42"), which is only
// known inside the transaction.
const AuditIDPlaceholder = "{id}"

// AuditFilter selects audit records; zero fields match everything.
type AuditFilter struct {
	Actor    string
	Action   string
	Target   string // exact, or a prefix ending in "/" (e.g. "job/")
	Since    time.Time
	AfterSeq int64 // only records with Seq > AfterSeq
	Limit    int   // 0: no limit
}

// Audits stores the audit log. It is append-only through this interface.
type Audits interface {
	// AppendAudit appends records on their own (denials, failed logins).
	AppendAudit(ctx context.Context, recs ...domain.AuditRecord) error
	// ListAudit returns records in Seq order. A stored record that cannot
	// be read back (changed outside Trainyard) ends the list: the records
	// before it are returned with a *domain.AuditRecordError naming it.
	ListAudit(ctx context.Context, f AuditFilter) ([]domain.AuditRecord, error)
}

// AuditRecords streams the log of a after afterSeq in Seq order, reading
// page records at a time, so memory does not grow with the log. A record
// that cannot be read ends the stream after the records before it, with its
// *domain.AuditRecordError; so does any other error.
func AuditRecords(ctx context.Context, a Audits, afterSeq int64, page int) iter.Seq2[domain.AuditRecord, error] {
	return func(yield func(domain.AuditRecord, error) bool) {
		for {
			recs, err := a.ListAudit(ctx, AuditFilter{AfterSeq: afterSeq, Limit: page})
			for _, r := range recs {
				if !yield(r, nil) {
					return
				}
			}
			if err != nil {
				yield(domain.AuditRecord{}, err)
				return
			}
			if len(recs) < page {
				return
			}
			afterSeq = recs[len(recs)-1].Seq
		}
	}
}
