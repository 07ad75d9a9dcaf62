package web_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// TestNoPageWithoutASession: every page sends a visitor without a session
// to sign in, and every live stream and form refuses them.
func TestNoPageWithoutASession(t *testing.T) {
	e := newEnv(t)
	b := e.browser()
	for _, p := range []string{"/", "/jobs", "/jobs/1", "/queue", "/pools", "/cost", "/alerts", "/audit", "/nowhere", "/jobs/1/log.txt", "/jobs/1/files/model.json"} {
		code, _ := b.get(p)
		if p == "/" {
			continue // redirects to /jobs, itself checked
		}
		if code != http.StatusSeeOther {
			t.Errorf("GET %s without a session: %d, want 303 to /signin", p, code)
		}
	}
	for _, p := range []string{"/jobs/live", "/jobs/1/live", "/jobs/1/charts", "/jobs/1/log", "/queue/live", "/pools/live"} {
		req, _ := http.NewRequest("GET", e.srv.URL+p, nil)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := b.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("stream %s without a session: %d, want 401", p, resp.StatusCode)
		}
	}
	if code, _, _ := b.post("/jobs/1/cancel", url.Values{"csrf": {"x"}}); code != http.StatusUnauthorized {
		t.Errorf("cancel without a session: %d, want 401", code)
	}
	// A forged cookie is no session either.
	u, _ := url.Parse(e.srv.URL)
	b.c.Jar.SetCookies(u, []*http.Cookie{{Name: "trainyard_session", Value: "ty_forged"}})
	if code, _ := b.get("/jobs"); code != http.StatusSeeOther {
		t.Errorf("forged session: %d, want 303 to /signin", code)
	}
}

// TestSignInMakesASessionOfItsOwn: the session is a token of its own,
// the cookie is HttpOnly and SameSite=Strict, and signing out revokes it
// without touching the token signed in with.
func TestSignInMakesASessionOfItsOwn(t *testing.T) {
	e := newEnv(t)
	alice := e.user("alice", "member@vision")
	b := e.browser()
	code, _, hdr := b.post("/signin", url.Values{"token": {alice}, "next": {"/jobs?state=queued"}})
	if code != http.StatusSeeOther || hdr.Get("Location") != "/jobs?state=queued" {
		t.Fatalf("sign in: %d %q", code, hdr.Get("Location"))
	}
	c := hdr.Get("Set-Cookie")
	for _, want := range []string{"trainyard_session=ty_", "HttpOnly", "SameSite=Strict", "Path=/"} {
		if !strings.Contains(c, want) {
			t.Errorf("cookie %q lacks %q", c, want)
		}
	}
	if strings.Contains(c, alice) {
		t.Error("the cookie holds the token signed in with, not a session of its own")
	}
	code, body := b.get("/jobs")
	if code != 200 || !strings.Contains(body, "alice") {
		t.Fatalf("jobs page: %d", code)
	}
	tok := b.csrf("/jobs")
	if code, _, hdr := b.post("/signout", url.Values{"csrf": {tok}}); code != http.StatusSeeOther || !strings.HasPrefix(hdr.Get("Location"), "/signin") {
		t.Fatalf("sign out: %d %q", code, hdr.Get("Location"))
	}
	if code, _ := b.get("/jobs"); code != http.StatusSeeOther {
		t.Errorf("after signing out: %d, want 303", code)
	}
	// The token signed in with still works.
	e.signIn(alice)
}

// TestSignInRefusals: a wrong token, a job's token and an empty field are
// refused with a reason; a next link to another site is not followed.
func TestSignInRefusals(t *testing.T) {
	e := newEnv(t)
	b := e.browser()
	code, body, _ := b.post("/signin", url.Values{"token": {"ty_nope"}})
	if code != http.StatusUnauthorized || !strings.Contains(body, "not known") {
		t.Errorf("unknown token: %d", code)
	}
	if code, _, _ := b.post("/signin", url.Values{"token": {""}}); code != http.StatusBadRequest {
		t.Errorf("empty token: %d", code)
	}
	code, _, hdr := b.post("/signin", url.Values{"token": {e.admin}, "next": {"//evil.example/x"}})
	if code != http.StatusSeeOther || hdr.Get("Location") != "/jobs" {
		t.Errorf("next to another site: %d %q, want /jobs", code, hdr.Get("Location"))
	}
	code, _, _ = e.browser().post("/signin", url.Values{"token": {e.admin}}, "Sec-Fetch-Site", "cross-site")
	if code != http.StatusForbidden {
		t.Errorf("sign-in posted from another site: %d, want 403", code)
	}
}

