package api

import (
	"encoding/json"
	"net/http"
	"strconv"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// sweepRoutes registers sweeps and job arrays (docs/workflows.md):
//
//	POST /api/v1/sweeps               body {spec, set, array}; 201 the sweep with its members' ids, 200 on an Idempotency-Key replay
//	GET  /api/v1/sweeps               ?project=&limit=
//	GET  /api/v1/sweeps/{id}          with members counted and the best member
//	POST /api/v1/sweeps/{id}/cancel   body {reason}; cancels every member not ended
func (h *handler) sweepRoutes(mux *http.ServeMux) {
	mux.Handle("POST /api/v1/sweeps", h.auth(h.submitSweep))
	mux.Handle("GET /api/v1/sweeps", h.auth(h.listSweeps))
	mux.Handle("GET /api/v1/sweeps/{id}", h.auth(h.getSweep))
	mux.Handle("POST /api/v1/sweeps/{id}/cancel", h.auth(h.cancelSweep))
}

func (h *handler) submitSweep(w http.ResponseWriter, r *http.Request, p service.Principal) {
	var req apitypes.SweepRequest
	if err := decodeBody(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	doc, err := specDoc(req.Spec)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if len(doc) == 0 {
		h.writeError(w, r, domain.FieldErrors{{Path: "spec", Message: "is required: send the spec as an object or as the text of a spec file"}})
		return
	}
	res, err := h.svc.Jobs.SubmitSweep(r.Context(), p, service.SweepInput{Doc: doc, Set: req.Set, Array: req.Array, Code: codeRef(req.Code),
		IdempotencyKey: r.Header.Get("Idempotency-Key")})
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := sweepDTO(res.Sweep)
	out.Jobs, out.Created = res.Jobs, &res.Created
	w.Header().Set("Location", "/api/v1/sweeps/"+strconv.FormatInt(res.Sweep.ID, 10))
	status := http.StatusCreated
	if !res.Created {
		status = http.StatusOK
	}
	writeJSON(w, status, out)
}

func (h *handler) listSweeps(w http.ResponseWriter, r *http.Request, p service.Principal) {
	q := r.URL.Query()
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			h.writeError(w, r, domain.FieldErrors{{Path: "limit", Message: "must be a whole number between 1 and 1000, got " + strconv.Quote(v)}})
			return
		}
		limit = n
	}
	sweeps, err := h.svc.Jobs.ListSweeps(r.Context(), p, q.Get("project"), limit)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := apitypes.SweepList{Sweeps: make([]apitypes.Sweep, len(sweeps))}
	for i, sw := range sweeps {
		out.Sweeps[i] = sweepDTO(sw)
		out.Sweeps[i].Definition = nil
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) getSweep(w http.ResponseWriter, r *http.Request, p service.Principal) {
	id, err := pathID(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	v, err := h.svc.Jobs.GetSweep(r.Context(), p, id)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sweepViewDTO(v))
}

func (h *handler) cancelSweep(w http.ResponseWriter, r *http.Request, p service.Principal) {
	id, err := pathID(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var req struct {
		Reason string `json:"reason"`
	}
	if r.ContentLength != 0 {
		if err := decodeBody(w, r, &req); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	v, err := h.svc.Jobs.CancelSweep(r.Context(), p, id, req.Reason)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sweepViewDTO(v))
}

func sweepDTO(sw domain.Sweep) apitypes.Sweep {
	out := apitypes.Sweep{ID: sw.ID, Name: sw.Name, Project: sw.Project, Submitter: sw.Submitter, CreatedAt: sw.CreatedAt,
		Method: sw.Method, Members: sw.Members, MaxParallel: sw.MaxParallel, CanceledBy: sw.CanceledBy}
	if o := sw.Objective; o != nil {
		out.Objective = &apitypes.Objective{Metric: o.Metric, Goal: o.Goal}
	}
	if !sw.CanceledAt.IsZero() {
		t := sw.CanceledAt
		out.CanceledAt = &t
	}
	out.Definition, _ = json.Marshal(sw.Spec)
	return out
}

func sweepViewDTO(v service.SweepView) apitypes.Sweep {
	out := sweepDTO(v.Sweep)
	out.State = string(v.State)
	out.Counts = make(map[string]int, len(v.Counts))
	for st, n := range v.Counts {
		out.Counts[string(st)] = n
	}
	if b := v.Best; b != nil {
		out.Best = &apitypes.SweepBest{Job: b.JobID, Index: b.Index, Params: b.Params, Metric: b.Metric, Value: b.Value, Step: b.Step}
	}
	return out
}
