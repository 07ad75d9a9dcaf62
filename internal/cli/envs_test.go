package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

func TestSplitCommand(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    []string
		wantErr string
	}{
		"words":           {in: "false", want: []string{"false"}},
		"spaces":          {in: "  a   b\tc ", want: []string{"a", "b", "c"}},
		"double quotes":   {in: `python3 -c "import torch; print(1)"`, want: []string{"python3", "-c", "import torch; print(1)"}},
		"single quotes":   {in: `sh -c 'echo "$X"'`, want: []string{"sh", "-c", `echo "$X"`}},
		"backslash":       {in: `a\ b c`, want: []string{"a b", "c"}},
		"escaped in \"\"": {in: `echo "a\"b"`, want: []string{"echo", `a"b`}},
		"empty quotes":    {in: `x ""`, want: []string{"x", ""}},
		"unterminated":    {in: `echo "a`, wantErr: "unterminated"},
		"empty":           {in: "  ", wantErr: "empty"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := splitCommand(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("splitCommand(%q) = %q, %v; want an error with %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("splitCommand(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

// envFake serves the environment endpoints from memory.
type envFake struct {
	mu        sync.Mutex
	envs      []apitypes.Env
	registers []apitypes.RegisterEnv
	deprecate []string // "name/version reason"
}

func newEnvHarness(t *testing.T) (*harness, *envFake) {
	t.Helper()
	ef := &envFake{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/envs", func(w http.ResponseWriter, r *http.Request) {
		var req apitypes.RegisterEnv
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			fail(w, 400, "invalid", err.Error())
			return
		}
		ef.mu.Lock()
		defer ef.mu.Unlock()
		ef.registers = append(ef.registers, req)
		created := true
		e := apitypes.Env{Name: req.Name, Version: len(ef.registers), Ref: req.Name + "@" + string(rune('0'+len(ef.registers))),
			Image: req.Image, PathPrefix: req.PathPrefix, Vars: req.Vars, Check: req.Check, Created: &created}
		ef.envs = append(ef.envs, e)
		reply(w, 201, e)
	})
	mux.HandleFunc("GET /api/v1/envs", func(w http.ResponseWriter, r *http.Request) {
		ef.mu.Lock()
		defer ef.mu.Unlock()
		reply(w, 200, apitypes.EnvList{Envs: ef.envs})
	})
	mux.HandleFunc("GET /api/v1/envs/{name}", func(w http.ResponseWriter, r *http.Request) {
		ef.mu.Lock()
		defer ef.mu.Unlock()
		var out []apitypes.Env
		for _, e := range ef.envs {
			if e.Name == r.PathValue("name") {
				out = append(out, e)
			}
		}
		if out == nil {
			fail(w, 404, "not_found", "no environment is named "+r.PathValue("name"))
			return
		}
		reply(w, 200, apitypes.EnvList{Envs: out})
	})
	mux.HandleFunc("POST /api/v1/envs/{name}/{version}/deprecate", func(w http.ResponseWriter, r *http.Request) {
		var req apitypes.DeprecateEnv
		_ = json.NewDecoder(r.Body).Decode(&req)
		ef.mu.Lock()
		defer ef.mu.Unlock()
		ef.deprecate = append(ef.deprecate, r.PathValue("name")+"/"+r.PathValue("version")+" "+req.Reason)
		reply(w, 200, apitypes.EnvList{Envs: []apitypes.Env{{Name: r.PathValue("name"), Ref: r.PathValue("name") + "@" + r.PathValue("version"),
			Deprecated: true, DeprecatedReason: req.Reason}}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	h := &harness{t: t, srv: &fakeServer{t: t, srv: srv}, vars: map[string]string{
		EnvServer: srv.URL, EnvToken: testToken, "XDG_CONFIG_HOME": t.TempDir(), "NO_COLOR": ""}}
	return h, ef
}

func TestEnvRegisterFromFlagsAndFile(t *testing.T) {
	h, ef := newEnvHarness(t)
	r := h.mustRun(0, "env", "register", "pytorch", "--image", "reg/torch:2.4", "--path-prefix", "/opt/a/bin",
		"--path-prefix", "/opt/b/bin", "--var", "A=1", "--var", "B=x=y", "--check", `python3 -c "import torch"`)
	if r.stdout != "pytorch@1\n" || !strings.Contains(r.stderr, "registered environment pytorch@1") {
		t.Errorf("stdout %q, stderr %q", r.stdout, r.stderr)
	}
	file := filepath.Join(t.TempDir(), "env.yaml")
	doc := "image: reg/torch:2.5\npath_prefix: [/opt/f/bin]\nvars: {A: file, C: \"3\"}\ncheck: [sh, -c, 'exit 0']\ndescription: from a file\n"
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	h.mustRun(0, "env", "register", "pytorch", "-f", file, "--var", "A=flag", "--path-prefix", "/opt/g/bin")
	h.mustRun(0, "env", "register", "other", "-f", "-", "--image", "reg/other:1")
	ef.mu.Lock()
	regs := slices.Clone(ef.registers)
	ef.mu.Unlock()
	if len(regs) != 3 {
		t.Fatalf("%d registrations, want 3", len(regs))
	}
	first := regs[0]
	if first.Image != "reg/torch:2.4" || !slices.Equal(first.PathPrefix, []string{"/opt/a/bin", "/opt/b/bin"}) ||
		first.Vars["A"] != "1" || first.Vars["B"] != "x=y" || !slices.Equal(first.Check, []string{"python3", "-c", "import torch"}) {
		t.Errorf("from flags: %+v", first)
	}
	second := regs[1]
	if second.Image != "reg/torch:2.5" || !slices.Equal(second.PathPrefix, []string{"/opt/f/bin", "/opt/g/bin"}) ||
		second.Vars["A"] != "flag" || second.Vars["C"] != "3" || !slices.Equal(second.Check, []string{"sh", "-c", "exit 0"}) ||
		second.Description != "from a file" {
		t.Errorf("from a file with flags: %+v", second)
	}
	if regs[2].Name != "other" || regs[2].Image != "reg/other:1" {
		t.Errorf("from empty stdin: %+v", regs[2])
	}
	// Bad input is a usage error, sent nowhere.
	for _, args := range [][]string{
		{"env", "register", "x", "--var", "NOEQUALS"},
		{"env", "register", "x", "--check", `echo "open`},
		{"env", "register", "x", "-f", filepath.Join(t.TempDir(), "missing.yaml")},
	} {
		h.mustRun(ExitUsage, args...)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("imgae: typo\n"), 0o644)
	if r := h.mustRun(ExitUsage, "env", "register", "x", "-f", bad); !strings.Contains(r.stderr, "imgae") {
		t.Errorf("unknown field in file: %q", r.stderr)
	}
}

func TestEnvLsShowDeprecate(t *testing.T) {
	h, ef := newEnvHarness(t)
	created := testNow.Add(-2 * time.Hour)
	ef.envs = []apitypes.Env{
		{Name: "host", Version: 1, Ref: "host@1", CreatedAt: created},
		{Name: "pytorch", Version: 1, Ref: "pytorch@1", Image: "reg/torch:2.4", PathPrefix: []string{"/opt/a", "/opt/b"},
			Vars: map[string]string{"Z": "1", "A": "2"}, Check: []string{"python3", "-c", "import torch"}, CreatedAt: created,
			Deprecated: true, DeprecatedReason: "CVE"},
		{Name: "pytorch", Version: 2, Ref: "pytorch@2", Image: "reg/torch:2.5", CreatedAt: created, Digest: "sha256:abc"},
	}
	r := h.mustRun(0, "env", "ls")
	for _, want := range []string{"REF", "host@1", "pytorch@1", "/opt/a:/opt/b", "A,Z", "python3 -c 'import torch'", "deprecated: CVE", "pytorch@2"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("env ls lacks %q:\n%s", want, r.stdout)
		}
	}
	var list apitypes.EnvList
	if err := json.Unmarshal([]byte(h.mustRun(0, "env", "ls", "-o", "json").stdout), &list); err != nil || len(list.Envs) != 3 {
		t.Errorf("env ls -o json: %+v, %v", list, err)
	}
	// NAME alone shows the latest version.
	r = h.mustRun(0, "env", "show", "pytorch")
	if !strings.Contains(r.stdout, "Environment: pytorch@2") || !strings.Contains(r.stdout, "Digest:      sha256:abc") {
		t.Errorf("env show pytorch:\n%s", r.stdout)
	}
	h.mustRun(ExitUsage, "env", "show", "pytorch@x")
	if r := h.mustRun(ExitUsage, "env", "deprecate", "pytorch"); !strings.Contains(r.stderr, "--all") {
		t.Errorf("deprecate without a version: %q", r.stderr)
	}
	if r := h.mustRun(0, "env", "deprecate", "pytorch@2", "--reason", "broken CUDA"); r.stdout != "pytorch@2\tdeprecated: broken CUDA\n" {
		t.Errorf("deprecate printed %q", r.stdout)
	}
	h.mustRun(0, "env", "deprecate", "pytorch", "--all")
	ef.mu.Lock()
	defer ef.mu.Unlock()
	if !slices.Equal(ef.deprecate, []string{"pytorch/2 broken CUDA", "pytorch/all "}) {
		t.Errorf("deprecate requests = %q", ef.deprecate)
	}
}
