package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
)

// maxGrant bounds how long a compute request may ask for.
const maxGrant = 366 * 24 * time.Hour

// RequestQuota files a compute request (R37): more of a pool for a project,
// until a date, with a reason. It waits for a resource admin (or an admin)
// other than the requester.
func (s *PoolService) RequestQuota(ctx context.Context, p Principal, r domain.QuotaRequest) (domain.QuotaRequest, error) {
	now := s.cfg.Clock.Now()
	var errs domain.FieldErrors
	checkName(&errs, "project", r.Project)
	checkName(&errs, "pool", r.Pool)
	checkLimits(&errs, "", r.Extra)
	if r.Extra.GPUs <= 0 && r.Extra.CPUs <= 0 && r.Extra.Memory <= 0 && r.Extra.Jobs <= 0 {
		errs.Add("gpus", "ask for something: set at least one of gpus, cpus, memory or jobs above 0")
	}
	switch {
	case r.Until.IsZero():
		errs.Add("until", "is required: the date the extra capacity is no longer needed")
	case !r.Until.After(now):
		errs.Add("until", "%s is in the past; give a future date", r.Until.UTC().Format(time.RFC3339))
	case r.Until.Sub(now) > maxGrant:
		errs.Add("until", "is more than a year away; ask for at most a year and renew if needed")
	}
	if len(r.Reason) < 3 {
		errs.Add("reason", "is required: say what the capacity is for, so the approver can decide")
	} else if msg := domain.TextProblem(r.Reason, false); msg != "" {
		errs.Add("reason", "%s", msg)
	}
	if err := errs.Err(); err != nil {
		return domain.QuotaRequest{}, err
	}
	if err := s.authorize(ctx, p, authz.QuotaRequest, authz.Resource{Kind: "request", Project: r.Project}); err != nil {
		return domain.QuotaRequest{}, err
	}
	r.ID, r.State, r.Requester, r.CreatedAt = 0, domain.RequestPending, p.Subject, now
	r.Decider, r.DecidedAt, r.Note = "", time.Time{}, ""
	rec := domain.AuditRecord{At: now, Actor: p.Actor(), Action: string(authz.QuotaRequest),
		Target: fmt.Sprintf("quota/%s/%s", r.Project, r.Pool), After: requestSummary(r), Result: domain.AuditOK}
	out, err := s.st.CreateRequest(ctx, r, rec)
	if err != nil {
		return domain.QuotaRequest{}, poolErr(r.Pool, err)
	}
	return out, nil
}

// DecideRequest approves or denies a pending compute request. An approved
// request raises the project's quota in the pool at once, until its date.
// Resource admins decide, but nobody their own request unless they are a
// global admin (authz.QuotaApprove); a refusal is audited.
func (s *PoolService) DecideRequest(ctx context.Context, p Principal, id int64, approve bool, note string) (domain.QuotaRequest, error) {
	r, err := s.st.GetRequest(ctx, id)
	if errors.Is(err, domain.ErrNotFound) {
		return domain.QuotaRequest{}, domain.Errorf(domain.ErrNotFound, "compute request %d does not exist; list them with: trainyard quota requests", id)
	}
	if err != nil {
		return domain.QuotaRequest{}, err
	}
	if err := s.authorize(ctx, p, authz.QuotaApprove, authz.Resource{Kind: "request", ID: fmt.Sprint(id), Project: r.Project, Owner: r.Requester}); err != nil {
		return domain.QuotaRequest{}, err
	}
	to, action := domain.RequestDenied, "denied"
	if approve {
		to, action = domain.RequestApproved, "approved"
	}
	if !approve && len(note) < 3 {
		return domain.QuotaRequest{}, domain.FieldErrors{{Path: "note", Message: "is required when denying: tell the requester why"}}
	}
	if msg := domain.TextProblem(note, false); msg != "" {
		return domain.QuotaRequest{}, domain.FieldErrors{{Path: "note", Message: msg}}
	}
	now := s.cfg.Clock.Now()
	if approve && !now.Before(r.Until) {
		return domain.QuotaRequest{}, domain.Errorf(domain.ErrConflict, "compute request %d asked for capacity until %s, which has passed; deny it, and ask for a new request", id, r.Until.UTC().Format(time.RFC3339))
	}
	after := r
	after.State, after.Decider, after.DecidedAt, after.Note = to, p.Subject, now, note
	rec := domain.AuditRecord{At: now, Actor: p.Actor(), Action: string(authz.QuotaApprove),
		Target: fmt.Sprintf("request/%d", id), Before: requestSummary(r), After: requestSummary(after), Result: domain.AuditOK,
		Detail: action}
	out, err := s.st.DecideRequest(ctx, id, to, p.Subject, now, note, rec)
	if errors.Is(err, domain.ErrConflict) {
		cur, _ := s.st.GetRequest(ctx, id)
		return domain.QuotaRequest{}, domain.Errorf(domain.ErrConflict, "compute request %d was already %s by %s", id, cur.State, cur.Decider)
	}
	if err != nil {
		return domain.QuotaRequest{}, err
	}
	if approve {
		s.schedulingChanged()
	}
	return out, nil
}

// ListRequests returns compute requests newest first.
func (s *PoolService) ListRequests(ctx context.Context, p Principal, project, pool string) ([]domain.QuotaRequest, error) {
	if err := s.authorize(ctx, p, authz.QuotaRead, authz.Resource{Kind: "request", Project: project}); err != nil {
		return nil, err
	}
	return s.st.ListRequests(ctx, project, pool)
}

// requestSummary is the audit summary of a request (no free text beyond the
// reason, which the requester chose to share).
func requestSummary(r domain.QuotaRequest) string {
	b, _ := json.Marshal(map[string]any{"project": r.Project, "pool": r.Pool, "gpus": r.Extra.GPUs, "cpus": r.Extra.CPUs,
		"memory": r.Extra.Memory.String(), "jobs": r.Extra.Jobs, "until": r.Until.UTC().Format(time.RFC3339),
		"state": r.State, "decider": r.Decider})
	return string(b)
}
