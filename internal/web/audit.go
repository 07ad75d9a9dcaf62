package web

import (
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// The audit log page is trainyard audit ls and verify, for admins and
// auditors (authz.AuditRead; the service refuses anyone else): records in
// log order, filtered as the command filters them, a page at a time with
// a cursor (the last record's number), and on demand the verification of
// the whole chain, which reads every record and so runs only when asked.
// The page changes nothing: it has no form that posts.

func (h *handler) auditRoutes(mux *http.ServeMux) {
	mux.Handle("GET /audit", h.authed(h.audit))
}

// auditLimits are the page sizes the form offers; the service takes 1 to
// 1000.
var auditLimits = []int{50, 100, 200, 500}

const defaultAuditLimit = 50

// auditFilter is the audit page's form and cursor.
type auditFilter struct {
	Actor, Action, Target string
	Since                 string // as typed: "1h", "2d", a date or an RFC 3339 time
	After                 int64  // cursor: records after this number
	Limit                 int
	Verify                bool // verify the chain too
}

// parseAuditFilter reads the form; since is resolved against now.
func parseAuditFilter(q url.Values, now time.Time) (auditFilter, service.AuditQuery, error) {
	f := auditFilter{Actor: strings.TrimSpace(q.Get("actor")), Action: strings.TrimSpace(q.Get("action")),
		Target: strings.TrimSpace(q.Get("target")), Since: strings.TrimSpace(q.Get("since")), Limit: defaultAuditLimit,
		Verify: q.Get("verify") != ""}
	var errs domain.FieldErrors
	aq := service.AuditQuery{Actor: f.Actor, Action: f.Action, Target: f.Target}
	if aq.Actor != "" && !strings.Contains(aq.Actor, ":") {
		aq.Actor = "user:" + aq.Actor // as trainyard audit ls --actor
	}
	if f.Since != "" {
		aq.Since = auditSince(f.Since, now)
		if aq.Since.IsZero() {
			errs.Add("since", "must be how long ago (30m, 1h, 2d) or a time such as 2026-03-01 or 2026-03-01T12:00:00Z, got %q", f.Since)
		}
	}
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			errs.Add("after", "must be a record number (0 or more), got %q; start again from the first page", v)
		}
		f.After = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			errs.Add("limit", "must be a whole number from 1 to 1000, got %q", v)
		}
		f.Limit = n
	}
	aq.AfterSeq, aq.Limit = f.After, f.Limit
	return f, aq, errs.Err()
}

// auditSince reads since as trainyard audit ls --since does (a duration
// back from now, or an RFC 3339 time), and a date; zero: neither.
func auditSince(v string, now time.Time) time.Time {
	if d, err := domain.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d)
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04", time.DateOnly} {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC()
		}
	}
	return time.Time{}
}

// query is f as a query string, without the cursor or verify, with since
// as given (a later page carries it resolved, so that its window does
// not move while one pages).
func (f auditFilter) query(since string) url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"actor": f.Actor, "action": f.Action, "target": f.Target, "since": since} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Limit != defaultAuditLimit {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	return q
}

// auditRow is one record, with a link to what it is about when that is a
// page here.
type auditRow struct {
	domain.AuditRecord
	TargetLink string
}

var jobTarget = regexp.MustCompile(`^job/([0-9]+)$`)

type auditData struct {
	Filter    auditFilter
	Filtered  bool
	Limits    []int
	Custom    bool      // Filter.Limit is not one of Limits
	Since     time.Time // the resolved since (zero: none)
	Rows      []auditRow
	First     string // the first page, when this is a later one
	Next      string // the next page, when more records match
	VerifyURL string
	Recent    []recentLink
	Verified  *service.AuditVerification
	// ProblemAt is a page starting at the record the problem is about.
	ProblemAt string
}

// recentLink is a shortcut to the log's latest records.
type recentLink struct{ Label, URL string }

func (h *handler) audit(w http.ResponseWriter, r *http.Request, v *viewer) {
	f, aq, err := parseAuditFilter(r.URL.Query(), time.Now())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	recs, more, err := h.svc.Audit.ListAudit(r.Context(), v.p, aq)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d := auditData{Filter: f, Filtered: f.Actor != "" || f.Action != "" || f.Target != "" || f.Since != "", Limits: auditLimits,
		Custom: !slices.Contains(auditLimits, f.Limit), Since: aq.Since, Rows: make([]auditRow, len(recs))}
	for i, rec := range recs {
		d.Rows[i] = auditRow{AuditRecord: rec}
		if m := jobTarget.FindStringSubmatch(rec.Target); m != nil {
			d.Rows[i].TargetLink = "/jobs/" + m[1]
		}
	}
	resolved := f.Since
	if !aq.Since.IsZero() {
		resolved = aq.Since.UTC().Format(time.RFC3339)
	}
	if f.After > 0 {
		d.First = "/audit?" + f.query(resolved).Encode()
	}
	if more {
		next := f.query(resolved)
		next.Set("after", strconv.FormatInt(recs[len(recs)-1].Seq, 10))
		d.Next = "/audit?" + next.Encode()
	}
	vq := f.query(f.Since)
	if f.After > 0 {
		vq.Set("after", strconv.FormatInt(f.After, 10))
	}
	vq.Set("verify", "1")
	d.VerifyURL = "/audit?" + vq.Encode()
	for _, s := range []struct{ label, since string }{{"last hour", "1h"}, {"last day", "1d"}, {"last 7 days", "7d"}} {
		q := f.query(s.since)
		d.Recent = append(d.Recent, recentLink{s.label, "/audit?" + q.Encode()})
	}
	if f.Verify {
		// Verifying reads the whole log, so it runs only when asked.
		rep, err := h.svc.Audit.VerifyAudit(r.Context(), v.p, nil)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		d.Verified = &rep
		if pr := rep.Problem; pr != nil && pr.Seq > 0 {
			d.ProblemAt = "/audit?after=" + strconv.FormatInt(pr.Seq-1, 10)
		}
	}
	h.render(w, r, http.StatusOK, "audit.html", page{Title: "Audit log", Nav: "audit", User: v, CSRF: v.csrf, Data: d})
}
