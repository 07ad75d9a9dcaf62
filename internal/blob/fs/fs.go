// Package fs stores blobs as files under one root directory, the default
// backend. A key "a/b/c" is the file ROOT/a/b/c. Files are created 0o640 and
// directories 0o750. Every path is resolved through an os.Root, so neither a
// key nor a symbolic link planted under the root can reach outside it.
//
// Put writes to a temporary file in the target's directory, fsyncs it,
// renames it over the target and fsyncs the directory, so readers never see
// a partial object and a completed Put survives a crash. The SHA-256 is kept
// in the file's extended attribute "user.trainyard.sha256" where the file
// system supports it (Info.SHA256 is "" elsewhere).
//
// Unlike S3, a directory cannot also be a file: while "a/b" exists, Put of
// "a" fails (and the other way round). Delete removes directories left empty.
package fs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"iter"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"trainyard/internal/blob"
)

const (
	filePerm = 0o640
	dirPerm  = 0o750
)

// Store is a blob.Store on a local directory.
type Store struct {
	dir  string
	root *os.Root
}

var _ blob.Store = (*Store)(nil)

// New opens (creating it if missing, mode 0o750) the directory dir as a
// blob store. Call Close when done.
func New(dir string) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open blob directory %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, dirPerm); err != nil {
		return nil, fmt.Errorf("open blob directory: %w; check that the parent exists and is writable", err)
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, fmt.Errorf("open blob directory: %w", err)
	}
	return &Store{dir: abs, root: root}, nil
}

// Dir returns the absolute root directory.
func (s *Store) Dir() string { return s.dir }

// Close releases the root directory handle.
func (s *Store) Close() error { return s.root.Close() }

// Path returns the file that holds key (which need not exist).
func (s *Store) Path(key string) (string, error) {
	if err := blob.ValidateKey(key); err != nil {
		return "", err
	}
	return filepath.Join(s.dir, filepath.FromSlash(key)), nil
}

// Put implements blob.Store.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) (blob.Info, error) {
	if err := blob.ValidateKey(key); err != nil {
		return blob.Info{}, err
	}
	if size < -1 {
		return blob.Info{}, fmt.Errorf("put blob %q: size %d is invalid; pass the byte count or -1 when unknown", key, size)
	}
	dir := path.Dir(key)
	// A concurrent Delete may remove the freshly made directory before the
	// temporary file lands in it; try again a few times.
	var (
		tmp string
		f   *os.File
		err error
	)
	for range 5 {
		if dir != "." {
			if err = s.root.MkdirAll(dir, dirPerm); err != nil {
				if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EEXIST) {
					return blob.Info{}, fmt.Errorf("put blob %q: a parent of the key is itself a stored object; the filesystem backend cannot hold both: %w", key, err)
				}
				return blob.Info{}, fmt.Errorf("put blob %q: create directory: %w", key, err)
			}
		}
		tmp = path.Join(dir, blob.ReservedPrefix+randomName())
		f, err = s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, filePerm)
		if !errors.Is(err, iofs.ErrNotExist) {
			break
		}
	}
	if err != nil {
		return blob.Info{}, fmt.Errorf("put blob %q: create temporary file: %w", key, err)
	}
	done := false
	defer func() {
		if !done {
			f.Close()
			s.root.Remove(tmp)
		}
	}()
	hr := blob.NewHashingReader(ctx, key, r, size)
	if _, err := io.Copy(f, hr); err != nil {
		return blob.Info{}, fmt.Errorf("put blob %q: %w", key, err)
	}
	sum := hr.SHA256()
	if err := setSHA256(f, sum); err != nil && !errors.Is(err, errNoXattr) {
		return blob.Info{}, fmt.Errorf("put blob %q: record sha256: %w", key, err)
	}
	if err := f.Sync(); err != nil {
		return blob.Info{}, fmt.Errorf("put blob %q: fsync: %w", key, err)
	}
	st, err := f.Stat()
	if err != nil {
		return blob.Info{}, fmt.Errorf("put blob %q: %w", key, err)
	}
	if err := f.Close(); err != nil {
		return blob.Info{}, fmt.Errorf("put blob %q: close: %w", key, err)
	}
	if err := ctx.Err(); err != nil {
		return blob.Info{}, fmt.Errorf("put blob %q: %w", key, err)
	}
	if err := s.root.Rename(tmp, key); err != nil {
		if errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.ENOTEMPTY) {
			return blob.Info{}, fmt.Errorf("put blob %q: other keys start with %q; the filesystem backend cannot hold a key that is also a directory: %w", key, key+"/", err)
		}
		return blob.Info{}, fmt.Errorf("put blob %q: rename into place: %w", key, err)
	}
	done = true
	if err := s.syncDir(dir); err != nil {
		return blob.Info{}, fmt.Errorf("put blob %q: fsync directory: %w", key, err)
	}
	return blob.Info{Key: key, Size: hr.N(), SHA256: sum, ModTime: st.ModTime()}, nil
}

