package local

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestOpenLaunchFile: a batch job's supervisor reads its launch record
// once and removes it; a link, a FIFO or a directory in its place is
// refused at once, never followed or waited on.
func TestOpenLaunchFile(t *testing.T) {
	dir := t.TempDir()
	rec := filepath.Join(dir, "launch.json")
	if err := os.WriteFile(rec, []byte(`{"argv":["true"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := openLaunchFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := os.Lstat(rec); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the launch record is still there after it was opened: %v", err)
	}

	secret := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(secret, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	traps := map[string]func(string) error{
		"link":      func(p string) error { return os.Symlink(secret, p) },
		"fifo":      func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"directory": func(p string) error { return os.Mkdir(p, 0o700) },
	}
	for name, make := range traps {
		p := filepath.Join(dir, name)
		if err := make(p); err != nil {
			t.Fatal(err)
		}
		if f, err := openLaunchFile(p); err == nil {
			f.Close()
			t.Errorf("%s in the launch record's place was opened", name)
		}
	}
	if _, err := os.Stat(secret); err != nil {
		t.Errorf("the link's target was removed: %v", err)
	}
}
