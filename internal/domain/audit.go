package domain

import (
	"fmt"
	"time"
)

// AuditRecord is one entry of the tamper-evident audit log: who did what to
// what, with what result. Records are chained: Hash covers the record's
// fields and PrevHash, so any edit, deletion, insertion or reordering breaks
// the chain (see package audit).
type AuditRecord struct {
	Seq      int64     // position in the log, from 1, assigned by the store
	At       time.Time // when it happened
	Actor    string    // "user:alice", "system:scheduler", "token:12"…
	Action   string    // an authz action, e.g. "quota.write", or "auth.login"
	Target   string    // e.g. "job/42", "quota/vision/standard"
	Before   string    // compact JSON summary of the state before ("" when none)
	After    string    // compact JSON summary after ("" when none)
	Result   string    // "ok", "denied" or "failed"
	Detail   string    // why, for denials and failures
	Client   string    // client address
	PrevHash string    // Hash of record Seq-1 ("" for the first)
	Hash     string    // "sha256:<hex>" over the fields above
}

// Audit results.
const (
	AuditOK     = "ok"
	AuditDenied = "denied"
	AuditFailed = "failed"
)

// AuditRecordError says a stored audit record cannot be read back as a
// record: a column holds a value the store never writes, so the record was
// changed outside Trainyard. ListAudit returns it, with the records before
// it, so that verification names the record instead of failing.
type AuditRecordError struct {
	Seq    int64  // the record
	Reason string // what is wrong, e.g. `its time (at) is "soon", not Unix nanoseconds`
}

func (e *AuditRecordError) Error() string {
	return fmt.Sprintf("audit record %d cannot be read: %s", e.Seq, e.Reason)
}
