package api

import (
	"fmt"
	"net/http"
	"strconv"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// alertRoutes serves alerts: the list, acknowledgements and a channel test.
func (h *handler) alertRoutes(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/alerts", h.auth(h.listAlerts))
	mux.Handle("POST /api/v1/alerts/test", h.auth(h.testAlert))
	mux.Handle("POST /api/v1/alerts/{id}/ack", h.auth(h.ackAlert))
}

func alertDTO(a domain.Alert) apitypes.Alert {
	return apitypes.Alert{ID: a.ID, Key: a.Key, Rule: a.Rule, Severity: a.Severity, State: string(a.State), Summary: a.Summary,
		Resolution: a.Resolution, Job: a.JobID, JobName: a.JobName, Attempt: a.Attempt, Project: a.Project, Pool: a.Pool,
		Owner: a.Owner, FiredAt: a.FiredAt, ResolvedAt: a.ResolvedAt, AckedAt: a.AckedAt, AckedBy: a.AckedBy, AckReason: a.AckReason}
}

// ackAlert serves POST /api/v1/alerts/{id}/ack {"reason": TEXT}: the
// alert as acknowledged; 409 when it is resolved or already acknowledged.
func (h *handler) ackAlert(w http.ResponseWriter, r *http.Request, p service.Principal) {
	v := r.PathValue("id")
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id <= 0 {
		h.writeError(w, r, domain.FieldErrors{{Path: "id", Message: fmt.Sprintf("%q is not an alert id; ids are positive whole numbers", v)}})
		return
	}
	var body apitypes.AlertAck
	if r.ContentLength != 0 {
		if err := decodeBody(w, r, &body); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	a, err := h.svc.Alerts.AckAlert(r.Context(), p, id, body.Reason)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, alertDTO(a))
}

// listAlerts serves GET /api/v1/alerts?state=firing|resolved&job=ID&limit=N.
func (h *handler) listAlerts(w http.ResponseWriter, r *http.Request, p service.Principal) {
	q := r.URL.Query()
	var errs domain.FieldErrors
	o := service.AlertListOptions{State: domain.AlertState(q.Get("state"))}
	if v := q.Get("job"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			errs.Add("job", "must be a job id, got %q", v)
		}
		o.JobID = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			errs.Add("limit", "must be a whole number, got %q", v)
		}
		o.Limit = n
	}
	if err := errs.Err(); err != nil {
		h.writeError(w, r, err)
		return
	}
	as, err := h.svc.Alerts.ListAlerts(r.Context(), p, o)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := apitypes.AlertList{Alerts: make([]apitypes.Alert, len(as))}
	for i, a := range as {
		out.Alerts[i] = alertDTO(a)
	}
	writeJSON(w, http.StatusOK, out)
}

// testAlert serves POST /api/v1/alerts/test {"channel": NAME}: 204 when the
// channel accepted a test notification, 502 with its error when not.
func (h *handler) testAlert(w http.ResponseWriter, r *http.Request, p service.Principal) {
	var body apitypes.AlertTest
	if err := decodeBody(w, r, &body); err != nil {
		h.writeError(w, r, err)
		return
	}
	if err := h.svc.Alerts.TestAlertChannel(r.Context(), p, body.Channel); err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
