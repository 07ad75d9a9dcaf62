package main

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trainyard/internal/domain"
)

func TestJobIsolationModes(t *testing.T) {
	root := os.Geteuid() == 0
	data := t.TempDir()
	for _, c := range []struct {
		cfg      serverConfig
		isolated bool   // when running as root
		err      string // when not empty: the error holds it
	}{
		{cfg: serverConfig{}, isolated: root},
		{cfg: serverConfig{Isolation: "auto"}, isolated: root},
		{cfg: serverConfig{Isolation: "off"}},
		{cfg: serverConfig{Isolation: "sometimes"}, err: "not a mode"},
		{cfg: serverConfig{Isolation: "required", JobUIDs: "5-"}, err: "job_uids"},
	} {
		c.cfg.Data = data
		var logs bytes.Buffer
		iso, status, err := jobIsolation(c.cfg, slog.New(slog.NewTextHandler(&logs, nil)))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: %v, want an error about %q", c.cfg.Isolation, err, c.err)
			}
			if !root && c.cfg.Isolation == "required" && err == nil {
				t.Error("required without root started")
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.cfg.Isolation, err)
			continue
		}
		if (iso != nil) != c.isolated {
			t.Errorf("%q: isolated %v, want %v", c.cfg.Isolation, iso != nil, c.isolated)
		}
		if iso == nil && (status != notIsolated || !strings.Contains(logs.String(), notIsolated)) {
			t.Errorf("%q: status %q, log %q; want both to say %q", c.cfg.Isolation, status, logs.String(), notIsolated)
		}
	}
	if !root {
		if _, _, err := jobIsolation(serverConfig{Isolation: "required", Data: data}, quiet); err == nil || !strings.Contains(err.Error(), "root") {
			t.Errorf("required without root: %v, want a refusal naming root", err)
		}
	}
}

func TestProtectDataDir(t *testing.T) {
	data := t.TempDir()
	runs, blobs := filepath.Join(data, "runs"), filepath.Join(data, "blobs")
	os.MkdirAll(blobs, 0o755)
	for _, f := range []string{"trainyard.db", "trainyard.db-wal", "admin-token"} {
		os.WriteFile(filepath.Join(data, f), []byte("x"), 0o644)
	}
	outside := filepath.Join(t.TempDir(), "outside")
	os.WriteFile(outside, []byte("x"), 0o644)
	os.Symlink(outside, filepath.Join(data, "link"))
	artifacts := filepath.Join(t.TempDir(), "artifacts")
	if err := protectDataDir(data, runs, artifacts); err != nil {
		t.Fatal(err)
	}
	want := map[string]os.FileMode{data: 0o711, runs: 0o711, artifacts: 0o711, blobs: 0o700,
		filepath.Join(data, "trainyard.db"): 0o600, filepath.Join(data, "trainyard.db-wal"): 0o600, filepath.Join(data, "admin-token"): 0o600}
	for p, m := range want {
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm() != m {
			t.Errorf("%s: mode %v (%v), want %v", p, st.Mode().Perm(), err, m)
		}
	}
	if st, _ := os.Stat(outside); st.Mode().Perm() != 0o644 {
		t.Errorf("a symlink in the data directory was followed: its target is now %v", st.Mode().Perm())
	}
}

// A data or artifacts directory under a directory only its owner may pass
// (root's home) is refused at start with the way out: every job would
// otherwise fail at its first write with a bare permission error.
func TestJobsMustReachDataDirectory(t *testing.T) {
	base, err := os.MkdirTemp("", "trainyard-reach-") // t.TempDir's parent is closed
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	closed := filepath.Join(base, "home")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(closed, "trainyard")
	err = checkJobsReach(data)
	if err == nil || !errors.Is(err, domain.ErrInvalid) || !strings.Contains(err.Error(), closed+" (mode 0700)") || !strings.Contains(err.Error(), "--data") {
		t.Fatalf("checkJobsReach(%s) = %v; want an invalid-config error naming %s and --data", data, err, closed)
	}
	if err := os.Chmod(closed, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := checkJobsReach(data); err != nil {
		t.Fatalf("checkJobsReach with a passable parent: %v", err)
	}
}
