package api

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// promMetrics serves the Prometheus exposition to whom MetricsAuth lets
// read it. A client that must show a token is checked by the service: the
// metrics token or an admin's or auditor's API token; a failed token is
// audited and rate-limited as on every API route.
func (h *handler) promMetrics(w http.ResponseWriter, r *http.Request) {
	auth := h.cfg.MetricsAuth
	if auth == "" {
		auth = MetricsAuthLoopback
		if h.cfg.MetricsToken != "" {
			auth = MetricsAuthToken
		}
	}
	if auth == MetricsAuthNone || (auth == MetricsAuthLoopback && isLoopback(r.RemoteAddr)) {
		h.cfg.Metrics.ServeHTTP(w, r)
		return
	}
	r = r.WithContext(service.WithClient(r.Context(), clientAddr(r)))
	secret, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	err := h.svc.Identity.AuthorizeMetrics(r.Context(), strings.TrimSpace(secret), h.cfg.MetricsToken)
	switch {
	case err == nil:
		h.cfg.Metrics.ServeHTTP(w, r)
	case errors.Is(err, domain.ErrUnauthorized):
		w.Header().Set("WWW-Authenticate", `Bearer realm="trainyard-metrics"`)
		from := "from this address "
		if auth == MetricsAuthToken {
			from = ""
		}
		writeErr(w, http.StatusUnauthorized, "unauthorized", fmt.Sprintf("GET /metrics needs a token %s(%s); send Authorization: Bearer <the metrics_token of the server config, or the API token of an admin or auditor>; see docs/observability.md",
			from, err.Error()), nil)
	default:
		h.writeError(w, r, err)
	}
}

// isLoopback reports whether a request's RemoteAddr is on this machine.
func isLoopback(remoteAddr string) bool {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
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
