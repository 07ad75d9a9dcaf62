package web

import "net/http"

func (h *handler) auditRoutes(mux *http.ServeMux) {}
