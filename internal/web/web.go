// Package web serves Trainyard's web pages at /: jobs, a job with its
// live log and charts, the queue, pools and quotas, cost, alerts and the
// audit log. Pages are rendered on the server with html/template from
// files embedded in the binary; a small script (static/app.js) keeps the
// live parts of a page current over Server-Sent Events. There is no build
// step and nothing is loaded from elsewhere.
//
// Like the API, the pages call the service and never the store; every
// page is decided by the service's authorization for the signed-in user,
// so a page shows exactly what the API would answer that user. A session
// is an API token of its own (session.go): signing in with a token makes
// one, signing out revokes it.
package web

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/service"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config wires the web pages.
type Config struct {
	Service *service.Service
	Logger  *slog.Logger
	// Secure marks the session cookie Secure: set it when the server
	// serves TLS.
	Secure bool
	// Currency is the server's currency of pool rates ("":
	// domain.DefaultCurrency).
	Currency string
	// Live is how often a live part of a page looks for a change (0: one
	// second).
	Live time.Duration
}

// Handler returns the pages' http.Handler, to serve at / beside the API.
func Handler(cfg Config) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Currency == "" {
		cfg.Currency = domain.DefaultCurrency
	}
	if cfg.Live <= 0 {
		cfg.Live = time.Second
	}
	h := &handler{cfg: cfg, svc: cfg.Service, log: cfg.Logger, tmpl: parseTemplates()}
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", staticFiles(http.FileServerFS(static))))
	mux.HandleFunc("GET /signin", h.signinPage)
	mux.HandleFunc("POST /signin", h.signin)
	mux.Handle("POST /signout", h.action(h.signout))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/jobs", http.StatusSeeOther)
	})
	h.jobRoutes(mux)   // the job list and a job's page: jobs.go, job.go
	h.sweepRoutes(mux) // sweeps and their members: sweeps.go
	h.queueRoutes(mux) // the queue of each pool: queue.go
	h.poolRoutes(mux)  // pools and quotas: pools.go
	h.costRoutes(mux)  // spend and budgets: cost.go
	h.alertRoutes(mux) // alerts: alerts.go
	h.auditRoutes(mux) // the audit log: audit.go
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := h.session(w, r); !ok {
			return
		}
		h.fail(w, r, domain.Errorf(domain.ErrNotFound, "there is no page %s; start from the job list", r.URL.Path))
	})
	return securityHeaders(mux)
}

type handler struct {
	cfg  Config
	svc  *service.Service
	log  *slog.Logger
	tmpl templates
}

// contentSecurityPolicy allows this server's own scripts, styles and
// images and nothing else: no inline script or style, no frames, forms
// that post only here.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// securityHeaders sets the headers every page and file carries.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", contentSecurityPolicy)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "same-origin")
		hd.Set("Cross-Origin-Opener-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// staticFiles lets browsers keep the embedded files for an hour.
func staticFiles(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		next.ServeHTTP(w, r)
	})
}

// page is what every page's template gets: the signed-in user, the
// form token, and the page's own data.
type page struct {
	Title   string
	Nav     string // the navigation entry to mark current
	User    *viewer
	CSRF    string
	Data    any
	Flash   string // a one-line notice above the page ("" for none)
	Problem string // an error above the page ("" for none)
}

// render writes template name with p, or a plain error when it fails
// (the page is rendered to a buffer first, so a failure never leaves half
// a page).
func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	var buf bytes.Buffer
	if err := h.tmpl.page(&buf, name, p); err != nil {
		h.log.Error("render page", "page", name, "path", r.URL.Path, "err", err)
		http.Error(w, "internal error rendering this page; the server log has the details", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// fragment renders template name with data to a string, for a live part
// of a page.
func (h *handler) fragment(name string, data any) (string, error) {
	var buf bytes.Buffer
	if err := h.tmpl.part(&buf, name, data); err != nil {
		return "", err
	}
	return buf.String(), nil
}

// fail answers a failed page: the error's text on the page, with the
// status the API would answer. A caller without a session is sent to
// sign in.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, msg := statusOf(err)
	switch {
	case status == http.StatusUnauthorized:
		h.toSignin(w, r, msg)
		return
	case status == http.StatusInternalServerError:
		if errors.Is(err, context.Canceled) {
			return
		}
		h.log.Error("page failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	p := page{Title: http.StatusText(status), Problem: msg}
	if v, ok := viewerFrom(r.Context()); ok {
		p.User, p.CSRF = v, v.csrf
	}
	h.render(w, r, status, "error.html", p)
}

// statusOf maps err to an HTTP status and the text to show, as the API
// does.
func statusOf(err error) (int, string) {
	var fe domain.FieldErrors
	var rl *service.RateLimitedError
	switch {
	case errors.As(err, &rl):
		return http.StatusTooManyRequests, rl.Error()
	case errors.As(err, &fe):
		msgs := make([]string, len(fe))
		for i, f := range fe {
			msgs[i] = f.Path + ": " + f.Message
		}
		return http.StatusBadRequest, strings.Join(msgs, "; ")
	case errors.Is(err, domain.ErrUnauthorized):
		return http.StatusUnauthorized, err.Error()
	case errors.Is(err, domain.ErrForbidden):
		return http.StatusForbidden, err.Error()
	case errors.Is(err, domain.ErrNotFound):
		return http.StatusNotFound, err.Error()
	case errors.Is(err, domain.ErrConflict):
		return http.StatusConflict, err.Error()
	case errors.Is(err, domain.ErrInvalid):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, domain.ErrUnavailable):
		return http.StatusServiceUnavailable, "the store is unavailable; try again in a few seconds"
	}
	return http.StatusInternalServerError, "internal error; the server log has the details"
}
