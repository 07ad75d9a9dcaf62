package e2e

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// A held job stays out of scheduling while capacity frees and later jobs
// run past it; released, it runs. Both are audited and explained.
func TestHoldAndRelease(t *testing.T) {
	s := startServer(t, serverOpts{cpus: 1})
	blocker := s.submit("name: blocker\nresources: {cpus: 1}\nentrypoint: [sleep, '300']\n")
	s.waitState(blocker.ID, 30*time.Second, "running")
	held := s.submit("name: held\nresources: {cpus: 1}\nentrypoint: [true]\n")
	id := strconv.FormatInt(held.ID, 10)

	if out := s.mustCLI("hold", id, "--reason", "waiting for data"); !strings.Contains(out, "held job "+id) {
		t.Errorf("hold printed %q", out)
	}
	if j := s.job(held.ID); j.State != "held" || j.Reason != "Held" || !strings.Contains(j.Message, "waiting for data") {
		t.Fatalf("after hold: %s %s %q, want held (Held) with the reason", j.State, j.Reason, j.Message)
	}
	s.mustCLI("hold", id) // again: nothing changes
	if out := s.mustCLI("why", id); !strings.Contains(out, "trainyard release "+id) {
		t.Errorf("why of a held job does not say how to release it:\n%s", out)
	}

	// Capacity frees and a later job runs past the held one.
	s.mustCLI("cancel", strconv.FormatInt(blocker.ID, 10))
	later := s.submit("name: later\nresources: {cpus: 1}\nentrypoint: [true]\n")
	if j := s.waitState(later.ID, 30*time.Second, "succeeded", "failed"); j.State != "succeeded" {
		t.Fatalf("later job %s: %s", j.State, j.Message)
	}
	if j := s.job(held.ID); j.State != "held" || len(j.Attempts) != 0 {
		t.Fatalf("held job while capacity was free: %s with %d attempts, want held without one", j.State, len(j.Attempts))
	}

	// A running or finished job cannot be held; the error says why.
	_, errOut, code := s.cli("hold", strconv.FormatInt(later.ID, 10))
	if code == 0 || !strings.Contains(errOut, "only a queued job can be held") {
		t.Errorf("hold of a finished job: exit %d, %q", code, errOut)
	}

	if out := s.mustCLI("release", id); !strings.Contains(out, "released job "+id) {
		t.Errorf("release printed %q", out)
	}
	if j := s.waitState(held.ID, 30*time.Second, "succeeded", "failed"); j.State != "succeeded" {
		t.Fatalf("released job %s: %s", j.State, j.Message)
	}
	_, errOut, code = s.cli("release", id)
	if code == 0 || !strings.Contains(errOut, "not held") {
		t.Errorf("release of a finished job: exit %d, %q", code, errOut)
	}

	audit := s.mustCLI("audit", "ls", "--action", "job.hold")
	if n := strings.Count(audit, "job/"+id); n != 2 {
		t.Errorf("audit of job.hold names job %s %d times, want 2 (hold, release):\n%s", id, n, audit)
	}
	events := s.mustCLI("show", id)
	for _, want := range []string{"queued → held", "held → queued"} {
		if !strings.Contains(events, want) {
			t.Errorf("show %s does not list the transition %q:\n%s", id, want, events)
		}
	}
}
