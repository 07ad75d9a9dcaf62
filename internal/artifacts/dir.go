package artifacts

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
)

// CheckpointsDir is where a job's checkpoints live, under its outputs.
const CheckpointsDir = "checkpoints"

// ErrNotRegular says a path in a job's outputs is not a regular file (a
// symbolic link, a directory, a device, a fifo or a socket), or stopped
// being the file that was looked at.
var ErrNotRegular = errors.New("not a regular file")

// Dir is a job's output directory, opened so that whatever the job planted
// below it cannot lead the server elsewhere: every path is resolved inside
// it (os.Root), so neither symbolic links nor ".." leave it; files are read
// only when they are regular files and no links, and opened without
// blocking, so a fifo cannot hold the server; permissions are changed
// through an open handle, never through a link. The directory itself is
// trusted (the server made it); nothing below it is (the job wrote it).
type Dir struct {
	root *os.Root
}

// OpenDir opens the output directory dir. A missing directory is an error
// matching fs.ErrNotExist.
func OpenDir(dir string) (*Dir, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &Dir{root: r}, nil
}

// Close closes the directory; files opened through it stay open.
func (d *Dir) Close() error { return d.root.Close() }

// Path is the directory's path.
func (d *Dir) Path() string { return d.root.Name() }

// Join is the path on disk of name (slash-separated, relative to the
// directory), for messages and records; never open it directly.
func (d *Dir) Join(name string) string {
	return d.root.Name() + string(os.PathSeparator) + strings.ReplaceAll(path.Clean(name), "/", string(os.PathSeparator))
}

// Lstat describes name without following a final symbolic link.
func (d *Dir) Lstat(name string) (fs.FileInfo, error) { return d.root.Lstat(name) }

// Open opens name for reading when it is a regular file and not a symbolic
// link, and returns it with its information; anything else is an error
// matching ErrNotRegular. The caller closes the file.
func (d *Dir) Open(name string) (*os.File, fs.FileInfo, error) {
	lfi, err := d.root.Lstat(name)
	if err != nil {
		return nil, nil, err
	}
	if !lfi.Mode().IsRegular() {
		return nil, nil, &fs.PathError{Op: "open", Path: name, Err: ErrNotRegular}
	}
	// O_NONBLOCK: a fifo swapped in meanwhile opens at once (and is then
	// refused) instead of waiting for a writer.
	f, err := d.root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	if fi, ok := same(f, lfi); ok && fi.Mode().IsRegular() {
		return f, fi, nil
	}
	f.Close()
	return nil, nil, &fs.PathError{Op: "open", Path: name, Err: ErrNotRegular}
}

// openDir opens name when it is a directory and not a symbolic link.
func (d *Dir) openDir(name string) (*os.File, error) {
	lfi, err := d.root.Lstat(name)
	if err != nil {
		return nil, err
	}
	if !lfi.IsDir() {
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.ENOTDIR}
	}
	f, err := d.root.OpenFile(name, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if _, ok := same(f, lfi); !ok {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.ENOTDIR}
	}
	return f, nil
}

// same reports whether the opened f is the file lfi described (it was not
// replaced, by a link or otherwise, between the look and the open).
func same(f *os.File, lfi fs.FileInfo) (fs.FileInfo, bool) {
	fi, err := f.Stat()
	if err != nil {
		return nil, false
	}
	return fi, os.SameFile(fi, lfi)
}

// walk visits the tree below the directory name, depth first in lexical
// order: file gets the slash-separated path and entry of everything that
// is not a directory (links, fifos and the like included: the caller
// decides), and dirDone every directory once its contents are visited,
// opened. A directory for which skip returns true is not entered; one
// replaced by something else meanwhile is passed over.
func (d *Dir) walk(name string, skip func(string) bool, file func(string, fs.DirEntry) error, dirDone func(string, *os.File) error) error {
	f, err := d.openDir(name)
	if err != nil {
		return err
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return err
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range ents {
		p := path.Join(name, e.Name())
		if !e.IsDir() {
			if file != nil {
				if err := file(p, e); err != nil {
					return err
				}
			}
			continue
		}
		if skip != nil && skip(p) {
			continue
		}
		if err := d.walk(p, skip, file, dirDone); err != nil && !changed(err) {
			return err
		}
	}
	if dirDone != nil {
		return dirDone(name, f)
	}
	return nil
}

// changed reports whether err says a path is gone or is no longer what it
// was: the job (or gc) changed its tree meanwhile, which is not a failure.
func changed(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrNotRegular) || errors.Is(err, syscall.ENOTDIR)
}

// Files calls fn with every regular file at or below name (a file or a
// directory; slash-separated, relative to the directory), opened for
// reading, in lexical order. Everything else is left out: links, devices,
// fifos, sockets, and files that change type meanwhile.
func (d *Dir) Files(name string, fn func(name string, f *os.File, fi fs.FileInfo) error) error {
	lfi, err := d.root.Lstat(name)
	if err != nil {
		return err
	}
	visit := func(p string) error {
		f, fi, err := d.Open(p)
		if changed(err) {
			return nil
		}
		if err != nil {
			return err
		}
		defer f.Close()
		return fn(p, f, fi)
	}
	if !lfi.IsDir() {
		if !lfi.Mode().IsRegular() {
			return nil
		}
		return visit(path.Clean(name))
	}
	return d.walk(path.Clean(name), nil, func(p string, e fs.DirEntry) error {
		if !e.Type().IsRegular() {
			return nil
		}
		return visit(p)
	}, nil)
}

// kind names a file type for messages.
func kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// RemoveAll removes name and everything below it, first giving back the
// write permission that MakeReadOnly took from its parent and, for a
// directory, from the directories below it. A link is removed, never
// followed; a missing name is no error.
func (d *Dir) RemoveAll(name string) error {
	name = path.Clean(name)
	if name == "." || name == ".." || strings.HasPrefix(name, "../") || path.IsAbs(name) {
		return fmt.Errorf("remove %q: not a path below %s", name, d.Path())
	}
	if parent := path.Dir(name); parent != name {
		if f, err := d.openDir(parent); err == nil {
			if fi, err := f.Stat(); err == nil {
				_ = f.Chmod(fi.Mode().Perm() | 0o700)
			}
			f.Close()
		}
	}
	if fi, err := d.root.Lstat(name); err == nil && fi.IsDir() {
		var chmod func(string)
		chmod = func(dir string) {
			f, err := d.openDir(dir)
			if err != nil {
				return
			}
			defer f.Close()
			_ = f.Chmod(0o755)
			ents, _ := f.ReadDir(-1)
			for _, e := range ents {
				if e.IsDir() {
					chmod(path.Join(dir, e.Name()))
				}
			}
		}
		chmod(name)
	}
	return d.root.RemoveAll(name)
}
