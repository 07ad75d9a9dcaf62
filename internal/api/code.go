package api

import (
	"errors"
	"net/http"
	"strconv"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// codeRoutes registers the code package endpoints (docs/code.md):
//
//	HEAD /api/v1/code/sha256:<hex>   200 when stored (X-Trainyard-Code-Size), 404 when not
//	PUT  /api/v1/code/sha256:<hex>   body: the tar.gz; 201 stored, 200 already there
func (h *handler) codeRoutes(mux *http.ServeMux) {
	mux.Handle("HEAD /api/v1/code/{hash}", h.auth(h.headCode))
	mux.Handle("PUT /api/v1/code/{hash}", h.auth(h.putCode))
}

func (h *handler) headCode(w http.ResponseWriter, r *http.Request, p service.Principal) {
	info, err := h.svc.Jobs.StatCode(r.Context(), p, r.PathValue("hash"))
	if err != nil {
		h.codeError(w, r, err)
		return
	}
	w.Header().Set("X-Trainyard-Code-Size", strconv.FormatInt(info.Size, 10))
	w.WriteHeader(http.StatusOK)
}

func (h *handler) putCode(w http.ResponseWriter, r *http.Request, p service.Principal) {
	info, created, err := h.svc.Jobs.PutCode(r.Context(), p, r.PathValue("hash"), r.Body, r.ContentLength)
	if err != nil {
		h.codeError(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, apitypes.CodePackage{SHA256: info.SHA256, Size: info.Size, Created: created})
}

// codeError maps the code package errors that have their own status, and
// hands the rest to writeError.
func (h *handler) codeError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, service.ErrCodeTooLarge):
		writeErr(w, http.StatusRequestEntityTooLarge, "too_large", err.Error(), nil)
	case errors.Is(err, service.ErrCodeMismatch):
		writeErr(w, http.StatusBadRequest, "hash_mismatch", err.Error(), nil)
	case errors.Is(err, service.ErrNoCodeStore):
		writeErr(w, http.StatusNotImplemented, "not_implemented", err.Error(), nil)
	default:
		h.writeError(w, r, err)
	}
}

// codeRef converts a submit's code reference.
func codeRef(c *apitypes.CodeRef) *domain.CodeRef {
	if c == nil {
		return nil
	}
	return &domain.CodeRef{SHA256: c.SHA256, Commit: c.Commit, Dirty: c.Dirty}
}

// codeDTO converts a job's code reference.
func codeDTO(c *domain.CodeRef) *apitypes.CodeRef {
	if c == nil {
		return nil
	}
	return &apitypes.CodeRef{SHA256: c.SHA256, Commit: c.Commit, Dirty: c.Dirty}
}
