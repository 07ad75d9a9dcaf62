package web

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// A session is an API token of its own, named domain.WebSessionToken,
// made for the user when they sign in with one of their tokens, revoked
// when they sign out and deleted at their next sign-in once revoked or
// expired (service.TidyWebTokens). The cookie holds its secret: the
// server keeps only its hash, as for every token, so sessions need
// nothing of their own in the store, work on every replica, and end when
// an admin revokes the user's tokens or roles. The cookie is HttpOnly
// and SameSite=Strict (Secure when the server serves TLS); forms also
// carry a token derived from the session's secret (csrfToken), and posts
// from another site are refused.
const (
	cookieName = "trainyard_session"
	sessionTTL = 12 * time.Hour
)

// viewer is the signed-in user of a request.
type viewer struct {
	p    service.Principal
	Name string
	csrf string
}

type viewerKey struct{}

func viewerFrom(ctx context.Context) (*viewer, bool) {
	v, ok := ctx.Value(viewerKey{}).(*viewer)
	return v, ok
}

// Can reports whether the viewer may do action to resource r: what
// decides which buttons and pages a page offers (the service decides
// again when they are used).
func (v *viewer) Can(a authz.Action, r authz.Resource) bool {
	return authz.Decide(v.p, a, r).Allow
}

// CanJob reports whether the viewer may do action ("cancel", "hold") to
// job j.
func (v *viewer) CanJob(action string, j *domain.Job) bool {
	r := authz.Resource{Kind: "job", Project: j.Project, Owner: j.Submitter}
	switch action {
	case "cancel":
		return !j.State.Terminal() && v.Can(authz.JobCancel, r)
	case "hold":
		return j.State == domain.JobQueued && v.Can(authz.JobHold, r)
	case "release":
		return j.State == domain.JobHeld && v.Can(authz.JobHold, r)
	case "rerun":
		return j.State.Terminal() && v.Can(authz.JobSubmit, authz.Resource{Kind: "job", Project: j.Project})
	}
	return false
}

// SeesAudit reports whether the viewer may read the audit log.
func (v *viewer) SeesAudit() bool { return v.Can(authz.AuditRead, authz.Resource{Kind: "audit"}) }

// csrfToken is the form token of the session whose secret is secret: an
// HMAC of it, so it needs no storage and another session's is useless.
func csrfToken(secret string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("trainyard web form"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// session authenticates the request's session. Without a valid one it
// answers (a page: the sign-in page; anything else: 401) and returns
// false.
func (h *handler) session(w http.ResponseWriter, r *http.Request) (*viewer, bool) {
	c, err := r.Cookie(cookieName)
	if err != nil || c.Value == "" {
		h.toSignin(w, r, "")
		return nil, false
	}
	ctx := service.WithClient(r.Context(), clientAddr(r))
	p, err := h.svc.Identity.Authenticate(ctx, c.Value)
	if err == nil && p.IsJob() {
		err = domain.Errorf(domain.ErrUnauthorized, "a job token cannot sign in")
	}
	if err != nil {
		status, _ := statusOf(err)
		if status != http.StatusUnauthorized && status != http.StatusTooManyRequests {
			h.fail(w, r, err)
			return nil, false
		}
		h.clearCookie(w)
		h.toSignin(w, r, "Your session ended; sign in again.")
		return nil, false
	}
	v := &viewer{p: p, Name: p.Subject, csrf: csrfToken(c.Value)}
	*r = *r.WithContext(context.WithValue(ctx, viewerKey{}, v))
	return v, true
}

// toSignin sends a page request to the sign-in page (coming back to it
// afterwards) and answers anything else 401.
func (h *handler) toSignin(w http.ResponseWriter, r *http.Request, notice string) {
	if r.Method != http.MethodGet || r.Header.Get("Accept") == "text/event-stream" {
		http.Error(w, "not signed in: sign in at /signin", http.StatusUnauthorized)
		return
	}
	q := url.Values{"next": {r.URL.RequestURI()}}
	if notice != "" {
		q.Set("notice", notice)
	}
	http.Redirect(w, r, "/signin?"+q.Encode(), http.StatusSeeOther)
}

// authed wraps a page that needs a session.
func (h *handler) authed(fn func(w http.ResponseWriter, r *http.Request, v *viewer)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, ok := h.session(w, r)
		if !ok {
			return
		}
		fn(w, r, v)
	})
}

