package web_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor/local"
	"trainyard/internal/logs"
	"trainyard/internal/service"
	"trainyard/internal/store/sqlite"
	"trainyard/internal/web"
)

// env is the pages on a real service and SQLite store, with no control
// loop: submitted jobs stay queued unless a test moves them (through st,
// as the loop would).
type env struct {
	t     *testing.T
	srv   *httptest.Server
	svc   *service.Service
	st    *sqlite.Store
	admin string // the admin's API token
}

var adminP = service.Principal{Subject: "admin", Role: domain.RoleAdmin}

// defaultPool is the pool newEnv makes.
var defaultPool = domain.Pool{Name: "default", Borrowing: true, Nodes: []domain.Node{{Name: "n1", CPUs: 8, Memory: 32 << 30}}}

func newEnv(t *testing.T) *env { return newEnvWith(t, nil, defaultPool) }

// newEnvWith is newEnv with the service's config changed by tweak (nil:
// none) and pool as its one pool.
func newEnvWith(t *testing.T, tweak func(*service.Config), pool domain.Pool) *env {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	runs := filepath.Join(dir, "runs")
	cfg := service.Config{Store: st, ArtifactsRoot: filepath.Join(dir, "artifacts"), Logs: logs.Layout{Root: runs}, Files: local.NewReader(runs)}
	if tweak != nil {
		tweak(&cfg)
	}
	svc := service.New(cfg)
	token, err := svc.Identity.Bootstrap(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.Pools.PutPool(context.Background(), adminP, pool); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(web.Handler(web.Config{Service: svc, Live: 20 * time.Millisecond}))
	t.Cleanup(func() { srv.Close(); st.Close() })
	return &env{t: t, srv: srv, svc: svc, st: st, admin: token}
}

// user creates a user with roles ("member@vision", "auditor") and
// returns an API token of theirs.
func (e *env) user(name string, roles ...string) string {
	e.t.Helper()
	ctx := context.Background()
	if _, err := e.svc.Identity.CreateUser(ctx, adminP, name); err != nil {
		e.t.Fatal(err)
	}
	for _, r := range roles {
		role, project, _ := strings.Cut(r, "@")
		if _, err := e.svc.Identity.GrantRole(ctx, adminP, name, domain.RoleBinding{Role: domain.Role(role), Project: project}); err != nil {
			e.t.Fatal(err)
		}
	}
	secret, _, err := e.svc.Identity.CreateToken(ctx, adminP, service.TokenInput{User: name})
	if err != nil {
		e.t.Fatal(err)
	}
	return secret
}

// submit submits spec as the user of token.
func (e *env) submit(token, spec string) domain.Job {
	e.t.Helper()
	p, err := e.svc.Identity.Authenticate(context.Background(), token)
	if err != nil {
		e.t.Fatal(err)
	}
	j, _, err := e.svc.Jobs.Submit(context.Background(), p, service.SubmitInput{Doc: []byte(spec)})
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

// browser is a signed-in (or not) client with its own cookies.
type browser struct {
	e *env
	c *http.Client
}

func (e *env) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{e: e, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// signIn signs in with token and returns the browser; it fails the test
// unless the sign-in succeeds.
func (e *env) signIn(token string) *browser {
	e.t.Helper()
	b := e.browser()
	code, _, hdr := b.post("/signin", url.Values{"token": {token}, "next": {"/jobs"}})
	if code != http.StatusSeeOther || hdr.Get("Location") != "/jobs" {
		e.t.Fatalf("sign in: %d, Location %q", code, hdr.Get("Location"))
	}
	return b
}

func (b *browser) get(path string) (int, string) {
	b.e.t.Helper()
	resp, err := b.c.Get(b.e.srv.URL + path)
	if err != nil {
		b.e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (b *browser) post(path string, form url.Values, header ...string) (int, string, http.Header) {
	b.e.t.Helper()
	req, _ := http.NewRequest("POST", b.e.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf reads the form token from a page the browser is shown.
func (b *browser) csrf(path string) string {
	b.e.t.Helper()
	_, body := b.get(path)
	m := csrfRe.FindStringSubmatch(body)
	if m == nil {
		b.e.t.Fatalf("no form token on %s", path)
	}
	return m[1]
}

const spec = `name: %s
project: %s
entrypoint: ["true"]
resources: {cpus: 1}
`
