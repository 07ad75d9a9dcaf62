package fs_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trainyard/internal/blob"
	"trainyard/internal/blob/blobtest"
	"trainyard/internal/blob/fs"
)

func newStore(t *testing.T) *fs.Store {
	t.Helper()
	s, err := fs.New(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	blobtest.Exercise(t, func(t *testing.T) blobtest.Fixture {
		s := newStore(t)
		return blobtest.Fixture{Store: s, Corrupt: func(t *testing.T, key string) {
			p, err := s.Path(key)
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var b [1]byte
			if _, err := f.ReadAt(b[:], 0); err != nil {
				t.Fatal(err)
			}
			b[0] ^= 0xff
			if _, err := f.WriteAt(b[:], 0); err != nil {
				t.Fatal(err)
			}
		}}
	})
}

func TestPermissionsAndLayout(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	if _, err := s.Put(ctx, "p/q/obj", strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	if info, err := s.Stat(ctx, "p/q/obj"); err != nil || info.SHA256 != "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881" {
		t.Errorf("Stat = %+v, %v; want the recorded sha256 of \"x\"", info, err)
	}
	for rel, want := range map[string]os.FileMode{"p": 0o750, "p/q": 0o750, "p/q/obj": 0o640} {
		st, err := os.Stat(filepath.Join(s.Dir(), rel))
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != want {
			t.Errorf("%s has mode %o; want %o", rel, got, want)
		}
	}
	entries, err := os.ReadDir(filepath.Join(s.Dir(), "p/q"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "obj" {
		t.Errorf("p/q holds %v; want only obj (no temporary files left)", entries)
	}
	if err := s.Delete(ctx, "p/q/obj"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "p")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Delete left the empty directory p behind (stat err %v)", err)
	}
}

func TestSymlinkEscape(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("outside"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(s.Dir(), "link")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, "link/secret"); err == nil {
		t.Errorf("Get through a symlink leading out of the root succeeded")
	}
	if _, err := s.Put(ctx, "link/new", strings.NewReader("x"), 1); err == nil {
		t.Errorf("Put through a symlink leading out of the root succeeded")
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Put wrote outside the root")
	}
}

func TestDirectoryConflict(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	if _, err := s.Put(ctx, "a/b", strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "a", strings.NewReader("x"), 1); err == nil || !strings.Contains(err.Error(), "also a directory") {
		t.Errorf("Put of a key that is a directory: err = %v; want an explanation", err)
	}
	if _, err := s.Put(ctx, "a/b/c", strings.NewReader("x"), 1); err == nil || !strings.Contains(err.Error(), "parent of the key") {
		t.Errorf("Put under a stored object: err = %v; want an explanation", err)
	}
	if _, err := s.Stat(ctx, "a"); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Stat of a directory: err = %v; want ErrNotFound", err)
	}
	if got, _ := io.ReadAll(must(s.Get(ctx, "a/b"))); !bytes.Equal(got, []byte("x")) {
		t.Errorf("a/b changed after the failed Puts: %q", got)
	}
}

func must(rc io.ReadCloser, _ blob.Info, err error) io.Reader {
	if err != nil {
		panic(err)
	}
	return rc
}

func BenchmarkPutGet256MiB(b *testing.B) {
	s, err := fs.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	blobtest.BenchmarkPutGet(b, s, 256<<20)
}
