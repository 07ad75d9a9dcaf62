package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"trainyard/internal/api/apitypes"
)

// templateFake is an in-memory stand-in for the template endpoints and
// POST /api/v1/jobs.
type templateFake struct {
	mu        sync.Mutex
	templates map[string][]apitypes.Template // "project/name" → versions
	creates   []apitypes.CreateTemplate
	submits   []apitypes.SubmitRequest
	requests  []string
}

func newTemplateHarness(t *testing.T) (*harness, *templateFake) {
	t.Helper()
	tf := &templateFake{templates: map[string][]apitypes.Template{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/templates", tf.create)
	mux.HandleFunc("GET /api/v1/templates", tf.list)
	mux.HandleFunc("GET /api/v1/templates/{name}", tf.get)
	mux.HandleFunc("POST /api/v1/jobs", tf.submit)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tf.mu.Lock()
		tf.requests = append(tf.requests, r.Method+" "+r.URL.RequestURI())
		tf.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			fail(w, http.StatusUnauthorized, "unauthorized", "invalid or missing token")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	h := &harness{t: t, srv: &fakeServer{t: t, srv: srv}, vars: map[string]string{
		EnvServer: srv.URL, EnvToken: testToken, "XDG_CONFIG_HOME": t.TempDir(), "NO_COLOR": "",
	}}
	return h, tf
}

func (tf *templateFake) create(w http.ResponseWriter, r *http.Request) {
	var req apitypes.CreateTemplate
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, 400, "invalid_request", err.Error())
		return
	}
	tf.mu.Lock()
	defer tf.mu.Unlock()
	tf.creates = append(tf.creates, req)
	if strings.Contains(req.Body, "TOKEN") {
		fail(w, 400, "invalid_template", "the template has 1 problem(s); fix them and create it again",
			apitypes.FieldError{Path: "env_vars.HF_TOKEN", Line: 3, Message: "looks like a credential"})
		return
	}
	if req.Project == "" {
		req.Project = "default"
	}
	key := req.Project + "/" + req.Name
	vs := tf.templates[key]
	created := len(vs) == 0 || vs[len(vs)-1].Body != req.Body
	if created {
		vs = append(vs, apitypes.Template{Project: req.Project, Name: req.Name, Version: len(vs) + 1, Body: req.Body,
			Vars: []apitypes.TemplateVar{{Name: "profile", Default: ptr("dev")}, {Name: "steps", Required: true}}, CreatedAt: testNow})
		tf.templates[key] = vs
	}
	out := vs[len(vs)-1]
	out.Created = &created
	reply(w, map[bool]int{true: 201, false: 200}[created], out)
}

func (tf *templateFake) list(w http.ResponseWriter, r *http.Request) {
	tf.mu.Lock()
	defer tf.mu.Unlock()
	out := apitypes.TemplateList{Templates: []apitypes.Template{}}
	for _, vs := range tf.templates {
		t := vs[len(vs)-1]
		t.Body = ""
		out.Templates = append(out.Templates, t)
	}
	reply(w, 200, out)
}

func (tf *templateFake) get(w http.ResponseWriter, r *http.Request) {
	tf.mu.Lock()
	defer tf.mu.Unlock()
	project := r.URL.Query().Get("project")
	if project == "" {
		project = "default"
	}
	vs := tf.templates[project+"/"+r.PathValue("name")]
	if len(vs) == 0 {
		fail(w, 404, "not_found", "no template is named "+r.PathValue("name"))
		return
	}
	t := vs[len(vs)-1]
	if v := r.URL.Query().Get("version"); v != "" {
		for _, c := range vs {
			if itoaInt(c.Version) == v {
				t = c
			}
		}
	}
	reply(w, 200, t)
}

func (tf *templateFake) submit(w http.ResponseWriter, r *http.Request) {
	var req apitypes.SubmitRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, 400, "invalid_request", err.Error())
		return
	}
	tf.mu.Lock()
	tf.submits = append(tf.submits, req)
	tf.mu.Unlock()
	reply(w, 201, apitypes.Job{ID: 7, Name: "run", State: "queued", Created: ptr(true)})
}

