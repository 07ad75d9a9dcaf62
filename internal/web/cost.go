package web

import "net/http"

func (h *handler) costRoutes(mux *http.ServeMux) {}
