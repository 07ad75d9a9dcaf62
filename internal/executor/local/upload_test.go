package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"trainyard/internal/executor"
)

// The reader makes the output tree of a job that runs elsewhere, and
// writes into it as an executor.Writer: a file is moved into place over a
// regular file, and a link the job planted on the way is an error
// matching executor.ErrNotDir, never followed.
func TestOutputsWriter(t *testing.T) {
	ctx := context.Background()
	files := NewReader(filepath.Join(t.TempDir(), "runs"))
	dir := filepath.Join(t.TempDir(), "artifacts", "default", "m", "7")
	if _, err := files.Outputs(ctx, dir); err == nil {
		t.Fatal("Outputs opened a tree that does not exist")
	}
	c, ok := files.(executor.OutputsCreator)
	if !ok {
		t.Fatal("the local reader is no executor.OutputsCreator")
	}
	o, err := c.CreateOutputs(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	w, ok := o.(executor.Writer)
	if !ok {
		t.Fatal("the local outputs are no executor.Writer")
	}
	put := func(tmp, to, data string) error {
		t.Helper()
		f, err := w.CreateFile(ctx, tmp)
		if err != nil {
			return err
		}
		f.Write([]byte(data))
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		return w.Replace(ctx, tmp, to)
	}
	for _, data := range []string{"one", "two"} {
		if err := put("a/b/.tmp-x", "a/b/c", data); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "a", "b", "c")); string(b) != data {
			t.Errorf("a/b/c = %q, want %q", b, data)
		}
	}
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "evil")); err != nil {
		t.Fatal(err)
	}
	if err := put("evil/.tmp-x", "evil/x", "x"); !errors.Is(err, executor.ErrNotDir) {
		t.Errorf("writing through a link: %v, want executor.ErrNotDir", err)
	}
	if err := put("a/.tmp-y", "a/b", "x"); !errors.Is(err, executor.ErrNotRegular) {
		t.Errorf("replacing a directory: %v, want executor.ErrNotRegular", err)
	}
	if err := put("a/b/c/.tmp-z", "a/b/c/d", "x"); !errors.Is(err, executor.ErrNotDir) {
		t.Errorf("writing below a file: %v, want executor.ErrNotDir", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("%d entries written outside the tree", len(ents))
	}
	if o2, err := c.CreateOutputs(ctx, dir); err != nil {
		t.Errorf("CreateOutputs of a tree already there: %v", err)
	} else {
		o2.Close()
	}
}