func itoaInt(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestTemplateCreateLsShow(t *testing.T) {
	h, tf := newTemplateHarness(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "run.tmpl.yaml")
	body := "vars: {profile: dev, steps: {}}\nname: run-${profile}\nentrypoint: [echo, \"${steps}\"]\n"
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	r := h.mustRun(0, "template", "create", "run", "-f", file, "--project", "vision")
	if r.stdout != "run@1\n" || !strings.Contains(r.stderr, "created template run@1 of project vision") {
		t.Errorf("create: stdout %q stderr %q", r.stdout, r.stderr)
	}
	r = h.mustRun(0, "template", "create", "run", "-f", file, "--project", "vision")
	if r.stdout != "run@1\n" || !strings.Contains(r.stderr, "already this file; no new version") {
		t.Errorf("identical create: stdout %q stderr %q", r.stdout, r.stderr)
	}
	if got := tf.creates[0]; got.Name != "run" || got.Project != "vision" || got.Body != body {
		t.Errorf("sent %+v", got)
	}
	h.stdin = body + "# v2\n"
	if r = h.mustRun(0, "template", "create", "run", "-f", "-", "-p", "vision"); r.stdout != "run@2\n" {
		t.Errorf("create from stdin: %q", r.stdout)
	}

	r = h.mustRun(0, "template", "ls")
	if !strings.Contains(r.stdout, "NAME") || !strings.Contains(r.stdout, "run") || !strings.Contains(r.stdout, "profile,steps*") {
		t.Errorf("ls:\n%s", r.stdout)
	}
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 2 || strings.Index(lines[1], "profile") != strings.Index(lines[0], "VARS") {
		t.Errorf("ls columns not aligned:\n%s", r.stdout)
	}
	r = h.mustRun(0, "template", "ls", "-o", "json")
	var list apitypes.TemplateList
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Templates) != 1 {
		t.Errorf("ls -o json: %q %v", r.stdout, err)
	}

	r = h.mustRun(0, "template", "show", "run@1", "--project", "vision")
	for _, want := range []string{"Template:  run@1", "Project:   vision", `"dev"`, "(required)", "---\n" + body} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, r.stdout)
		}
	}
	r = h.mustRun(0, "template", "show", "run", "-p", "vision", "-o", "yaml")
	if !strings.Contains(r.stdout, "version: 2") {
		t.Errorf("show -o yaml:\n%s", r.stdout)
	}
	if r = h.mustRun(2, "template", "show", "run@x"); !strings.Contains(r.stderr, "positive whole number") {
		t.Errorf("bad ref: %q", r.stderr)
	}
	if r = h.mustRun(ExitNotFound, "template", "show", "nope"); !strings.Contains(r.stderr, "no template is named nope") {
		t.Errorf("missing: %q", r.stderr)
	}
	if r = h.mustRun(2, "template", "create", "run"); !strings.Contains(r.stderr, "--file is required") {
		t.Errorf("no file: %q", r.stderr)
	}
	// A refused template prints every problem with its line and exits 2.
	if err := os.WriteFile(file, []byte("name: x\nentrypoint: [a]\nenv_vars: {HF_TOKEN: x}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = h.mustRun(2, "template", "create", "bad", "-f", file)
	if !strings.Contains(r.stderr, "env_vars.HF_TOKEN (line 3): looks like a credential") {
		t.Errorf("refused: %q", r.stderr)
	}
}

func TestSubmitTemplate(t *testing.T) {
	h, tf := newTemplateHarness(t)
	h.stdin = "vars: {profile: dev, steps: {}}\nname: run-${profile}\nentrypoint: [echo, \"${steps}\"]\n"
	h.mustRun(0, "template", "create", "run", "-f", "-", "-p", "vision")
	h.stdin = h.stdin + "# v2\n"
	h.mustRun(0, "template", "create", "run", "-f", "-", "-p", "vision")

	r := h.mustRun(0, "submit", "--template", "run", "-p", "vision", "--set", "profile=prod", "--set", "steps=5",
		"--set", "params.lr=0.2", "--set", "name=custom")
	if r.stdout != "7\n" {
		t.Errorf("stdout = %q", r.stdout)
	}
	got := tf.submits[len(tf.submits)-1]
	if got.Template != "run@2" || got.Project != "vision" || (len(got.Spec) != 0 && string(got.Spec) != "null") ||
		got.Vars["profile"] != "prod" || got.Vars["steps"] != "5" || len(got.Vars) != 2 ||
		strings.Join(got.Set, " ") != "params.lr=0.2 name=custom" {
		t.Errorf("submit request = %+v; want the version pinned, variables and overrides apart", got)
	}
	h.mustRun(0, "submit", "--template", "run@1", "-p", "vision", "--set", "steps=1")
	if got := tf.submits[len(tf.submits)-1]; got.Template != "run@1" {
		t.Errorf("pinned version: template = %q", got.Template)
	}

	n := len(tf.submits)
	for name, tc := range map[string]struct {
		args []string
		code int
		want string
	}{
		"typo":            {[]string{"submit", "--template", "run", "-p", "vision", "--set", "profle=prod"}, 2, `did you mean "profile"`},
		"file and tmpl":   {[]string{"submit", "x.yaml", "--template", "run"}, 2, "not both"},
		"project no tmpl": {[]string{"submit", "x.yaml", "--project", "vision"}, 2, "--project is for --template"},
		"no file":         {[]string{"submit"}, 2, "takes 1 argument"},
		"missing":         {[]string{"submit", "--template", "nope"}, ExitNotFound, "no template is named nope"},
	} {
		t.Run(name, func(t *testing.T) {
			r := h.mustRun(tc.code, tc.args...)
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr = %q, want %q", r.stderr, tc.want)
			}
		})
	}
	if len(tf.submits) != n {
		t.Errorf("refused submits reached the server: %+v", tf.submits[n:])
	}
}

// A relative workdir in a template file is made absolute against the
// file's directory, as submit does for spec files; only that value
// changes, on its own line, so the server's line numbers still match.
func TestTemplateWorkdirResolved(t *testing.T) {
	for name, tc := range map[string]struct{ in, want string }{
		"plain with comment":   {"name: x\nworkdir: .   # here\nentrypoint: [a]\n", "name: x\nworkdir: \"/srv/ex\"   # here\nentrypoint: [a]\n"},
		"quoted":               {"workdir: 'sub dir'\n", "workdir: \"/srv/ex/sub dir\"\n"},
		"absolute":             {"workdir: /opt/x\n", "workdir: /opt/x\n"},
		"variable":             {"workdir: ${dir}\n", "workdir: ${dir}\n"},
		"nested is no workdir": {"params: {workdir: .}\n", "params: {workdir: .}\n"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := string(resolveTemplateWorkdir([]byte(tc.in), "/srv/ex")); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
