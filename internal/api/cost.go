package api

import (
	"net/http"
	"strings"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// costRoutes serves spend reports.
func (h *handler) costRoutes(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/cost", h.auth(h.costReport))
}

// costReport serves GET /api/v1/cost?project=&since=30d&by=project.
func (h *handler) costReport(w http.ResponseWriter, r *http.Request, p service.Principal) {
	q := r.URL.Query()
	cq := service.CostQuery{Project: q.Get("project"), By: q.Get("by")}
	var errs domain.FieldErrors
	cq.Since, cq.Window = sinceParam(&errs, q.Get("since"))
	if cq.By != "" && !validBy(cq.By) {
		errs.Add("by", "cannot group by %q; choose one of %s", cq.By, strings.Join(service.CostGroupings(), ", "))
	}
	if err := errs.Err(); err != nil {
		h.writeError(w, r, err)
		return
	}
	rep, err := h.svc.Cost.Report(r.Context(), p, cq)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	st, err := h.svc.Cost.StorageReport(r.Context(), p, cq)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := apitypes.CostReport{By: rep.By, Since: rep.Since, Until: rep.Until, Currency: h.cfg.currency(),
		Lines: make([]apitypes.CostLine, len(rep.Lines)), Total: costLineDTO(rep.Total),
		Storage: apitypes.StorageCost{Since: st.Since, Until: st.Until, Lines: make([]apitypes.StorageLine, len(st.Lines)), Total: storageLineDTO(st.Total)}}
	for i, l := range rep.Lines {
		out.Lines[i] = costLineDTO(l)
	}
	for i, l := range st.Lines {
		out.Storage.Lines[i] = storageLineDTO(l)
	}
	writeJSON(w, http.StatusOK, out)
}

func validBy(by string) bool {
	for _, g := range service.CostGroupings() {
		if g == by {
			return true
		}
	}
	return false
}

// sinceParam reads a report's since parameter (parseSince); a value that
// is neither is an error on errs.
func sinceParam(errs *domain.FieldErrors, v string) (time.Time, time.Duration) {
	if v == "" {
		return time.Time{}, 0
	}
	since, window := parseSince(v)
	if since.IsZero() && window <= 0 {
		errs.Add("since", "must be a duration back from now (30d, 12h) or a time (2026-03-01, RFC 3339), got %q", v)
	}
	return since, window
}

// parseSince reads a duration back from now ("30d") or a time: a date, a
// date and minute, or RFC 3339. Both zero: neither.
func parseSince(v string) (time.Time, time.Duration) {
	if d, err := domain.ParseDuration(v); err == nil {
		if d <= 0 {
			return time.Time{}, 0
		}
		return time.Time{}, d
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04", time.DateOnly} {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC(), 0
		}
	}
	return time.Time{}, 0
}

func costLineDTO(l service.CostLine) apitypes.CostLine {
	return apitypes.CostLine{Group: l.Group, GPUHours: l.GPUHours, CPUHours: l.CPUHours,
		Cost: l.Cost.String(), Waste: l.Waste.String(), Attempts: l.Attempts, RunningPerHour: l.RunningPerHour.String()}
}

func storageLineDTO(l service.StorageLine) apitypes.StorageLine {
	return apitypes.StorageLine{Group: l.Group, LocalGiBDays: l.LocalGiBDays, ObjectGiBDays: l.ObjectGiBDays,
		LocalCost: l.LocalCost.String(), ObjectCost: l.ObjectCost.String(), Cost: l.Cost.String()}
}
