// Package deploy holds the files that install Trainyard (a systemd unit, a
// container image, a Helm chart); its tests check them against the code
// they install.
package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The Dockerfile builds with the Go release go.mod asks for, statically,
// from files that exist, and runs as a non-root user with a health check
// on a route the server serves.
func TestDockerfile(t *testing.T) {
	df := read(t, filepath.Join("..", "Dockerfile"))
	gomod := read(t, filepath.Join("..", "go.mod"))
	want := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(gomod)
	if want == nil {
		t.Fatal("go.mod has no go directive")
	}
	if !strings.Contains(df, "FROM golang:"+want[1]+"-") {
		t.Errorf("the build stage does not use Go %s (go.mod)", want[1])
	}
	if n := strings.Count(df, "\nFROM "); n < 2 {
		t.Errorf("%d stages, want a build and a run stage", n)
	}
	for _, s := range []string{"CGO_ENABLED=0 go build", "./cmd/trainyard", "HEALTHCHECK", "/readyz"} {
		if !strings.Contains(df, s) {
			t.Errorf("the Dockerfile lacks %q", s)
		}
	}
	user := regexp.MustCompile(`(?m)^USER (\S+)`).FindAllStringSubmatch(df, -1)
	if len(user) == 0 || strings.HasPrefix(user[len(user)-1][1], "0") || strings.HasPrefix(user[len(user)-1][1], "root") {
		t.Errorf("the final stage must run as a non-root user; USER lines: %v", user)
	}
	if api := read(t, filepath.Join("..", "internal", "api", "api.go")); !strings.Contains(api, `"GET /readyz"`) {
		t.Error("the health check's /readyz is no longer a route")
	}
	for _, m := range regexp.MustCompile(`(?m)^COPY (?:--\S+ )*(\S+)`).FindAllStringSubmatch(df, -1) {
		if m[1] == "." || strings.HasPrefix(m[1], "/") {
			continue
		}
		if _, err := os.Stat(filepath.Join("..", m[1])); err != nil {
			t.Errorf("COPY %s: %v", m[1], err)
		}
	}
}

// The unit keeps running jobs alive across restarts and passes
// systemd-analyze verify where that is installed.
func TestSystemdUnit(t *testing.T) {
	path := filepath.Join("systemd", "trainyard.service")
	unit := read(t, path)
	for _, s := range []string{"KillMode=process", "StateDirectoryMode=0711", "ExecStart=/usr/local/bin/trainyard server "} {
		if !strings.Contains(unit, s) {
			t.Errorf("%s lacks %q", path, s)
		}
	}
	for _, s := range []string{"PrivateDevices=yes", "ProtectControlGroups=yes", "MemoryDenyWriteExecute=yes", "\nUser="} {
		if strings.Contains(unit, s) {
			t.Errorf("%s sets %q, which jobs would inherit or which breaks isolation; see its comments", path, strings.TrimSpace(s))
		}
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	// verify wants ExecStart's binary to exist.
	copyPath := filepath.Join(t.TempDir(), "trainyard.service")
	if err := os.WriteFile(copyPath, []byte(strings.ReplaceAll(unit, "/usr/local/bin/trainyard", "/bin/true")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(analyze, "verify", copyPath).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
