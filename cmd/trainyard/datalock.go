package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"trainyard/internal/domain"
)

// dataLockFile is the file in the data directory whose flock says a server
// owns the directory. It also records the owner's pid and, once it listens,
// its URL, so a second start can say whom to stop.
const dataLockFile = "server.lock"

// dataLock is this process's exclusive hold on its data directory. The
// kernel drops the flock when the process exits however it exits, so a
// killed server never leaves the directory locked; the file itself stays.
type dataLock struct {
	f      *os.File
	shared bool // replicas of one PostgreSQL store: held together, recorded by none
}

// lockInfo is what the lock file holds.
type lockInfo struct {
	PID int    `json:"pid"`
	URL string `json:"url,omitempty"`
}

// lockDataDir takes the data directory for this process before anything
// else reads or writes it. When another server holds it, the error names
// that server's pid and address and matches domain.ErrInvalid (exit 2): the
// fix is to stop that server or to give this one another --data. Replicas
// sharing a PostgreSQL store each have a data directory of their own, so
// the lock never stands between them.
//
// Replicas of one PostgreSQL store on one machine may share a data
// directory (the leader adopts the others' running jobs from it; leader
// election keeps them from scheduling twice): they take the lock shared,
// which still keeps an SQLite server, whose store cannot be shared, out.
func lockDataDir(data string, shared bool) (*dataLock, error) {
	path := filepath.Join(data, dataLockFile)
	// Not O_TRUNC: the running owner's pid and URL must survive a failed start.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock the data directory: %w", err)
	}
	how := unix.LOCK_EX
	if shared {
		how = unix.LOCK_SH
	}
	if err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB); err != nil {
		f.Close()
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock the data directory: %s: %w", path, err)
		}
		return nil, domain.Errorf(domain.ErrInvalid, "data directory %s is in use by %s; stop it first or start this one with --data OTHER", data, describeOwner(path))
	}
	l := &dataLock{f: f, shared: shared}
	if err := l.record(lockInfo{PID: os.Getpid()}); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// record rewrites the lock file with info; only the holder calls it.
func (l *dataLock) record(info lockInfo) error {
	if l.shared {
		return nil // several holders: none speaks for the directory
	}
	b, _ := json.Marshal(info)
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("write the data directory's lock file: %w", err)
	}
	if _, err := l.f.WriteAt(append(b, '\n'), 0); err != nil {
		return fmt.Errorf("write the data directory's lock file: %w", err)
	}
	return nil
}

// Close releases the directory. The file stays: removing it could let a
// starting server lock a file that a third one then recreates beside it.
func (l *dataLock) Close() error { return l.f.Close() }

// describeOwner names the server holding the lock file at path, as far as
// its contents tell.
func describeOwner(path string) string {
	var info lockInfo
	if b, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(b, &info)
	}
	switch {
	case info.PID > 0 && info.URL != "":
		return fmt.Sprintf("the server with pid %d at %s", info.PID, info.URL)
	case info.PID > 0:
		return fmt.Sprintf("the server with pid %d (still starting)", info.PID)
	default:
		return "another server"
	}
}
