package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

// An environment's PATH prefix makes its programs runnable by name; the
// job's snapshot records the pinned version; a deprecated version is
// refused at submit; a failing check ends the attempt before the
// entrypoint starts, without retries.
func TestEnvironments(t *testing.T) {
	s := startServer(t, serverOpts{})

	// A fresh install has the built-in host@1, and jobs default to it.
	if ls := s.mustCLI("env", "ls"); !strings.Contains(ls, "host@1") {
		t.Fatalf("env ls on a fresh install lacks host@1:\n%s", ls)
	}
	// A directory with a program that only the environment puts on PATH.
	bin := filepath.Join(s.dir, "toolchain", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "ty-env-tool"), []byte("#!/bin/sh\necho \"tool ran with TOOL_MODE=$TOOL_MODE\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ref := strings.TrimSpace(s.mustCLI("env", "register", "toolchain", "--path-prefix", bin,
		"--var", "TOOL_MODE=fast", "--description", "a toolchain"))
	if ref != "toolchain@1" {
		t.Fatalf("env register printed %q, want toolchain@1", ref)
	}
	// Registering the same definition again adds no version.
	if again := strings.TrimSpace(s.mustCLI("env", "register", "toolchain", "--path-prefix", bin, "--var", "TOOL_MODE=fast")); again != "toolchain@1" {
		t.Errorf("registering the same definition printed %q, want toolchain@1", again)
	}

	job := s.submit("name: uses-tool\nenv: toolchain@1\nentrypoint: [ty-env-tool]\n")
	if j := s.waitState(job.ID, time.Minute, "succeeded", "failed"); j.State != "succeeded" {
		t.Fatalf("job in toolchain@1 ended %s (%s): %s", j.State, j.Reason, j.Message)
	}
	id := strconv.FormatInt(job.ID, 10)
	if logs := s.mustCLI("logs", id); !strings.Contains(logs, "tool ran with TOOL_MODE=fast") {
		t.Errorf("the job's log lacks the tool's output:\n%s", logs)
	}
	var spec struct {
		Env string `json:"env"`
	}
	if err := json.Unmarshal(s.job(job.ID).Spec, &spec); err != nil || spec.Env != "toolchain@1" {
		t.Errorf("the job's snapshot has env %q (%v), want toolchain@1", spec.Env, err)
	}
	// A job without env runs in host, recorded as host@1.
	plain := s.submit("name: plain\nentrypoint: [\"true\"]\n")
	if err := json.Unmarshal(s.job(plain.ID).Spec, &spec); err != nil || spec.Env != "host@1" {
		t.Errorf("a job without env has env %q (%v), want host@1", spec.Env, err)
	}

	// Deprecated: refused at submit, with the reason and the way out.
	s.mustCLI("env", "register", "toolchain", "--path-prefix", bin, "--var", "TOOL_MODE=safe")
	if out := s.mustCLI("env", "deprecate", "toolchain@1", "--reason", "CVE in base image"); !strings.Contains(out, "deprecated: CVE in base image") {
		t.Errorf("env deprecate printed %q", out)
	}
	specFile := filepath.Join(s.dir, "old-env.yaml")
	if err := os.WriteFile(specFile, []byte("name: old-env\nenv: toolchain@1\nentrypoint: [ty-env-tool]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := s.cli("submit", specFile)
	want := "env: environment toolchain@1 is deprecated (reason: CVE in base image); use toolchain@2, or see trainyard env ls"
	if code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("submit with a deprecated env: exit %d, stderr:\n%s\nwant it to contain %q", code, errOut, want)
	}
	if show := s.mustCLI("env", "show", "toolchain@1"); !strings.Contains(show, "deprecated: CVE in base image") {
		t.Errorf("env show of the deprecated version:\n%s", show)
	}

	// A failing check: the attempt fails before the entrypoint, no retry.
	s.mustCLI("env", "register", "broken", "--path-prefix", bin, "--check", "false")
	marker := filepath.Join(s.dir, "entrypoint-ran")
	bad := s.submit("name: bad-env\nenv: broken@1\nentrypoint: [touch, " + marker + "]\npolicy: {reentrant: true, retries: 2}\n")
	j := s.waitState(bad.ID, time.Minute, "succeeded", "failed")
	if j.State != "failed" || j.Reason != "EnvironmentCheckFailed" || !strings.Contains(j.Message, "environment check `false` exited with code 1") {
		t.Fatalf("job in broken@1 = %s %s %q; want failed EnvironmentCheckFailed with the check's exit code", j.State, j.Reason, j.Message)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the entrypoint ran although the check failed (stat: %v)", err)
	}
	if full := s.job(bad.ID); len(full.Attempts) != 1 || full.Attempts[0].StartedAt != nil {
		t.Errorf("attempts = %+v; want one that never started (no retry of a failed check)", full.Attempts)
	}
	badID := strconv.FormatInt(bad.ID, 10)
	why := s.mustCLI("why", badID)
	if !strings.Contains(why, "environment-check-failed") || !strings.Contains(why, "environment broken@1 failed its check") {
		t.Errorf("why does not name the class:\n%s", why)
	}
	var w apitypes.Why
	if err := json.Unmarshal([]byte(s.mustCLI("why", "-o", "json", badID)), &w); err != nil || w.Class != "environment-check-failed" {
		t.Errorf("why -o json class = %q (%v)", w.Class, err)
	}
}
