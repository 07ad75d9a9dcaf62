package api

import (
	"net/http"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// notifyRoutes serves users' default job-end notifications. ?user=NAME
// names another user (admins only); without it, the caller's.
func (h *handler) notifyRoutes(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/notify", h.auth(h.getNotify))
	mux.Handle("PUT /api/v1/notify", h.auth(h.putNotify))
	mux.Handle("DELETE /api/v1/notify", h.auth(h.deleteNotify))
}

// getNotify serves GET /api/v1/notify?user=.
func (h *handler) getNotify(w http.ResponseWriter, r *http.Request, p service.Principal) {
	pref, err := h.svc.Notify.GetNotifyPref(r.Context(), p, r.URL.Query().Get("user"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, notifyPrefDTO(pref))
}

// putNotify serves PUT /api/v1/notify?user=: set or replace.
func (h *handler) putNotify(w http.ResponseWriter, r *http.Request, p service.Principal) {
	var req apitypes.NotifyPref
	if err := decodeBody(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	n := domain.Notify{Channels: req.Channels, Email: req.Email}
	for _, s := range req.On {
		n.On = append(n.On, domain.JobState(s))
	}
	pref, err := h.svc.Notify.SetNotifyPref(r.Context(), p, r.URL.Query().Get("user"), n)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, notifyPrefDTO(pref))
}

// deleteNotify serves DELETE /api/v1/notify?user=.
func (h *handler) deleteNotify(w http.ResponseWriter, r *http.Request, p service.Principal) {
	if err := h.svc.Notify.ClearNotifyPref(r.Context(), p, r.URL.Query().Get("user")); err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func notifyPrefDTO(p domain.NotifyPref) apitypes.NotifyPref {
	out := apitypes.NotifyPref{User: p.User, On: []string{}, Channels: p.Notify.Channels, Email: p.Notify.Email, UpdatedAt: p.UpdatedAt}
	for _, s := range p.Notify.On {
		out.On = append(out.On, string(s))
	}
	if out.Channels == nil {
		out.Channels = []string{}
	}
	if out.Email == nil {
		out.Email = []string{}
	}
	return out
}
