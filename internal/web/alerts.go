package web

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// The alerts page is trainyard alerts ls and ack: recent alerts, newest
// first, as the service lists them for the signed-in user (every alert
// for admins, auditors and resource admins; for others those about jobs
// they may read), and an Acknowledge form on each firing alert the user
// may acknowledge.

func (h *handler) alertRoutes(mux *http.ServeMux) {
	mux.Handle("GET /alerts", h.authed(h.alerts))
	mux.Handle("POST /alerts/{id}/ack", h.action(h.ackAlert))
}

// alertLimits are the list lengths the form offers; the service takes 1
// to 1000.
var alertLimits = []int{50, 100, 500, 1000}

const defaultAlertLimit = 100

// alertFilter is the alerts page's form.
type alertFilter struct {
	State string // "", "firing", "resolved"
	Job   int64  // 0: any
	Limit int
}

func parseAlertFilter(q url.Values) (alertFilter, error) {
	f := alertFilter{State: q.Get("state"), Limit: defaultAlertLimit}
	var errs domain.FieldErrors
	if v := strings.TrimSpace(q.Get("job")); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			errs.Add("job", "must be a job id, got %q", v)
		}
		f.Job = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			errs.Add("limit", "must be a whole number from 1 to 1000, got %q", v)
		}
		f.Limit = n
	}
	return f, errs.Err()
}

// query is f as a query string.
func (f alertFilter) query() url.Values {
	q := url.Values{}
	if f.State != "" {
		q.Set("state", f.State)
	}
	if f.Job > 0 {
		q.Set("job", strconv.FormatInt(f.Job, 10))
	}
	if f.Limit != defaultAlertLimit {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	return q
}

// alertRow is one alert, and whether the viewer may acknowledge it.
type alertRow struct {
	domain.Alert
	CanAck bool
}

// Acked reports whether someone acknowledged the alert.
func (a alertRow) Acked() bool { return !a.AckedAt.IsZero() }

type alertsData struct {
	Filter   alertFilter
	Filtered bool
	Limits   []int
	Rows     []alertRow
	Full     bool   // the list holds Limit alerts: older ones may be left out
	More     string // the same list, longer ("" when at the most)
	Back     string // this page, for the forms to come back to
	Firing   int    // firing and not acknowledged, in the list
	CSRF     string
}

func (h *handler) alerts(w http.ResponseWriter, r *http.Request, v *viewer) {
	f, err := parseAlertFilter(r.URL.Query())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	as, err := h.svc.Alerts.ListAlerts(r.Context(), v.p, service.AlertListOptions{State: domain.AlertState(f.State), JobID: f.Job, Limit: f.Limit})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	q := f.query()
	d := alertsData{Filter: f, Filtered: f.State != "" || f.Job > 0, Limits: alertLimits, Rows: make([]alertRow, len(as)),
		Full: len(as) >= f.Limit, Back: "/alerts", CSRF: v.csrf}
	if len(q) > 0 {
		d.Back += "?" + q.Encode()
	}
	for i, a := range as {
		d.Rows[i] = alertRow{Alert: a, CanAck: v.canAck(a)}
		if a.State == domain.AlertFiring && a.AckedAt.IsZero() {
			d.Firing++
		}
	}
	if d.Full && f.Limit < 1000 {
		more := f
		for _, n := range alertLimits {
			if n > f.Limit {
				more.Limit = n
				break
			}
		}
		d.More = "/alerts?" + more.query().Encode()
	}
	p := page{Title: "Alerts", Nav: "alerts", User: v, CSRF: v.csrf, Data: d}
	if id, err := strconv.ParseInt(r.URL.Query().Get("acked"), 10, 64); err == nil && id > 0 {
		p.Flash = fmt.Sprintf("Alert %d acknowledged: it is not notified again (its resolution still is).", id)
	}
	h.render(w, r, http.StatusOK, "alerts.html", p)
}

// canAck reports whether the viewer may acknowledge a: a firing alert
// nobody acknowledged, by the rule AlertService.AckAlert applies: whoever
// may cancel its job, and for an alert about no job (a budget's) whoever
// may test alert channels (admins).
func (v *viewer) canAck(a domain.Alert) bool {
	if a.State != domain.AlertFiring || !a.AckedAt.IsZero() {
		return false
	}
	if a.JobID != 0 {
		return v.Can(authz.JobCancel, authz.Resource{Kind: "job", ID: strconv.FormatInt(a.JobID, 10), Project: a.Project, Owner: a.Owner})
	}
	return v.Can(authz.AlertTest, authz.Resource{Kind: "alert", ID: strconv.FormatInt(a.ID, 10)})
}

// ackAlert acknowledges an alert with the form's reason, and goes back
// to the list the form was on.
func (h *handler) ackAlert(w http.ResponseWriter, r *http.Request, v *viewer) {
	s := r.PathValue("id")
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		h.fail(w, r, domain.Errorf(domain.ErrNotFound, "there is no alert %q: alert ids are whole numbers; see the alert list", s))
		return
	}
	a, err := h.svc.Alerts.AckAlert(r.Context(), v.p, id, r.PostFormValue("reason"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	back := r.PostFormValue("back")
	if back != "/alerts" && !strings.HasPrefix(back, "/alerts?") {
		back = "/alerts"
	}
	u, err := url.Parse(back)
	if err != nil {
		u = &url.URL{Path: "/alerts"}
	}
	q := u.Query()
	q.Set("acked", strconv.FormatInt(a.ID, 10))
	u.RawQuery = q.Encode()
	http.Redirect(w, r, u.String(), http.StatusSeeOther)
}
