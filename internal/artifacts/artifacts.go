// Package artifacts handles what jobs leave on disk: the manifest of an
// output directory (every file with its size and SHA-256), the complete
// checkpoints in its checkpoint directory, sealing a succeeded job's
// outputs and removing what retention lets go. The caller records what it
// finds. Everything below an output directory is the job's, and so
// untrusted: see Dir.
package artifacts

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"

	"trainyard/internal/domain"
)

// Manifest returns the manifest of the output directory dir (see
// Dir.Manifest); a missing directory has none.
func Manifest(dir string, skip ...string) ([]domain.ArtifactFile, error) {
	d, err := OpenDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list outputs in %s: %w", dir, err)
	}
	defer d.Close()
	return d.Manifest(skip...)
}

// Manifest returns every regular file below the directory, by path, with
// its size and SHA-256. Paths under any of skip (relative directory names,
// e.g. "checkpoints") are left out, and so is everything that is not a
// regular file: symbolic links (never followed), devices, fifos, sockets.
// Files are hashed by a few workers in parallel.
func (d *Dir) Manifest(skip ...string) ([]domain.ArtifactFile, error) {
	var files []domain.ArtifactFile
	err := d.walk(".", func(p string) bool { return slices.Contains(skip, p) }, func(p string, e fs.DirEntry) error {
		if e.Type().IsRegular() {
			files = append(files, domain.ArtifactFile{Path: p})
		}
		return nil
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("list outputs in %s: %w", d.Path(), err)
	}
	slices.SortFunc(files, func(a, b domain.ArtifactFile) int { return strings.Compare(a.Path, b.Path) })
	workers := min(max(runtime.GOMAXPROCS(0), 1), 8, max(len(files), 1))
	next := make(chan int)
	errs := make([]error, len(files))
	gone := make([]bool, len(files))
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 256<<10)
			for i := range next {
				f := &files[i]
				f.Size, f.SHA256, errs[i] = d.hashFile(f.Path, buf)
				if changed(errs[i]) {
					gone[i], errs[i] = true, nil // removed or replaced since listed
				}
			}
		}()
	}
	for i := range files {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("hash outputs in %s: %w", d.Path(), err)
	}
	kept := files[:0]
	for i, f := range files {
		if !gone[i] {
			kept = append(kept, f)
		}
	}
	return kept, nil
}

func (d *Dir) hashFile(name string, buf []byte) (int64, string, error) {
	f, _, err := d.Open(name)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, onlyReader{f}, buf)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// onlyReader hides the WriteTo of an *os.File, so that io.CopyBuffer
// reads through the buffer it is given instead of allocating its own.
type onlyReader struct{ io.Reader }

// MakeReadOnly removes write permission from every file and directory
// below dir (and dir itself) (see Dir.MakeReadOnly); a missing directory
// is left alone.
func MakeReadOnly(dir string) error {
	d, err := OpenDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer d.Close()
	return d.MakeReadOnly()
}

// MakeReadOnly removes write permission from every regular file and
// directory below the directory, and from the directory itself: a
// succeeded job's outputs are immutable. Symbolic links are neither
// followed nor changed, and neither are devices, fifos and sockets. Each
// file is changed through a handle opened on it after checking what it
// is, so a file replaced by a link meanwhile is passed over, not followed.
func (d *Dir) MakeReadOnly() error {
	return d.walk(".", nil, func(p string, e fs.DirEntry) error {
		if !e.Type().IsRegular() {
			return nil
		}
		err := d.chmodFile(p)
		if changed(err) {
			return nil
		}
		return err
	}, func(_ string, f *os.File) error {
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		return f.Chmod(fi.Mode().Perm() &^ 0o222)
	})
}

// chmodFile removes write permission from the regular file name.
func (d *Dir) chmodFile(name string) error {
	f, fi, err := d.Open(name)
	if errors.Is(err, fs.ErrPermission) {
		// Unreadable to the server: change it by name, after making sure
		// it is no link (the root keeps a link swapped in meanwhile inside
		// the directory).
		lfi, err := d.root.Lstat(name)
		if err != nil {
			return err
		}
		if !lfi.Mode().IsRegular() {
			return nil
		}
		return d.root.Chmod(name, lfi.Mode().Perm()&^0o222)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Chmod(fi.Mode().Perm() &^ 0o222)
}
