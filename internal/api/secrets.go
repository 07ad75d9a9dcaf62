package api

import (
	"net/http"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/service"
)

// secretRoutes registers the secret endpoints. No endpoint returns a value:
// values go in (PUT) and reach only the jobs that name them.
func (h *handler) secretRoutes(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/secrets", h.auth(h.listSecrets))
	mux.Handle("PUT /api/v1/secrets/{name}", h.auth(h.putSecret))
	mux.Handle("DELETE /api/v1/secrets/{name}", h.auth(h.deleteSecret))
	mux.Handle("POST /api/v1/secrets/rotate-key", h.auth(h.rotateKey))
}

func secretDTO(s service.SecretInfo) apitypes.Secret {
	return apitypes.Secret{Name: s.Name, Project: s.Project, Version: s.Version, KeyID: s.KeyID,
		CreatedBy: s.CreatedBy, CreatedAt: s.CreatedAt, Shadowed: s.Shadowed}
}

func (h *handler) listSecrets(w http.ResponseWriter, r *http.Request, p service.Principal) {
	list, err := h.svc.Secrets.ListSecrets(r.Context(), p, r.URL.Query().Get("project"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := apitypes.SecretList{Secrets: make([]apitypes.Secret, len(list))}
	for i, s := range list {
		out.Secrets[i] = secretDTO(s)
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) putSecret(w http.ResponseWriter, r *http.Request, p service.Principal) {
	var req apitypes.SecretValue
	if err := decodeBody(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	info, err := h.svc.Secrets.SetSecret(r.Context(), p, r.URL.Query().Get("project"), r.PathValue("name"), []byte(req.Value))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	status := http.StatusOK
	if info.Version == 1 {
		status = http.StatusCreated
	}
	writeJSON(w, status, secretDTO(info))
}

func (h *handler) deleteSecret(w http.ResponseWriter, r *http.Request, p service.Principal) {
	if err := h.svc.Secrets.DeleteSecret(r.Context(), p, r.URL.Query().Get("project"), r.PathValue("name")); err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) rotateKey(w http.ResponseWriter, r *http.Request, p service.Principal) {
	var req apitypes.RotateKeyRequest
	if err := decodeBody(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	res, err := h.svc.Secrets.RotateMasterKey(r.Context(), p, req.NewKeyFile)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apitypes.RotateKeyResult{OldKeyID: res.OldKeyID, NewKeyID: res.NewKeyID, Resealed: res.Resealed})
}
