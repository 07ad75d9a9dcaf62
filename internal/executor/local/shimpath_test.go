package local

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"trainyard/internal/executor/local/cgroup"
)

func TestFindShim(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "trainyard")
	shim := filepath.Join(dir, ShimBinary)
	write := func(script string, mode os.FileMode) {
		t.Helper()
		os.Remove(shim) // WriteFile keeps an existing file's mode
		if err := os.WriteFile(shim, []byte(script), mode); err != nil {
			t.Fatal(err)
		}
	}
	fallback := []string{self, "shim"}

	if cmd, why := FindShim(self); !slices.Equal(cmd, fallback) || !strings.Contains(why, "no trainyard-shim beside") {
		t.Errorf("missing shim: got %q, %q; want the fallback and why", cmd, why)
	}
	write("#!/bin/sh\necho \""+protocolLine()+"\"\n", 0o755)
	if cmd, why := FindShim(self); !slices.Equal(cmd, []string{shim}) || why != "" {
		t.Errorf("matching shim: got %q, %q; want %q", cmd, why, shim)
	}
	write("#!/bin/sh\necho \""+ShimBinary+" protocol 0\"\n", 0o755)
	if cmd, why := FindShim(self); !slices.Equal(cmd, fallback) || !strings.Contains(why, "another build") {
		t.Errorf("other protocol: got %q, %q; want the fallback", cmd, why)
	}
	write("#!/bin/sh\nexit 3\n", 0o755)
	if cmd, _ := FindShim(self); !slices.Equal(cmd, fallback) {
		t.Errorf("failing shim: got %q; want the fallback", cmd)
	}
	write("#!/bin/sh\necho \""+protocolLine()+"\"\n", 0o644)
	if cmd, why := FindShim(self); !slices.Equal(cmd, fallback) || !strings.Contains(why, "not an executable") {
		t.Errorf("not executable: got %q, %q; want the fallback", cmd, why)
	}
}

// The standalone binary and "trainyard shim" run the same entry point; the
// protocol answer is what FindShim checks.
func TestShimMainAnswersProtocol(t *testing.T) {
	if got := ShimMain([]string{protocolFlag}); got != 0 {
		t.Fatalf("ShimMain(--protocol) = %d, want 0", got)
	}
}

// The claim carries the port and the planned groups; an attempt of an
// earlier version, whose claim has only the shim, has them in files of
// their own.
func TestClaimRecord(t *testing.T) {
	dir := t.TempDir()
	plan, err := cgroup.Layout{Track: &cgroup.Hierarchy{Version: cgroup.V2, Mount: "/m", Parent: "/m/trainyard"}}.Plan("7-1-42", cgroup.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := claimRecord{Shim: procID{PID: 42, Start: 99}, Port: 29517, Cgroups: plan}
	if err := claim(dir, want); err != nil {
		t.Fatal(err)
	}
	if err := claim(dir, want); !errors.Is(err, os.ErrExist) {
		t.Fatalf("second claim: %v, want ErrExist", err)
	}
	got, err := readClaim(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Shim != want.Shim || got.Port != want.Port || got.Cgroups == nil || !slices.Equal(got.Cgroups.Dirs(), plan.Dirs()) {
		t.Fatalf("readClaim = %+v, want %+v", got, want)
	}
	if id, err := readProcID(filepath.Join(dir, shimPIDFile)); err != nil || id != want.Shim {
		t.Fatalf("readProcID of a claim = %v, %v", id, err)
	}

	old := t.TempDir()
	os.WriteFile(filepath.Join(old, shimPIDFile), []byte("42 99\n"), 0o600)
	os.WriteFile(filepath.Join(old, legacyPortFile), []byte("29518\n"), 0o600)
	b, _ := json.Marshal(plan)
	os.WriteFile(filepath.Join(old, legacyCgroupFile), b, 0o600)
	got, err = readClaim(old)
	if err != nil || got.Port != 29518 || got.Cgroups == nil || got.Cgroups.Name != "7-1-42" {
		t.Fatalf("legacy readClaim = %+v, %v", got, err)
	}
	if _, err := readClaim(t.TempDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("readClaim of an unclaimed attempt: %v, want ErrNotExist", err)
	}
}
