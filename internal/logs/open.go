package logs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// The supervisor writes an attempt's files, but the attempt's process runs
// in the same directory tree (its working directory is WorkDir): the
// server opens them as if the job could have replaced any of them by a
// link or a fifo. Open reads inside the layout's root only (os.Root: no
// link or ".." leads out of it), never through a link as the file itself,
// regular files only, and without waiting on a fifo.

// Open opens the file name (e.g. "output.log") of one attempt's directory
// for reading. A missing file is an error matching fs.ErrNotExist.
func (l Layout) Open(jobID int64, attempt int, name string) (*os.File, error) {
	return l.open(filepath.Join(strconv.FormatInt(jobID, 10), strconv.Itoa(attempt), name))
}

// OpenLog opens the log of one attempt for reading (see Open).
func (l Layout) OpenLog(jobID int64, attempt int) (*os.File, error) {
	return l.Open(jobID, attempt, logName)
}

// logName is the log's file name in its attempt directory.
const logName = "output.log"

// open opens rel, relative to the root, as Open does.
func (l Layout) open(rel string) (*os.File, error) {
	root, err := os.OpenRoot(l.Root)
	if err != nil {
		return nil, err
	}
	defer root.Close() // the file stays open
	lfi, err := root.Lstat(rel)
	if err != nil {
		return nil, err
	}
	if !lfi.Mode().IsRegular() {
		return nil, notRegular(filepath.Join(l.Root, rel))
	}
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	// The file opened must be the one looked at, not a link put in its
	// place meanwhile.
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || !os.SameFile(fi, lfi) {
		f.Close()
		return nil, notRegular(filepath.Join(l.Root, rel))
	}
	return f, nil
}

// OpenFile opens the log at path for reading: a regular file, not a link,
// opened without waiting on a fifo.
func OpenFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, notRegular(path)
	}
	return f, nil
}

func notRegular(path string) error {
	return &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("not a regular file")}
}
