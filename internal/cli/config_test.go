package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigPath(t *testing.T) {
	tests := map[string]struct {
		vars map[string]string
		want string
	}{
		"XDG_CONFIG_HOME wins":                {map[string]string{"XDG_CONFIG_HOME": "/x/cfg", "HOME": "/home/u"}, "/x/cfg/trainyard/config.yaml"},
		"HOME/.config by default":             {map[string]string{"HOME": "/home/u"}, "/home/u/.config/trainyard/config.yaml"},
		"relative XDG_CONFIG_HOME is ignored": {map[string]string{"XDG_CONFIG_HOME": "rel", "HOME": "/home/u"}, "/home/u/.config/trainyard/config.yaml"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := configPath(func(k string) string { return tc.vars[k] }); got != tc.want {
				t.Errorf("configPath = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestWriteConfigPermissionsAndRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "trainyard")
	path := filepath.Join(dir, "config.yaml")
	if err := WriteConfig(path, "https://h:7070", "secret: with #chars", "/etc/trainyard/ca.pem"); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode = %v, want 0600", fi.Mode().Perm())
	}
	di, _ := os.Stat(dir)
	if di.Mode().Perm() != 0o700 {
		t.Errorf("dir mode = %v, want 0700", di.Mode().Perm())
	}
	fc, err := readConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if fc.Server != "https://h:7070" || fc.Token != "secret: with #chars" || fc.CAFile != "/etc/trainyard/ca.pem" {
		t.Errorf("read back %+v", fc)
	}

	// Replacing a too-open file leaves it 0600 and leaves no temp files.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteConfig(path, "http://other", "t2", ""); err != nil {
		t.Fatal(err)
	}
	fi, _ = os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("rewritten file mode = %v, want 0600", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("dir holds %d entries, want only config.yaml", len(entries))
	}
}

func TestWriteConfigReportsUnwritableDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err := WriteConfig(filepath.Join(file, "sub", "config.yaml"), "s", "t", "")
	if err == nil || !strings.Contains(err.Error(), "create config directory") {
		t.Errorf("err = %v, want a create-directory error", err)
	}
}

func TestConfigPrecedence(t *testing.T) {
	tests := map[string]struct {
		flagServer, flagToken string
		env                   map[string]string
		file                  string // config file body; "" = no file
		wantServer, wantToken string
	}{
		"defaults": {
			wantServer: DefaultServer,
		},
		"file": {
			file:       "server: http://file:1\ntoken: file-tok\n",
			wantServer: "http://file:1", wantToken: "file-tok",
		},
		"env beats file": {
			env:        map[string]string{EnvServer: "http://env:1", EnvToken: "env-tok"},
			file:       "server: http://file:1\ntoken: file-tok\n",
			wantServer: "http://env:1", wantToken: "env-tok",
		},
		"flag beats env and file": {
			flagServer: "http://flag:1", flagToken: "flag-tok",
			env:        map[string]string{EnvServer: "http://env:1", EnvToken: "env-tok"},
			file:       "server: http://file:1\ntoken: file-tok\n",
			wantServer: "http://flag:1", wantToken: "flag-tok",
		},
		"each key resolves on its own": {
			flagToken:  "flag-tok",
			file:       "server: http://file:1\ntoken: file-tok\n",
			wantServer: "http://file:1", wantToken: "flag-tok",
		},
		"unknown keys in the file are ignored": {
			file:       "server: http://file:1\nfuture: true\n",
			wantServer: "http://file:1",
		},
		"empty file": {
			file:       "\n",
			wantServer: DefaultServer,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfgHome := t.TempDir()
			vars := map[string]string{"XDG_CONFIG_HOME": cfgHome}
			for k, v := range tc.env {
				vars[k] = v
			}
			if tc.file != "" {
				p := filepath.Join(cfgHome, "trainyard", "config.yaml")
				_ = os.MkdirAll(filepath.Dir(p), 0o700)
				if err := os.WriteFile(p, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			e := defaultEnv()
			e.getenv = func(k string) string { return vars[k] }
			a := &app{env: e}
			a.flags.server, a.flags.token = tc.flagServer, tc.flagToken
			got, err := a.resolveConfig()
			if err != nil {
				t.Fatal(err)
			}
			if got.Server != tc.wantServer || got.Token != tc.wantToken {
				t.Errorf("config = %+v, want server %q token %q", got, tc.wantServer, tc.wantToken)
			}
		})
	}
}

func TestConfigFileUsedEndToEnd(t *testing.T) {
	h := newHarness(t)
	delete(h.vars, EnvServer)
	delete(h.vars, EnvToken)
	if err := WriteConfig(configPath(func(k string) string { return h.vars[k] }), h.srv.srv.URL, testToken, ""); err != nil {
		t.Fatal(err)
	}
	h.mustRun(0, "ls") // the fake rejects requests without the right token

	// --token on the command line beats the file.
	r := h.mustRun(ExitPermission, "ls", "--token", "bad")
	if !strings.Contains(r.stderr, "rejected the token") {
		t.Errorf("stderr = %q", r.stderr)
	}
	// --server beats the file too.
	r = h.mustRun(ExitUnavailable, "ls", "--server", "http://127.0.0.1:1")
	if !strings.Contains(r.stderr, "http://127.0.0.1:1 is not reachable") {
		t.Errorf("stderr = %q", r.stderr)
	}
}

func TestMalformedConfigFile(t *testing.T) {
	h := newHarness(t)
	delete(h.vars, EnvToken)
	p := configPath(func(k string) string { return h.vars[k] })
	_ = os.MkdirAll(filepath.Dir(p), 0o700)
	if err := os.WriteFile(p, []byte("server: [oops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := h.mustRun(1, "ls")
	if !strings.Contains(r.stderr, p) || !strings.Contains(r.stderr, "not valid YAML") {
		t.Errorf("stderr = %q, want the path and what is wrong", r.stderr)
	}
}
