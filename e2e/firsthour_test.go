package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// On the embedded default (pool default from the inventory, no quotas: an
// open pool) a member granted into a brand-new project submits a plain
// spec (not preemptible) and it runs. Submitting without project: first
// says which project the member may use instead of only refusing.
func TestNewProjectMemberRunsPlainJob(t *testing.T) {
	s := startServer(t, serverOpts{})
	tok := s.member("researcher-a", "vision")
	spec := filepath.Join(repoRoot(), "examples", "smoke.yaml")
	s.as(tok, func() {
		_, errOut, code := s.cli("submit", spec)
		if code != 4 || !strings.Contains(errOut, "you may submit to project vision: set project: vision") {
			t.Fatalf("submit without project: exit %d, stderr %q; want exit 4 naming project vision", code, errOut)
		}
		out := s.mustCLI("submit", spec, "--set", "project=vision", "--set", "params.lr=0.1")
		id, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		if err != nil {
			t.Fatalf("submit printed %q, want a job id", out)
		}
		if j := s.waitState(id, 2*time.Minute, "succeeded", "failed", "canceled"); j.State != "succeeded" {
			t.Fatalf("job %d ended %s (%s): %s", id, j.State, j.Reason, j.Message)
		}
	})
}

// A second server with a data directory of its own, started by the same
// user, says that the CLI's config still points at the first and how to
// use the second.
func TestSecondServerSaysCLIConfigPointsElsewhere(t *testing.T) {
	s := startServer(t, serverOpts{defaults: true})
	// The first start wrote the CLI config into the shared HOME.
	if _, err := os.Stat(filepath.Join(s.dir, "home", ".config", "trainyard", "config.yaml")); err != nil {
		t.Fatalf("the first server wrote no CLI config: %v", err)
	}
	data2 := filepath.Join(jobReachableDir(t), "data")
	cmd := exec.Command(binary, "server", "--data", data2, "--listen", "127.0.0.1:0", "--config", s.config)
	env := []string{}
	for _, e := range s.env() {
		if !strings.HasPrefix(e, "TRAINYARD_") {
			env = append(env, e)
		}
	}
	cmd.Env = env
	var stderr syncWriter
	stderr.w = &bytes.Buffer{}
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	waitFor(t, 30*time.Second, "the second server's note on the CLI config", func() bool {
		return strings.Contains(stderrOf(&stderr), "its token is not this server's")
	})
	if out := stderrOf(&stderr); !strings.Contains(out, "export TRAINYARD_SERVER=http://127.0.0.1:") || !strings.Contains(out, filepath.Join(data2, "admin-token")) {
		t.Fatalf("the note does not say how to use the second server:\n%s", out)
	}
}

func stderrOf(w *syncWriter) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.(*bytes.Buffer).String()
}
