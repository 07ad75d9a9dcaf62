package api

import (
	"net/http"
	"strconv"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// trainingRoutes registers training-metric reporting and reading.
func (h *handler) trainingRoutes(mux *http.ServeMux) {
	mux.Handle("POST /api/v1/jobs/{id}/attempts/{n}/metrics", h.auth(h.reportMetrics))
	mux.Handle("GET /api/v1/jobs/{id}/metrics", h.auth(h.getMetrics))
}

func (h *handler) reportMetrics(w http.ResponseWriter, r *http.Request, p service.Principal) {
	id, n, err := pathAttempt(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var req apitypes.MetricsReport
	if err := decodeBody(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	in := make([]service.MetricsInput, len(req.Points))
	for i, pt := range req.Points {
		in[i] = service.MetricsInput{Step: pt.Step, Metrics: pt.Metrics}
	}
	stored, err := h.svc.Jobs.ReportMetrics(r.Context(), p, id, n, in)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apitypes.MetricsReportResult{Stored: stored})
}

func (h *handler) getMetrics(w http.ResponseWriter, r *http.Request, p service.Principal) {
	id, err := pathID(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	maxPoints := 0
	if v := q.Get("max"); v != "" {
		if maxPoints, err = strconv.Atoi(v); err != nil {
			h.writeError(w, r, domain.FieldErrors{{Path: "max", Message: "must be a whole number, got " + strconv.Quote(v)}})
			return
		}
	}
	series, err := h.svc.Jobs.Metrics(r.Context(), p, id, q.Get("key"), maxPoints)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := apitypes.MetricSeries{Series: make(map[string][]apitypes.MetricPoint, len(series))}
	for k, pts := range series {
		s := make([]apitypes.MetricPoint, len(pts))
		for i, pt := range pts {
			s[i] = apitypes.MetricPoint{Step: pt.Step, Value: pt.Value, At: pt.At, Attempt: pt.Attempt}
		}
		out.Series[k] = s
	}
	writeJSON(w, http.StatusOK, out)
}

// pathAttempt reads the job id and the attempt number {n} of a route.
func pathAttempt(r *http.Request) (int64, int, error) {
	id, err := pathID(r)
	if err != nil {
		return 0, 0, err
	}
	v := r.PathValue("n")
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, 0, domain.FieldErrors{{Path: "n", Message: strconv.Quote(v) + " is not an attempt number (1 or more)"}}
	}
	return id, n, nil
}
