// Package artifacts reads what jobs leave on disk: the manifest of an output
// directory (every file with its size and SHA-256) and the complete
// checkpoints in a checkpoint directory. It only reads; the caller records
// what it finds.
package artifacts

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"trainyard/internal/domain"
)

// Manifest walks dir and returns every regular file below it, by path, with
// its size and SHA-256. Paths under any of skip (relative directory names,
// e.g. "checkpoints") are left out; symbolic links are not followed. Files
// are hashed by a few workers in parallel.
func Manifest(dir string, skip ...string) ([]domain.ArtifactFile, error) {
	var files []domain.ArtifactFile
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path == dir {
				return fs.SkipAll
			}
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if slices.Contains(skip, rel) {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		files = append(files, domain.ArtifactFile{Path: rel})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list outputs in %s: %w", dir, err)
	}
	slices.SortFunc(files, func(a, b domain.ArtifactFile) int { return strings.Compare(a.Path, b.Path) })
	workers := min(max(runtime.GOMAXPROCS(0), 1), 8, max(len(files), 1))
	next := make(chan int)
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 256<<10)
			for i := range next {
				f := &files[i]
				f.Size, f.SHA256, errs[i] = hashFile(filepath.Join(dir, filepath.FromSlash(f.Path)), buf)
			}
		}()
	}
	for i := range files {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("hash outputs in %s: %w", dir, err)
	}
	return files, nil
}

func hashFile(path string, buf []byte) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, f, buf)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// Found is one checkpoint in a checkpoint directory.
type Found struct {
	Name     string
	Path     string
	Complete bool // a file, or a directory holding domain.CheckpointMarker
	Size     int64
	Files    int
	ModTime  time.Time
}

// Checkpoints lists the checkpoints in dir, oldest first (by modification
// time, then name). Hidden entries and names ending in .tmp are being
// written and are left out; a directory is complete once it holds
// domain.CheckpointMarker.
func Checkpoints(dir string) ([]Found, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list checkpoints in %s: %w", dir, err)
	}
	var out []Found
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".tmp") {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		c := Found{Name: name, Path: filepath.Join(dir, name), ModTime: fi.ModTime()}
		switch {
		case fi.Mode().IsRegular():
			c.Complete, c.Size, c.Files = true, fi.Size(), 1
		case fi.IsDir():
			if m, err := os.Stat(filepath.Join(c.Path, domain.CheckpointMarker)); err == nil && m.Mode().IsRegular() {
				c.Complete = true
				c.ModTime = m.ModTime()
			}
			c.Size, c.Files = dirSize(c.Path)
		default:
			continue
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Found) int {
		if c := a.ModTime.Compare(b.ModTime); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

func dirSize(dir string) (size int64, files int) {
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			size += fi.Size()
			files++
		}
		return nil
	})
	return size, files
}

// MakeReadOnly removes write permission from every file and directory
// below dir (and dir itself): a succeeded job's outputs are immutable.
func MakeReadOnly(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		if d.IsDir() {
			dirs = append(dirs, path) // after their contents
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return os.Chmod(path, fi.Mode().Perm()&^0o222)
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		fi, err := os.Stat(dirs[i])
		if err != nil {
			return err
		}
		if err := os.Chmod(dirs[i], fi.Mode().Perm()&^0o222); err != nil {
			return err
		}
	}
	return nil
}
