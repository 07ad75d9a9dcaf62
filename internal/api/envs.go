package api

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// envRoutes registers the software environment endpoints.
func (h *handler) envRoutes(mux *http.ServeMux) {
	mux.Handle("POST /api/v1/envs", h.auth(h.registerEnv))
	mux.Handle("GET /api/v1/envs", h.auth(h.listEnvs))
	mux.Handle("GET /api/v1/envs/{name}", h.auth(h.listEnvs))
	mux.Handle("GET /api/v1/envs/{name}/{version}", h.auth(h.getEnv))
	mux.Handle("POST /api/v1/envs/{name}/{version}/deprecate", h.auth(h.deprecateEnv))
}

func envDTO(e domain.Environment) apitypes.Env {
	out := apitypes.Env{Name: e.Name, Version: e.Version, Ref: e.Ref(), Image: e.Image, PathPrefix: e.PathPrefix,
		Vars: e.Vars, Check: e.Check, Description: e.Description, Digest: e.Digest, Deprecated: e.Deprecated,
		DeprecatedReason: e.DeprecatedReason, CreatedBy: e.CreatedBy, CreatedAt: e.CreatedAt}
	if !e.DeprecatedAt.IsZero() {
		at := e.DeprecatedAt
		out.DeprecatedAt = &at
	}
	return out
}

func envListDTO(list []domain.Environment) apitypes.EnvList {
	out := apitypes.EnvList{Envs: make([]apitypes.Env, len(list))}
	for i, e := range list {
		out.Envs[i] = envDTO(e)
	}
	return out
}

// envVersion reads the {version} path value: a whole number from 1, or
// "all" when allowAll (returned as 0).
func envVersion(r *http.Request, allowAll bool) (int, error) {
	v := r.PathValue("version")
	if allowAll && v == "all" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		hint := "a whole number from 1"
		if allowAll {
			hint += `, or "all"`
		}
		return 0, domain.FieldErrors{{Path: "version", Message: fmt.Sprintf("must be %s, got %q", hint, v)}}
	}
	return n, nil
}

func (h *handler) registerEnv(w http.ResponseWriter, r *http.Request, p service.Principal) {
	var req apitypes.RegisterEnv
	if err := decodeBody(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	reg, err := h.svc.Envs.Registration(r.Context(), p, service.EnvDefinition{Name: req.Name, Image: req.Image,
		PathPrefix: req.PathPrefix, Vars: req.Vars, Check: req.Check, Description: req.Description})
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	env := reg.Env
	out := envDTO(env)
	out.Created, out.Warnings = &reg.Created, reg.Warnings
	status := http.StatusOK
	if reg.Created {
		status = http.StatusCreated
	}
	w.Header().Set("Location", fmt.Sprintf("/api/v1/envs/%s/%d", url.PathEscape(env.Name), env.Version))
	writeJSON(w, status, out)
}

func (h *handler) listEnvs(w http.ResponseWriter, r *http.Request, p service.Principal) {
	list, err := h.svc.Envs.ListEnvs(r.Context(), p, r.PathValue("name"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, envListDTO(list))
}

func (h *handler) getEnv(w http.ResponseWriter, r *http.Request, p service.Principal) {
	version, err := envVersion(r, false)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	env, err := h.svc.Envs.GetEnv(r.Context(), p, r.PathValue("name"), version)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, envDTO(env))
}

func (h *handler) deprecateEnv(w http.ResponseWriter, r *http.Request, p service.Principal) {
	version, err := envVersion(r, true)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var req apitypes.DeprecateEnv
	if r.ContentLength != 0 {
		if err := decodeBody(w, r, &req); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	list, err := h.svc.Envs.DeprecateEnv(r.Context(), p, r.PathValue("name"), version, req.Reason)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, envListDTO(list))
}
