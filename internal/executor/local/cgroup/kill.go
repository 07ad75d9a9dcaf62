package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// useCgroupKill is cleared by tests to exercise the freezer path on kernels
// that have cgroup.kill.
var useCgroupKill = true

// freezeWait bounds how long kill waits for a group to report frozen before
// it signals the processes anyway.
const freezeWait = time.Second

// kill ends every process in the group dir and the groups below it, except
// the caller, and waits until none is left, for up to wait:
//
//   - cgroup v2 with cgroup.kill (Linux 5.14): the kernel kills the whole
//     subtree at once, new children included;
//   - otherwise the group is frozen first (v2 cgroup.freeze, or the v1
//     freezer's freezer.state), so that no process can fork while each is
//     sent SIGKILL, then thawed, and the killed processes die;
//   - without either (a v1 memory or pids hierarchy), the processes are
//     sent SIGKILL again and again until a listing finds none.
//
// A group that holds the caller is never frozen (the caller would freeze
// itself): its other processes are signalled until none is left. Processes
// that have exited but wait to be reaped (zombies) no longer count. The error says how many processes are left when wait is over.
func kill(dir string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	self := os.Getpid()
	all, err := treePids(dir, 0)
	if err != nil {
		return fmt.Errorf("end the processes of cgroup %s: %w", dir, err)
	}
	if len(all) == 0 {
		// Nothing to end, and nothing can join: a process enters a group
		// by being forked by one of its members.
		return nil
	}
	if !slices.Contains(all, self) && !(useCgroupKill && writeFile(filepath.Join(dir, "cgroup.kill"), []byte("1")) == nil) {
		thaw := freeze(dir, time.Now().Add(freezeWait))
		signalAll(dir, self)
		thaw()
	}
	for {
		pids, err := treePids(dir, self)
		if err != nil {
			return fmt.Errorf("end the processes of cgroup %s: %w", dir, err)
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("end the processes of cgroup %s: %d still there after %s: %v", dir, len(pids), wait, pids)
		}
		signalAll(dir, self)
		time.Sleep(2 * time.Millisecond)
	}
}

// freeze freezes the group dir and its subtree where the hierarchy can, and
// waits (until deadline) for it to report frozen; the returned function
// thaws it again.
func freeze(dir string, deadline time.Time) (thaw func()) {
	v2 := filepath.Join(dir, "cgroup.freeze")
	v1 := filepath.Join(dir, "freezer.state")
	var frozen func() bool
	switch {
	case writeFile(v2, []byte("1")) == nil:
		thaw = func() { _ = writeFile(v2, []byte("0")) }
		frozen = func() bool {
			n, ok, _ := (&Group{path: dir}).readKey("cgroup.events", "frozen")
			return ok && n == 1
		}
	case writeFile(v1, []byte("FROZEN")) == nil:
		thaw = func() { _ = writeFile(v1, []byte("THAWED")) }
		frozen = func() bool {
			b, err := readFile(v1)
			return err == nil && strings.TrimSpace(string(b)) == "FROZEN"
		}
	default:
		return func() {}
	}
	for !frozen() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	return thaw
}

// signalAll sends SIGKILL to every process in the subtree at dir but self.
func signalAll(dir string, self int) {
	pids, _ := treePids(dir, self)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// treePids lists the live processes in the group dir and the groups below
// it, except self. A group that is gone has none.
func treePids(dir string, self int) ([]int, error) {
	if !populated(dir) {
		return nil, nil
	}
	dirs, err := groupTree(dir)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, d := range dirs {
		b, err := readFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV) {
				continue // removed meanwhile
			}
			return nil, err
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid != self && !zombie(pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids, nil
}

// populated reports whether the v2 group dir or a group below it has a
// process (cgroup.events); true where that is unknown (v1, or unreadable),
// so that the caller looks.
func populated(dir string) bool {
	b, err := readFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return true
	}
	return !strings.Contains(string(b), "populated 0")
}

// zombie reports whether pid has exited (or is gone) and only waits to be
// reaped.
func zombie(pid int) bool {
	b, err := readFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] == 'Z' || b[i+2] == 'X'
}

// removeTree deletes the group dir and the groups below it, deepest first,
// retrying for up to wait while exiting processes keep one busy.
func removeTree(dir string, wait time.Duration) error {
	dirs, _ := groupTree(dir)
	slices.Reverse(dirs) // the groups below a group first
	deadline := time.Now().Add(wait)
	for _, d := range dirs {
		for {
			err := syscall.Rmdir(d)
			if err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				return fmt.Errorf("remove cgroup %s: %w", d, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}