// TestFormsNeedTheirToken: a post without the session's form token, with
// another session's, or from another site is refused and changes nothing.
func TestFormsNeedTheirToken(t *testing.T) {
	e := newEnv(t)
	j := e.submit(e.admin, fmt.Sprintf(spec, "keep", "default"))
	b := e.signIn(e.admin)
	other := e.signIn(e.admin)
	path := fmt.Sprintf("/jobs/%d/cancel", j.ID)
	for name, form := range map[string]url.Values{
		"no token":          {},
		"another session's": {"csrf": {other.csrf("/jobs")}},
		"a made-up one":     {"csrf": {"AAAA"}},
	} {
		if code, body, _ := b.post(path, form); code != http.StatusForbidden || !strings.Contains(body, "security token") {
			t.Errorf("%s: %d %q", name, code, body)
		}
	}
	if code, _, _ := b.post(path, url.Values{"csrf": {b.csrf("/jobs")}}, "Origin", "https://evil.example"); code != http.StatusForbidden {
		t.Errorf("from another origin: %d", code)
	}
	if d, _ := e.svc.Jobs.Show(t.Context(), adminP, j.ID); d.Job.State.Terminal() || d.Job.CancelRequested {
		t.Fatalf("a refused form changed the job: %s", d.Job.State)
	}
	if code, _, hdr := b.post(path, url.Values{"csrf": {b.csrf("/jobs")}}); code != http.StatusSeeOther || !strings.Contains(hdr.Get("Location"), "done=cancel") {
		t.Fatalf("cancel with the token: %d %q", code, hdr.Get("Location"))
	}
	if d, _ := e.svc.Jobs.Show(t.Context(), adminP, j.ID); d.Job.State != "canceled" {
		t.Errorf("after cancel: %s", d.Job.State)
	}
}

// TestSignInLinkWorksOnce: a token from `trainyard ui` signs in once; the
// page revokes it as soon as the session is made.
func TestSignInLinkWorksOnce(t *testing.T) {
	e := newEnv(t)
	e.user("alice", "member@vision")
	link, _, err := e.svc.Identity.CreateToken(t.Context(), adminP, service.TokenInput{User: "alice", Name: domain.SignInLinkToken, TTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	b := e.signIn(link)
	if code, body := b.get("/jobs"); code != http.StatusOK || !strings.Contains(body, "alice") {
		t.Fatalf("signed in by link: %d", code)
	}
	if code, _, _ := e.browser().post("/signin", url.Values{"token": {link}}); code != http.StatusUnauthorized {
		t.Errorf("the link signed in a second time: %d, want 401", code)
	}
}

// TestSignInTidiesSpentSessions: a sign-in deletes the user's web
// sessions that were signed out of or have expired, and keeps the
// user's other tokens, revoked ones too.
func TestSignInTidiesSpentSessions(t *testing.T) {
	clk := clock.NewFake(time.Now()) // the browser's cookie jar expires cookies by the real clock
	e := newEnvWith(t, func(c *service.Config) { c.Clock = clk }, defaultPool)
	alice := e.user("alice", "member@vision")
	ctx := t.Context()
	aliceP, err := e.svc.Identity.Authenticate(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	old, _, err := e.svc.Identity.CreateToken(ctx, adminP, service.TokenInput{User: "alice", Name: "laptop"})
	if err != nil {
		t.Fatal(err)
	}
	oldP, _ := e.svc.Identity.Authenticate(ctx, old)
	if _, err := e.svc.Identity.RevokeToken(ctx, aliceP, oldP.TokenID); err != nil {
		t.Fatal(err)
	}
	sessions := func() (web, other int) {
		toks, err := e.svc.Identity.ListTokens(ctx, aliceP, "", false)
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range toks {
			if tok.Name == domain.WebSessionToken {
				web++
			} else {
				other++
			}
		}
		return web, other
	}
	b := e.signIn(alice) // a session, then signed out of
	tok := b.csrf("/jobs")
	if code, _, _ := b.post("/signout", url.Values{"csrf": {tok}}); code != http.StatusSeeOther {
		t.Fatalf("sign out: %d", code)
	}
	e.signIn(alice) // a session that expires
	clk.Advance(13 * time.Hour)
	e.signIn(alice) // the session in use
	if web, other := sessions(); web != 1 || other != 2 {
		t.Errorf("after three sign-ins: %d web sessions, %d other tokens; want 1 (the live one) and 2 (alice's, and her revoked laptop token)", web, other)
	}
}
