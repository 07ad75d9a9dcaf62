package local

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
