package api

import (
	"net/http"
	"strconv"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// requestRoutes registers the compute-request endpoints.
func (h *handler) requestRoutes(mux *http.ServeMux) {
	mux.Handle("POST /api/v1/quota-requests", h.auth(h.createRequest))
	mux.Handle("GET /api/v1/quota-requests", h.auth(h.listRequests))
	mux.Handle("POST /api/v1/quota-requests/{id}/approve", h.auth(h.decideRequest(true)))
	mux.Handle("POST /api/v1/quota-requests/{id}/deny", h.auth(h.decideRequest(false)))
}

func (h *handler) createRequest(w http.ResponseWriter, r *http.Request, p service.Principal) {
	var in apitypes.QuotaRequest
	if err := decodeBody(w, r, &in); err != nil {
		h.writeError(w, r, err)
		return
	}
	req := domain.QuotaRequest{Project: in.Project, Pool: in.Pool, Until: in.Until, Reason: in.Reason,
		Extra: domain.Limits{GPUs: in.GPUs, CPUs: in.CPUs, Jobs: in.Jobs}}
	if in.Memory != "" {
		var errs domain.FieldErrors
		req.Extra.Memory = parseSize(&errs, "memory", in.Memory)
		if err := errs.Err(); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	out, err := h.svc.Pools.RequestQuota(r.Context(), p, req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, h.requestDTO(out))
}

func (h *handler) listRequests(w http.ResponseWriter, r *http.Request, p service.Principal) {
	q := r.URL.Query()
	reqs, err := h.svc.Pools.ListRequests(r.Context(), p, q.Get("project"), q.Get("pool"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := apitypes.QuotaRequestList{Requests: make([]apitypes.QuotaRequest, len(reqs))}
	for i, rq := range reqs {
		out.Requests[i] = h.requestDTO(rq)
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) decideRequest(approve bool) authedFunc {
	return func(w http.ResponseWriter, r *http.Request, p service.Principal) {
		id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
		if err != nil || id <= 0 {
			h.writeError(w, r, domain.FieldErrors{{Path: "id", Message: "is not a request id; ids are positive whole numbers"}})
			return
		}
		var d apitypes.Decision
		if r.ContentLength != 0 {
			if err := decodeBody(w, r, &d); err != nil {
				h.writeError(w, r, err)
				return
			}
		}
		out, err := h.svc.Pools.DecideRequest(r.Context(), p, id, approve, d.Note)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, h.requestDTO(out))
	}
}

func (h *handler) requestDTO(rq domain.QuotaRequest) apitypes.QuotaRequest {
	out := apitypes.QuotaRequest{ID: rq.ID, Project: rq.Project, Pool: rq.Pool, GPUs: rq.Extra.GPUs, CPUs: rq.Extra.CPUs,
		Jobs: rq.Extra.Jobs, Until: rq.Until, Reason: rq.Reason, Requester: rq.Requester,
		Status: rq.Status(h.svc.Now()), Decider: rq.Decider, DecidedAt: timePtr(rq.DecidedAt), Note: rq.Note, CreatedAt: rq.CreatedAt}
	if rq.Extra.Memory > 0 {
		out.Memory = rq.Extra.Memory.String()
	}
	return out
}
