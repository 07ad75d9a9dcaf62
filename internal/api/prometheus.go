package api

import (
	"crypto/subtle"
	"net/http"
	"strings"
	"time"
)

// promMetrics serves the Prometheus exposition, behind MetricsToken when one is
// configured.
func (h *handler) promMetrics(w http.ResponseWriter, r *http.Request) {
	if want := h.cfg.MetricsToken; want != "" {
		got, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(want)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="trainyard-metrics"`)
			writeErr(w, http.StatusUnauthorized, "unauthorized", "GET /metrics needs the metrics token: send Authorization: Bearer <metrics_token from the server config>", nil)
			return
		}
	}
	h.cfg.Metrics.ServeHTTP(w, r)
}

// promObserve records every request's latency by route pattern and status code.
// The mux sets r.Pattern on the request it is given, so it is known once the
// handler returned.
func (h *handler) promObserve(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &promStatusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		h.cfg.Metrics.ObserveRequest(r.Pattern, code, time.Since(start))
	})
}

// promStatusWriter remembers the status code written through it.
type promStatusWriter struct {
	http.ResponseWriter
	code int
}

func (w *promStatusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *promStatusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush keeps streamed responses (followed logs) streaming.
func (w *promStatusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *promStatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
