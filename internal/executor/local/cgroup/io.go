package cgroup

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Cgroup and proc files are read and written with plain system calls, not
// through os.File: the runtime would register each (kernfs and proc files
// are pollable) with its poller and switch it to non-blocking mode and
// back, four more system calls for every file, on the path that every
// attempt's start and end takes several times per hierarchy.

// writeFile writes b to the existing file path in one write(2). A file
// that does not exist is not created.
func writeFile(path string, b []byte) error {
	fd, err := openFile(path, unix.O_WRONLY|unix.O_TRUNC)
	if err != nil {
		return err
	}
	var n int
	for {
		n, err = unix.Write(fd, b)
		if err != unix.EINTR {
			break
		}
	}
	cerr := closeFile(fd)
	switch {
	case err != nil:
		return &fs.PathError{Op: "write", Path: path, Err: err}
	case n < len(b):
		return &fs.PathError{Op: "write", Path: path, Err: io.ErrShortWrite}
	case cerr != nil:
		return &fs.PathError{Op: "close", Path: path, Err: cerr}
	}
	return nil
}

// maxRead bounds what readFile reads: cgroup.procs of a group with many
// processes is the largest file read here.
const maxRead = 16 << 20

// readFile reads the file path whole.
func readFile(path string) ([]byte, error) {
	fd, err := openFile(path, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer closeFile(fd)
	b := make([]byte, 0, 512)
	for {
		if len(b) == cap(b) {
			if len(b) >= maxRead {
				return nil, &fs.PathError{Op: "read", Path: path, Err: errors.New("file too large")}
			}
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return b, nil
		}
		b = b[:len(b)+n]
	}
}

// readInt reads a file that holds one integer.
func readInt(path string) (int64, error) {
	b, err := readFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

func openFile(path string, flags int) (int, error) {
	for {
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
}

func closeFile(fd int) error { return unix.Close(fd) }

// groupTree lists the group dir and the groups below it, each before the
// groups below it; none when dir does not exist. A group removed while it
// is listed is left out; one that cannot be listed is still listed
// itself, and the first such error returned with the rest.
func groupTree(dir string) ([]string, error) {
	var dirs []string
	var first error
	for next := []string{dir}; len(next) > 0; {
		d := next[0]
		next = next[1:]
		subs, err := subgroups(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		dirs = append(dirs, d)
		if err != nil && first == nil {
			first = err
		}
		next = append(next, subs...)
	}
	return dirs, first
}

// subgroups lists the directories in dir (its child groups).
func subgroups(dir string) ([]string, error) {
	fd, err := openFile(dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer closeFile(fd)
	var subs []string
	buf := make([]byte, 4096)
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return subs, &fs.PathError{Op: "readdirent", Path: dir, Err: err}
		}
		if n <= 0 {
			return subs, nil
		}
		for b := buf[:n]; len(b) >= 19; {
			// struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name.
			reclen := int(b[16]) | int(b[17])<<8
			if reclen < 19 || reclen > len(b) {
				break
			}
			typ, name := b[18], b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			b = b[reclen:]
			s := string(name)
			if s == "." || s == ".." {
				continue
			}
			p := dir + "/" + s
			if typ == unix.DT_UNKNOWN {
				var st unix.Stat_t
				if unix.Lstat(p, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
					continue
				}
			} else if typ != unix.DT_DIR {
				continue
			}
			subs = append(subs, p)
		}
	}
}
