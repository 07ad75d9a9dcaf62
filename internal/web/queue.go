package web

import "net/http"

func (h *handler) queueRoutes(mux *http.ServeMux) {}
