package artifacts

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// Restoring into a hostile tree writes below it or not at all: links on
// the way, at the file, or at the rename's target are never followed or
// replaced.
func TestCreateFileAndRenameStayInTheTree(t *testing.T) {
	out := t.TempDir()
	outside := t.TempDir()
	write(t, filepath.Join(outside, "victim"), "keep")
	if err := os.MkdirAll(filepath.Join(out, "checkpoints"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{
		"checkpoints/out":     outside,
		"checkpoints/victim":  filepath.Join(outside, "victim"),
		"checkpoints/dangle":  filepath.Join(outside, "new"),
		"checkpoints/taken/x": "", // a plain file below: the rename target is taken
	} {
		if target == "" {
			write(t, filepath.Join(out, name), "x")
			continue
		}
		if err := os.Symlink(target, filepath.Join(out, name)); err != nil {
			t.Fatal(err)
		}
	}
	d, err := OpenDir(out)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, name := range []string{"checkpoints/out/new", "checkpoints/victim", "checkpoints/dangle", "../escape", "/abs", "."} {
		if f, err := d.CreateFile(name); err == nil {
			f.Close()
			t.Errorf("CreateFile(%q) succeeded; want it refused", name)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "victim")); string(b) != "keep" {
		t.Fatalf("the file outside the tree was changed: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(outside, "new")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a file was created outside the tree through a dangling link: %v", err)
	}
	f, err := d.CreateFile("checkpoints/.restore-step/a/b/state")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("s"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := d.Rename("checkpoints/.restore-step", "checkpoints/taken"); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("rename onto something there: %v, want fs.ErrExist", err)
	}
	if err := d.Rename("checkpoints/.restore-step", "checkpoints/step"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(out, "checkpoints", "step", "a", "b", "state")); err != nil || string(b) != "s" {
		t.Fatalf("restored file = %q, %v", b, err)
	}
}
