package e2e

import (
	"path/filepath"
	"strconv"
	"strings"
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
