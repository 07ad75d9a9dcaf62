package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// An environment's check runs once per version on a node: later jobs in
// the same version skip it (their log, show and why say so), a new version
// runs its own.
func TestEnvironmentCheckRunsOncePerVersion(t *testing.T) {
	s := startServer(t, serverOpts{})
	bin := filepath.Join(s.dir, "envbin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// The check counts its runs in a file the test owns, outside every job's
	// directories (writable by the jobs' users when they are isolated).
	counter := filepath.Join(s.dir, "check-runs")
	if err := os.WriteFile(counter, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(counter, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "ty-count-check"), []byte("#!/bin/sh\necho ran >> "+counter+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	runs := func() int {
		b, err := os.ReadFile(counter)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), "\n")
	}
	s.mustCLI("env", "register", "counted", "--path-prefix", bin, "--check", "ty-count-check")
	var ids []string
	for i := range 3 {
		j := s.submit("name: counted-" + strconv.Itoa(i) + "\nenv: counted@1\nentrypoint: [\"true\"]\n")
		if got := s.waitState(j.ID, time.Minute, "succeeded", "failed"); got.State != "succeeded" {
			t.Fatalf("job %d ended %s (%s): %s", j.ID, got.State, got.Reason, got.Message)
		}
		ids = append(ids, strconv.FormatInt(j.ID, 10))
	}
	if n := runs(); n != 1 {
		t.Fatalf("the check ran %d times for 3 jobs in counted@1; want once", n)
	}
	const note = "environment check counted@1 passed on node "
	if show := s.mustCLI("show", ids[2]); !strings.Contains(show, note) || !strings.Contains(show, "not run again until") {
		t.Errorf("show of a job that skipped its check does not say so:\n%s", show)
	}
	if logs := s.mustCLI("logs", ids[2], "--timestamps"); !strings.Contains(logs, note) { // a system line
		t.Errorf("the log of a job that skipped its check does not say so:\n%s", logs)
	}
	if why := s.mustCLI("why", ids[1]); !strings.Contains(why, "skipped its environment check: "+note) {
		t.Errorf("why of a job that skipped its check does not say so:\n%s", why)
	}
	if show := s.mustCLI("show", ids[0]); strings.Contains(show, note) {
		t.Errorf("show of the job that ran the check says it skipped it:\n%s", show)
	}

	// A new version runs its own check.
	s.mustCLI("env", "register", "counted", "--path-prefix", bin, "--check", "ty-count-check", "--var", "V=2")
	j := s.submit("name: counted-v2\nenv: counted@2\nentrypoint: [\"true\"]\n")
	if got := s.waitState(j.ID, time.Minute, "succeeded", "failed"); got.State != "succeeded" {
		t.Fatalf("job in counted@2 ended %s (%s): %s", got.State, got.Reason, got.Message)
	}
	if n := runs(); n != 2 {
		t.Errorf("the check ran %d times in all after a new version; want 2", n)
	}
}
