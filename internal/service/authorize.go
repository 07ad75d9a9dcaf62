package service

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// Principal is an authenticated caller (see domain.Principal).
type Principal = domain.Principal

type clientKey struct{}

// WithClient returns a context that carries the caller's network address
// (host only), recorded on audit records and used to rate-limit failed
// authentications. The API sets it for every request.
func WithClient(ctx context.Context, addr string) context.Context {
	return context.WithValue(ctx, clientKey{}, addr)
}

// ClientFrom returns the address set by WithClient, or "".
func ClientFrom(ctx context.Context) string {
	addr, _ := ctx.Value(clientKey{}).(string)
	return addr
}

// auditAppender is the core's reach into the store: a denial is recorded
// on its own, outside any change.
type auditAppender interface {
	AppendAudit(ctx context.Context, recs ...domain.AuditRecord) error
}

var _ auditAppender = store.Store(nil)

// appendAudit appends rec outside any change; a failure is logged, since the
// request is refused either way.
func (s *core) appendAudit(ctx context.Context, rec domain.AuditRecord) {
	if err := s.st.AppendAudit(context.WithoutCancel(ctx), rec); err != nil {
		s.cfg.Logger.Error("append audit record", "action", rec.Action, "target", rec.Target, "result", rec.Result, "err", err)
	}
}

// authorize checks that p may perform a on r, and records a denial in the
// audit log. It returns nil when allowed; otherwise an error matching
// domain.ErrForbidden (or domain.ErrNotFound for a resource the caller may not
// even see).
func (s *core) authorize(ctx context.Context, p Principal, a authz.Action, r authz.Resource) error {
	d := authz.Decide(p, a, r)
	if d.Allow {
		return nil
	}
	s.appendAudit(ctx, domain.AuditRecord{
		At: s.cfg.Clock.Now(), Actor: p.Actor(), Action: string(a), Target: target(r),
		Result: domain.AuditDenied, Detail: d.Reason, Client: ClientFrom(ctx),
	})
	// A job or token the caller may not even read answers exactly as a
	// missing one would.
	if r.ID != "" {
		switch {
		case r.Kind == "job" && (a == authz.JobRead || !authz.Decide(p, authz.JobRead, r).Allow):
			return domain.Errorf(domain.ErrNotFound, "job %s does not exist; list jobs with: trainyard ls", r.ID)
		case r.Kind == "token" && (a == authz.TokenRead || !authz.Decide(p, authz.TokenRead, r).Allow):
			return domain.Errorf(domain.ErrNotFound, "token %s does not exist; list yours with: trainyard token ls", r.ID)
		case r.Kind == "attempt":
			// An attempt ("42/1") of a job the caller may not read, unless
			// it is another attempt of the caller's own job token.
			job, _, _ := strings.Cut(r.ID, "/")
			own := p.IsJob() && strconv.FormatInt(p.JobID, 10) == job
			if !own && !authz.Decide(p, authz.JobRead, authz.Resource{Kind: "job", ID: job, Project: r.Project, Owner: r.Owner}).Allow {
				return domain.Errorf(domain.ErrNotFound, "job %s does not exist; list jobs with: trainyard ls", job)
			}
		}
	}
	who := "this token"
	if !p.IsJob() {
		who = "user " + p.Subject
	}
	return domain.Errorf(domain.ErrForbidden, "permission denied: %s may not %s %s; %s", who, a, target(r), d.Reason)
}

// target names r in audit records and messages: "job/42",
// "quota/vision/standard", or "jobs" for a listing.
func target(r authz.Resource) string {
	switch {
	case r.ID != "":
		return r.Kind + "/" + r.ID
	case r.Project != "":
		return "project/" + r.Project + "/" + r.Kind + "s"
	case r.Kind != "":
		return r.Kind + "s"
	}
	return "server"
}

// jobResource is the authorization view of a job.
func jobResource(j domain.Job) authz.Resource {
	return authz.Resource{Kind: "job", ID: strconv.FormatInt(j.ID, 10), Project: j.Project, Owner: j.Submitter}
}

// audited returns the audit record of p's successful action, for the
// mutating store call that makes the change to append in the same
// transaction. before and after are summarised as compact JSON; nil means
// none.
func (s *core) audited(ctx context.Context, p Principal, a authz.Action, target string, before, after any) domain.AuditRecord {
	return s.auditedAs(ctx, p.Actor(), a, target, before, after)
}

// auditedAs is audited for an actor that is not a caller ("system:control").
func (s *core) auditedAs(ctx context.Context, actor string, a authz.Action, target string, before, after any) domain.AuditRecord {
	return domain.AuditRecord{
		At: s.cfg.Clock.Now(), Actor: actor, Action: string(a), Target: target,
		Before: summary(before), After: summary(after), Result: domain.AuditOK, Client: ClientFrom(ctx),
	}
}

// summary renders v as compact JSON ("" for nil).
func summary(v any) string {
	if v == nil {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return `{"error":` + strconv.Quote(err.Error()) + `}`
	}
	return string(b)
}
