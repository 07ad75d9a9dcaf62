package api

import (
	"errors"
	"fmt"
	"net/http"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// rerunRoutes registers the re-run endpoint (docs/rerun.md):
//
//	POST /api/v1/jobs/{id}/rerun   body {env, set}; 201 the new job, 200 on an Idempotency-Key replay
func (h *handler) rerunRoutes(mux *http.ServeMux) {
	mux.Handle("POST /api/v1/jobs/{id}/rerun", h.auth(h.rerun))
}

// rerun submits a new job from job {id}'s config snapshot. An empty body
// re-runs the spec unchanged.
func (h *handler) rerun(w http.ResponseWriter, r *http.Request, p service.Principal) {
	id, err := pathID(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var req apitypes.RerunRequest
	if r.ContentLength != 0 {
		if err := decodeBody(w, r, &req); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	job, created, err := h.svc.Jobs.Rerun(r.Context(), p, id, service.RerunInput{
		Env: req.Env, Set: req.Set, IdempotencyKey: r.Header.Get("Idempotency-Key"),
		Resume: req.Resume, FromCheckpoint: req.FromCheckpoint})
	var fe domain.FieldErrors
	if errors.As(err, &fe) {
		// Like a submit's: the problems are the new spec's, with their paths.
		fields := make([]apitypes.FieldError, len(fe))
		for i, f := range fe {
			fields[i] = apitypes.FieldError{Path: f.Path, Message: f.Message}
		}
		writeErr(w, http.StatusBadRequest, "invalid_spec",
			fmt.Sprintf("the re-run's job spec has %d problem(s); fix the overrides and re-run again", len(fe)), fields)
		return
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.writeSubmitted(w, job, created)
}
