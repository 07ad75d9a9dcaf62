package artifacts

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
)

// Writing into a job's tree: the server restores a checkpoint there from
// the object store before an attempt resumes from it. The job may have
// planted links and traps anywhere below the directory, so nothing is
// followed and nothing already there is replaced.

// local checks that name is a clean path strictly below the directory.
func local(name string) (string, error) {
	c := path.Clean(name)
	if name == "" || c == "." || path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%q is not a path below %s", name, "the output directory")
	}
	return c, nil
}

// CreateFile creates the regular file name (slash-separated, relative to
// the directory) and returns it open for writing, making the directories
// above it that are missing. Each directory and the file are given the
// owner of the directory they are made in, where the server may (a job
// run as its project's user can then replace what was restored). Nothing
// is followed or replaced: a directory on the way that is a link or no
// directory, or name already there, is an error.
func (d *Dir) CreateFile(name string) (*os.File, error) {
	name, err := local(name)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(name, "/")
	dir := "."
	for _, p := range parts[:len(parts)-1] {
		next := path.Join(dir, p)
		fi, err := d.root.Lstat(next)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := d.root.Mkdir(next, 0o755); err != nil {
				return nil, err
			}
			d.ownLike(dir, next)
		case err != nil:
			return nil, err
		case !fi.IsDir():
			return nil, fmt.Errorf("create %s: %w", d.Join(name), &KindError{Path: next, Kind: kind(fi.Mode()), Want: "directory"})
		}
		dir = next
	}
	// O_EXCL: a link (dangling or not) or anything else in its place is
	// refused, never followed or truncated.
	f, err := d.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, err
	}
	d.ownLike(dir, name)
	return f, nil
}

// KindError says that a path is not of the kind it must be: one on the
// way to a file being written is no directory (a symbolic link, a
// regular file…), or what a file would replace is no regular file.
// Nothing is written through it or over it. It matches syscall.ENOTDIR
// or ErrNotRegular, as Want says.
type KindError struct {
	Path string // slash-separated, relative to the directory
	Kind string // what it is: "symbolic link", "directory"…
	Want string // what it must be: "directory" or "regular file"
}

func (e *KindError) Error() string { return e.Path + " is a " + e.Kind + ", not a " + e.Want }

// Is makes a *KindError match syscall.ENOTDIR (Want "directory") or
// ErrNotRegular (Want "regular file").
func (e *KindError) Is(target error) bool {
	return e.Want == "directory" && target == syscall.ENOTDIR || e.Want == "regular file" && target == ErrNotRegular
}

// ownLike gives name the owner of the directory dir, where the server may.
func (d *Dir) ownLike(dir, name string) {
	fi, err := d.root.Lstat(dir)
	if err != nil {
		return
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		_ = d.root.Lchown(name, int(st.Uid), int(st.Gid))
	}
}

// Rename moves from to to, both below the directory: a link at from is
// moved, not followed. Something already at to is an error, never
// replaced.
func (d *Dir) Rename(from, to string) error {
	from, err := local(from)
	if err != nil {
		return err
	}
	if to, err = local(to); err != nil {
		return err
	}
	if _, err := d.root.Lstat(to); err == nil {
		return fmt.Errorf("rename to %s: %w", d.Join(to), fs.ErrExist)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return d.root.Rename(from, to)
}

// Replace moves the regular file from to to, both below the directory,
// replacing the regular file at to in one step (rename(2)): a reader sees
// the old file or the new one, never part of either. What is at to must
// be a regular file or nothing; anything else there (a symbolic link, a
// directory, a fifo…) is an error matching ErrNotRegular, a directory
// above to that is a link or no directory one matching syscall.ENOTDIR,
// and nothing is followed: a link put at to meanwhile is itself replaced.
func (d *Dir) Replace(from, to string) error {
	from, err := local(from)
	if err != nil {
		return err
	}
	if to, err = local(to); err != nil {
		return err
	}
	fi, err := d.root.Lstat(from)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("replace %s: %w", d.Join(to), &KindError{Path: from, Kind: kind(fi.Mode()), Want: "regular file"})
	}
	parts := strings.Split(to, "/")
	for i := 1; i < len(parts); i++ {
		dir := strings.Join(parts[:i], "/")
		fi, err := d.root.Lstat(dir)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("replace %s: %w", d.Join(to), &KindError{Path: dir, Kind: kind(fi.Mode()), Want: "directory"})
		}
	}
	if fi, err := d.root.Lstat(to); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("replace %s: %w", d.Join(to), &KindError{Path: to, Kind: kind(fi.Mode()), Want: "regular file"})
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return d.root.Rename(from, to)
}
