package web

import "net/http"

func (h *handler) poolRoutes(mux *http.ServeMux) {}
