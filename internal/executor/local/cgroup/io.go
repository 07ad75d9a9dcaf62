package cgroup

import (
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
