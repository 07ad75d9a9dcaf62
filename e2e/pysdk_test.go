package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The Python SDK installs with pip from sdk/python into a fresh venv
// without network access, and its client submits, waits for, streams the
// logs of, cancels and reads the metrics of jobs on a real server
// (testdata/sdk_client.py). Without python3's venv module it is skipped,
// except in CI (CI=true), where it fails.
func TestPythonSDKPackage(t *testing.T) {
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command("python3", "-m", "venv", venv).CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("python3 -m venv: %v\n%s", err, out)
		}
		t.Skipf("python3 -m venv is not available (%v); install python3-venv", err)
	}
	pip := exec.Command(filepath.Join(venv, "bin", "pip"), "install", "--no-index", "--no-cache-dir",
		"--disable-pip-version-check", filepath.Join("..", "sdk", "python"))
	pip.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PIP_NO_INPUT=1")
	if out, err := pip.CombinedOutput(); err != nil {
		t.Fatalf("pip install ./sdk/python: %v\n%s", err, out)
	}

	s := startServer(t, serverOpts{})
	home := t.TempDir()
	marker := filepath.Join(jobReachableDir(t), "go")
	script, err := filepath.Abs(filepath.Join("testdata", "sdk_client.py"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(venv, "bin", "python"), script, marker,
		filepath.Join(s.dir, "home", ".config", "trainyard", "config.yaml"), filepath.Join(repoRoot(), "examples", "smoke.yaml"))
	cmd.Dir = home // not sdk/python: the installed package must be the one imported
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"PYTHONDONTWRITEBYTECODE=1", "TRAINYARD_SERVER=" + s.url, "TRAINYARD_TOKEN=" + s.token}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "OK\n") {
		t.Fatalf("sdk_client.py: %v\n%s", err, out)
	}
}
