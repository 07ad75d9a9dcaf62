package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// templateRoutes registers the job template endpoints. A job is submitted
// from a template through POST /api/v1/jobs with "template" in the body.
func (h *handler) templateRoutes(mux *http.ServeMux) {
	mux.Handle("POST /api/v1/templates", h.auth(h.createTemplate))
	mux.Handle("GET /api/v1/templates", h.auth(h.listTemplates))
	mux.Handle("GET /api/v1/templates/{name}", h.auth(h.getTemplate))
}

func templateDTO(t service.TemplateInfo) apitypes.Template {
	out := apitypes.Template{Project: t.Project, Name: t.Name, Version: t.Version, Description: t.Description,
		Vars: make([]apitypes.TemplateVar, len(t.Vars)), Body: string(t.Body), Hash: t.Hash,
		CreatedBy: t.CreatedBy, CreatedAt: t.CreatedAt}
	for i, v := range t.Vars {
		tv := apitypes.TemplateVar{Name: v.Name, Required: !v.HasDefault, Description: v.Description, Allowed: v.Allowed}
		if v.HasDefault {
			tv.Default = &v.Default
		}
		out.Vars[i] = tv
	}
	return out
}

func (h *handler) createTemplate(w http.ResponseWriter, r *http.Request, p service.Principal) {
	var req apitypes.CreateTemplate
	if err := decodeBody(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	info, created, err := h.svc.Templates.CreateTemplate(r.Context(), p, req.Project, req.Name, []byte(req.Body))
	var fe domain.FieldErrors
	if errors.As(err, &fe) {
		fields := make([]apitypes.FieldError, len(fe))
		for i, f := range fe {
			fields[i] = apitypes.FieldError{Path: f.Path, Message: f.Message, Line: f.Line}
		}
		writeErr(w, http.StatusBadRequest, "invalid_template",
			fmt.Sprintf("the template has %d problem(s); fix them and create it again", len(fe)), fields)
		return
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := templateDTO(info)
	out.Created = &created
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	w.Header().Set("Location", fmt.Sprintf("/api/v1/templates/%s?project=%s&version=%d", info.Name, info.Project, info.Version))
	writeJSON(w, status, out)
}

func (h *handler) listTemplates(w http.ResponseWriter, r *http.Request, p service.Principal) {
	list, err := h.svc.Templates.ListTemplates(r.Context(), p, r.URL.Query().Get("project"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := apitypes.TemplateList{Templates: make([]apitypes.Template, len(list))}
	for i, t := range list {
		out.Templates[i] = templateDTO(t)
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) getTemplate(w http.ResponseWriter, r *http.Request, p service.Principal) {
	q := r.URL.Query()
	version := 0
	if v := q.Get("version"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			h.writeError(w, r, domain.FieldErrors{{Path: "version", Message: fmt.Sprintf("must be a whole number, 1 or more, got %q", v)}})
			return
		}
		version = n
	}
	info, err := h.svc.Templates.GetTemplate(r.Context(), p, q.Get("project"), r.PathValue("name"), version)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, templateDTO(info))
}
