package web

import "net/http"

func (h *handler) alertRoutes(mux *http.ServeMux) {}
