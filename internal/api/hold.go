package api

import (
	"net/http"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/service"
)

func (h *handler) hold(w http.ResponseWriter, r *http.Request, p service.Principal) {
	id, err := pathID(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var req apitypes.HoldRequest
	if r.ContentLength != 0 {
		if err := decodeBody(w, r, &req); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	job, err := h.svc.Jobs.Hold(r.Context(), p, id, req.Reason)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, jobDTO(&job))
}

func (h *handler) release(w http.ResponseWriter, r *http.Request, p service.Principal) {
	id, err := pathID(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	job, err := h.svc.Jobs.Release(r.Context(), p, id)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, jobDTO(&job))
}
