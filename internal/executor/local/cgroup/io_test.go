package cgroup

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestGroupTree: every directory below, each after its parent; files and
// links (even to directories) are not groups.
func TestGroupTree(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"a/b/c", "a/d", "e"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "a", "cgroup.procs"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "e"), filepath.Join(root, "a", "link")); err != nil {
		t.Fatal(err)
	}
	got, err := groupTree(root)
	if err != nil {
		t.Fatal(err)
	}
	var rel []string
	for _, d := range got {
		r, _ := filepath.Rel(root, d)
		rel = append(rel, r)
	}
	want := []string{".", "a", "a/b", "a/b/c", "a/d", "e"}
	if !slices.Equal(slices.Sorted(slices.Values(rel)), want) {
		t.Errorf("groupTree = %v, want %v in some order", rel, want)
	}
	for i, d := range rel {
		if p := filepath.Dir(d); d != "." && slices.Index(rel, p) > i {
			t.Errorf("%s listed before its parent %s: %v", d, p, rel)
		}
	}
	if got, err := groupTree(filepath.Join(root, "gone")); err != nil || len(got) != 0 {
		t.Errorf("groupTree of a missing group = %v, %v; want none", got, err)
	}
}

// TestFileIO: writeFile never creates a file; readFile reads a file whole,
// beyond its first buffer.
func TestFileIO(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "memory.max")
	if err := writeFile(missing, []byte("1")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("writeFile of a missing file = %v, want ErrNotExist", err)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Error("writeFile created the file")
	}
	p := filepath.Join(dir, "cgroup.procs")
	if err := os.WriteFile(p, []byte("old contents that are longer"), 0o644); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("12345\n", 1000)
	if err := writeFile(p, []byte(long)); err != nil {
		t.Fatal(err)
	}
	b, err := readFile(p)
	if err != nil || string(b) != long {
		t.Errorf("readFile = %d bytes, %v; want the %d written", len(b), err, len(long))
	}
}