// action wraps a form post: it needs a session, a post from this site and
// the session's form token.
func (h *handler) action(fn func(w http.ResponseWriter, r *http.Request, v *viewer)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !sameOrigin(r) {
			http.Error(w, "refused: the form was posted from another site", http.StatusForbidden)
			return
		}
		v, ok := h.session(w, r)
		if !ok {
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		got := r.PostFormValue("csrf")
		if got == "" {
			got = r.Header.Get("X-CSRF-Token")
		}
		if !hmac.Equal([]byte(got), []byte(v.csrf)) {
			http.Error(w, "refused: the form's security token is missing or stale; reload the page and try again", http.StatusForbidden)
			return
		}
		fn(w, r, v)
	})
}

// sameOrigin reports whether a post comes from this site: by the
// browser's Sec-Fetch-Site, else its Origin, and is allowed when it sends
// neither (not a browser: it has no cookie of ours to abuse).
func sameOrigin(r *http.Request) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" {
		return s == "same-origin" || s == "none"
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

func (h *handler) setCookie(w http.ResponseWriter, secret string, expires time.Time) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: secret, Path: "/", Expires: expires,
		MaxAge: int(time.Until(expires).Seconds()), HttpOnly: true, Secure: h.cfg.Secure, SameSite: http.SameSiteStrictMode})
}

func (h *handler) clearCookie(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: h.cfg.Secure, SameSite: http.SameSiteStrictMode})
}

// signinData is the sign-in page's data.
type signinData struct {
	Next   string
	Notice string
}

func (h *handler) signinPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	h.render(w, r, http.StatusOK, "signin.html", page{Title: "Sign in",
		Data: signinData{Next: localPath(q.Get("next")), Notice: q.Get("notice")}})
}

// signin takes a token from the form, and makes a session of its own for
// its user.
func (h *handler) signin(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "refused: the form was posted from another site", http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	next := localPath(r.PostFormValue("next"))
	again := func(status int, msg string) {
		h.render(w, r, status, "signin.html", page{Title: "Sign in", Problem: msg, Data: signinData{Next: next}})
	}
	secret := strings.TrimSpace(r.PostFormValue("token"))
	if secret == "" {
		again(http.StatusBadRequest, "Paste an API token (trainyard token create prints one).")
		return
	}
	ctx := service.WithClient(r.Context(), clientAddr(r))
	p, err := h.svc.Identity.Authenticate(ctx, secret)
	if err == nil && p.IsJob() {
		err = domain.Errorf(domain.ErrUnauthorized, "a job token cannot sign in; use a user's token")
	}
	if err != nil {
		status, msg := statusOf(err)
		again(status, msg)
		return
	}
	session, tok, err := h.svc.Identity.CreateToken(ctx, p, service.TokenInput{Name: domain.WebSessionToken, TTL: sessionTTL})
	if err != nil {
		status, msg := statusOf(err)
		again(status, msg)
		return
	}
	h.tidyTokens(ctx, p)
	h.setCookie(w, session, tok.ExpiresAt)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// tidyTokens deletes the sign-in link p signed in with (a link signs in
// once) and the user's spent sessions and links.
func (h *handler) tidyTokens(ctx context.Context, p service.Principal) {
	if err := h.svc.Identity.TidyWebTokens(ctx, p); err != nil {
		h.log.Warn("delete the spent web sessions of a signed-in user", "user", p.Subject, "err", err)
	}
}

// signout revokes the session's token.
func (h *handler) signout(w http.ResponseWriter, r *http.Request, v *viewer) {
	if _, err := h.svc.Identity.RevokeToken(r.Context(), v.p, v.p.TokenID); err != nil {
		h.fail(w, r, err)
		return
	}
	h.clearCookie(w)
	http.Redirect(w, r, "/signin?notice="+url.QueryEscape("You signed out."), http.StatusSeeOther)
}

// localPath returns next when it is a path on this site, else /jobs: a
// sign-in link must not send anyone elsewhere.
func localPath(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		return "/jobs"
	}
	return next
}