func (s *Store) syncDir(dir string) error {
	d, err := s.root.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// open opens key's regular file, mapping absence (and directories) to
// blob.ErrNotFound.
func (s *Store) open(key string) (*os.File, blob.Info, error) {
	if err := blob.ValidateKey(key); err != nil {
		return nil, blob.Info{}, err
	}
	f, err := s.root.Open(key)
	if err != nil {
		if errors.Is(err, iofs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil, blob.Info{}, blob.NotFound(key)
		}
		return nil, blob.Info{}, fmt.Errorf("open blob %q: %w", key, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, blob.Info{}, fmt.Errorf("open blob %q: %w", key, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, blob.Info{}, blob.NotFound(key)
	}
	sum, _ := getSHA256(f)
	return f, blob.Info{Key: key, Size: st.Size(), SHA256: sum, ModTime: st.ModTime()}, nil
}

// Get implements blob.Store.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, blob.Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, blob.Info{}, err
	}
	f, info, err := s.open(key)
	if err != nil {
		return nil, blob.Info{}, err
	}
	return f, info, nil
}

// GetRange implements blob.Store.
func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, blob.Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, blob.Info{}, err
	}
	f, info, err := s.open(key)
	if err != nil {
		return nil, blob.Info{}, err
	}
	n, err := blob.CheckRange(key, info.Size, offset, length)
	if err != nil {
		f.Close()
		return nil, blob.Info{}, err
	}
	return &sectionReadCloser{Reader: io.NewSectionReader(f, offset, n), f: f}, info, nil
}

type sectionReadCloser struct {
	io.Reader
	f *os.File
}

func (r *sectionReadCloser) Close() error { return r.f.Close() }

// Stat implements blob.Store.
func (s *Store) Stat(ctx context.Context, key string) (blob.Info, error) {
	if err := ctx.Err(); err != nil {
		return blob.Info{}, err
	}
	f, info, err := s.open(key)
	if err != nil {
		return blob.Info{}, err
	}
	f.Close()
	return info, nil
}

// Delete implements blob.Store. It also removes the key's parent directories
// that it leaves empty.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := blob.ValidateKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	st, err := s.root.Lstat(key)
	if err != nil {
		if errors.Is(err, iofs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil
		}
		return fmt.Errorf("delete blob %q: %w", key, err)
	}
	if !st.Mode().IsRegular() {
		return nil // a directory is no object
	}
	if err := s.root.Remove(key); err != nil && !errors.Is(err, iofs.ErrNotExist) {
		return fmt.Errorf("delete blob %q: %w", key, err)
	}
	for dir := path.Dir(key); dir != "."; dir = path.Dir(dir) {
		if s.root.Remove(dir) != nil { // not empty (or already gone): stop
			break
		}
	}
	return nil
}

// List implements blob.Store. It walks only the directories that can hold
// matching keys, ordering each directory's entries as the keys they lead to
// sort (a directory "a" as "a/"), so keys come out in byte order without
// collecting them first.
func (s *Store) List(ctx context.Context, prefix string) iter.Seq2[blob.Info, error] {
	return func(yield func(blob.Info, error) bool) {
		if err := blob.ValidatePrefix(prefix); err != nil {
			yield(blob.Info{}, err)
			return
		}
		dir := "."
		if i := strings.LastIndex(prefix, "/"); i >= 0 {
			dir = prefix[:i]
		}
		s.walk(ctx, dir, prefix, yield)
	}
}

// walk yields the objects under dir whose keys start with prefix; it returns
// false when the caller stopped or an error was yielded.
func (s *Store) walk(ctx context.Context, dir, prefix string, yield func(blob.Info, error) bool) bool {
	if err := ctx.Err(); err != nil {
		yield(blob.Info{}, err)
		return false
	}
	entries, err := iofs.ReadDir(s.root.FS(), dir)
	if err != nil {
		if errors.Is(err, iofs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return true // vanished, or a prefix naming no directory
		}
		yield(blob.Info{}, fmt.Errorf("list blobs with prefix %q: %w", prefix, err))
		return false
	}
	type entry struct {
		key   string
		isDir bool
	}
	var list []entry
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, blob.ReservedPrefix) {
			continue
		}
		key := name
		if dir != "." {
			key = dir + "/" + name
		}
		switch {
		case e.IsDir():
			// Descend only where keys can match prefix.
			if d := key + "/"; strings.HasPrefix(d, prefix) || strings.HasPrefix(prefix, d) {
				list = append(list, entry{key + "/", true})
			}
		case e.Type().IsRegular():
			if strings.HasPrefix(key, prefix) {
				list = append(list, entry{key, false})
			}
		}
	}
	slices.SortFunc(list, func(a, b entry) int { return strings.Compare(a.key, b.key) })
	for _, e := range list {
		if e.isDir {
			if !s.walk(ctx, strings.TrimSuffix(e.key, "/"), prefix, yield) {
				return false
			}
			continue
		}
		st, err := s.root.Lstat(e.key)
		if err != nil {
			if errors.Is(err, iofs.ErrNotExist) {
				continue // deleted while listing
			}
			yield(blob.Info{}, fmt.Errorf("list blobs with prefix %q: %w", prefix, err))
			return false
		}
		if !yield(blob.Info{Key: e.key, Size: st.Size(), ModTime: st.ModTime()}, nil) {
			return false
		}
	}
	return true
}

func randomName() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
