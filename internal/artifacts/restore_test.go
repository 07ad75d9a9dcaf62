package artifacts

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
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

// Replace moves a file into place over a regular file, and over nothing
// else: a link, a directory or a fifo at the target, or a link or file
// among the directories above it, is refused and left as it was, and
// nothing outside the tree is touched.
func TestReplaceOverRegularFilesOnly(t *testing.T) {
	out := t.TempDir()
	outside := t.TempDir()
	write(t, filepath.Join(outside, "victim"), "keep")
	write(t, filepath.Join(out, "a", "old"), "old")
	write(t, filepath.Join(out, "plain"), "p")
	if err := os.MkdirAll(filepath.Join(out, "a", "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"a/link": filepath.Join(outside, "victim"), "evil": outside} {
		if err := os.Symlink(target, filepath.Join(out, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(out, "a", "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(out)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	newFile := func(name, data string) {
		t.Helper()
		f, err := d.CreateFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(data)
		f.Close()
	}
	newFile("a/.tmp-1", "new")
	for to, want := range map[string]error{"a/link": ErrNotRegular, "a/dir": ErrNotRegular, "a/fifo": ErrNotRegular,
		"evil/victim": syscall.ENOTDIR, "plain/x": syscall.ENOTDIR} {
		if err := d.Replace("a/.tmp-1", to); !errors.Is(err, want) {
			t.Errorf("Replace onto %s: %v, want an error matching %v", to, err, want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "victim")); string(b) != "keep" {
		t.Fatalf("the file outside the tree was changed: %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(out, "a", "link")); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("the link at the target was not left as it was: %v %v", fi, err)
	}
	if err := d.Replace("a/link", "a/other"); !errors.Is(err, ErrNotRegular) {
		t.Errorf("Replace of a link: %v, want ErrNotRegular (a link is not moved into place)", err)
	}
	if err := d.Replace("a/.tmp-1", "a/old"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "a", "old")); string(b) != "new" {
		t.Errorf("a/old = %q after Replace, want new", b)
	}
	if _, err := os.Lstat(filepath.Join(out, "a", ".tmp-1")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the moved file is still at its temporary name: %v", err)
	}
	newFile("a/.tmp-2", "fresh")
	if err := d.Replace("a/.tmp-2", "a/fresh"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateFile("evil/x"); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("CreateFile through a link: %v, want an error matching ENOTDIR", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("the directory outside the tree holds %d entries, want only victim", len(ents))
	}
}
