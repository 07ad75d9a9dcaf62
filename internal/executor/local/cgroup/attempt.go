package cgroup

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DetectTracking finds a hierarchy where each attempt's processes can be
// held in a group of their own and ended together, and prepares
// <mount>/trainyard there. root, when non-empty, is the mount point to use
// (a v2 mount, or a v1 freezer or pids mount); when empty, DetectTracking
// tries /sys/fs/cgroup (v2), /sys/fs/cgroup/unified (v2 on hybrid machines,
// with or without controllers), /sys/fs/cgroup/freezer and
// /sys/fs/cgroup/pids (v1), in that order. The error says why no candidate
// is usable; attempts are then tracked by process group and session only.
func DetectTracking(root string) (Hierarchy, error) {
	candidates := []string{root}
	if root == "" {
		candidates = []string{DefaultMount, filepath.Join(DefaultMount, "unified"),
			filepath.Join(DefaultMount, "freezer"), filepath.Join(DefaultMount, "pids")}
	}
	var whys []string
	for _, mount := range candidates {
		h, err := detectTrackingAt(mount)
		if err == nil {
			return h, nil
		}
		whys = append(whys, err.Error())
	}
	return Hierarchy{}, fmt.Errorf("no writable cgroup hierarchy to track attempts in: %s", strings.Join(whys, "; "))
}

func detectTrackingAt(mount string) (Hierarchy, error) {
	if exists(filepath.Join(mount, "cgroup.controllers")) {
		if h, err := prepareV2(mount); err == nil {
			return h, nil // with memory limits
		}
		h := Hierarchy{Version: V2, Mount: mount, Parent: filepath.Join(mount, groupDir)}
		if err := os.MkdirAll(h.Parent, 0o755); err != nil {
			return Hierarchy{}, fmt.Errorf("%s: %w", mount, err)
		}
		return h, h.probe("cgroup.procs")
	}
	for _, c := range []struct{ controller, file string }{{"freezer", "freezer.state"}, {"pids", "pids.max"}} {
		if filepath.Base(mount) == c.controller || exists(filepath.Join(mount, c.file)) {
			return prepareV1Controller(mount, c.controller, c.file)
		}
	}
	return Hierarchy{}, fmt.Errorf("%s: not a cgroup v2 mount nor a v1 freezer or pids mount", mount)
}

// Layout is where attempts' groups are made.
type Layout struct {
	// Track holds every process of an attempt, so that they can be ended
	// together; nil: attempts are not tracked with cgroups.
	Track *Hierarchy `json:"track,omitempty"`
	// Memory limits an attempt's memory and measures its peak; nil: no
	// limits. It may be the same hierarchy as Track (cgroup v2).
	Memory *Hierarchy `json:"memory,omitempty"`
	// CPU limits an attempt's CPU time; nil: no CPU limits. It may be the
	// same hierarchy as Track or Memory (cgroup v2).
	CPU *Hierarchy `json:"cpu,omitempty"`
}

// Limits are what an attempt's groups enforce; zero fields: no limit.
type Limits struct {
	Memory int64   // bytes
	CPUs   float64 // CPUs' worth of time (a quota per period)
}

// Plan returns the groups of the attempt called name, without creating
// them: its job's group in Track, in Memory (to measure its peak, and to
// limit it when lim.Memory is positive), and in CPU when lim.CPUs is
// positive. A hierarchy that serves several purposes appears once. Plan
// returns nil when the layout gives the attempt no group at all.
func (l Layout) Plan(name string, lim Limits) (*Attempt, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if lim.Memory < 0 || lim.CPUs < 0 || math.IsNaN(lim.CPUs) || math.IsInf(lim.CPUs, 0) {
		return nil, fmt.Errorf("plan cgroup %s: invalid limits %+v", name, lim)
	}
	a := &Attempt{Name: name}
	add := func(h Hierarchy, memory, cpu bool) {
		for i := range a.Hierarchies {
			if a.Hierarchies[i].Parent == h.Parent {
				a.Hierarchies[i].Memory = a.Hierarchies[i].Memory || memory
				a.Hierarchies[i].CPU = a.Hierarchies[i].CPU || cpu
				return
			}
		}
		h.Memory, h.CPU = h.Memory || memory, cpu
		a.Hierarchies = append(a.Hierarchies, h)
	}
	if l.Track != nil {
		add(*l.Track, false, false)
	}
	if l.Memory != nil {
		add(*l.Memory, l.Memory.Memory, false)
		a.Limit = lim.Memory
	}
	if l.CPU != nil && lim.CPUs > 0 {
		add(*l.CPU, false, l.CPU.CPU)
		a.CPUs = lim.CPUs
	}
	if len(a.Hierarchies) == 0 {
		return nil, nil
	}
	return a, nil
}

// Attempt is one attempt's groups: in each of its hierarchies, the job's
// group <Parent>/<Name>, which holds every process of the job, and the
// supervisor's group <Parent>/<Name>.shim beside it, which holds only the
// supervisor: the supervisor never counts against the job's memory limit,
// and an out-of-memory kill in the job's group never reaches it.
//
// It is what the supervisor records (as JSON) before it creates the groups,
// so that whoever outlives it can end the attempt (Kill) and remove them.
type Attempt struct {
	Name        string      `json:"name"`
	Limit       int64       `json:"limit,omitempty"`
	CPUs        float64     `json:"cpus,omitempty"`
	Hierarchies []Hierarchy `json:"hierarchies"`
	// NoShim: the supervisor has no group of the attempt (a supervisor
	// shared by many attempts stays in its own; see StartInJobThread).
	NoShim bool `json:"no_shim,omitempty"`

	homes []string // per hierarchy: where the caller was before EnterShim
	// noCloneInto: the kernel refused CLONE_INTO_CGROUP (StartInJob).
	noCloneInto bool
}

// ShimSuffix ends the name of the supervisor's group.
const ShimSuffix = ".shim"

func (a *Attempt) jobDir(h Hierarchy) string  { return filepath.Join(h.Parent, a.Name) }
func (a *Attempt) shimDir(h Hierarchy) string { return filepath.Join(h.Parent, a.Name+ShimSuffix) }

// Dirs lists every group directory of the attempt.
func (a *Attempt) Dirs() []string {
	var dirs []string
	for _, h := range a.Hierarchies {
		dirs = append(dirs, a.jobDir(h))
		if !a.NoShim {
			dirs = append(dirs, a.shimDir(h))
		}
	}
	return dirs
}

// Create makes the attempt's groups, with the memory limit on the job's. A
// leftover group of the same name is reused. On failure, the groups made
// are removed.
func (a *Attempt) Create() error {
	for _, h := range a.Hierarchies {
		limit := int64(0)
		if h.Memory {
			limit = a.Limit
		}
		g, err := h.create(a.Name, limit)
		if err == nil && h.CPU && a.CPUs > 0 {
			err = g.setCPUs(a.CPUs)
		}
		if err == nil && !a.NoShim {
			_, err = h.create(a.Name+ShimSuffix, 0)
		}
		if err != nil {
			_ = a.Remove(0)
			return err
		}
	}
	return nil
}

// EnterShim moves the calling process into the supervisor's groups.
func (a *Attempt) EnterShim() error {
	if a.homes == nil {
		for _, h := range a.Hierarchies {
			a.homes = append(a.homes, h.ownGroup())
		}
	}
	for _, h := range a.Hierarchies {
		if err := moveSelf(a.shimDir(h)); err != nil {
			return err
		}
	}
	return nil
}

// StartInJob runs start (which starts a process) so that the process is
// born in the job's groups. In a v2 hierarchy start is given an open
// descriptor of the job's group (cgroupFD, else -1) to start the process
// into (clone3's CLONE_INTO_CGROUP: syscall.SysProcAttr.UseCgroupFD); in
// v1 hierarchies the caller moves into the job's groups for the fork and
// back to the supervisor's after it. Moving a process in a v2 hierarchy
// waits for the kernel to synchronize (about a millisecond each, two per
// start), which CLONE_INTO_CGROUP avoids; v1 moves are cheap. Where the
// kernel refuses CLONE_INTO_CGROUP (before 5.7), the caller moves in v2
// too. Memory the caller allocates meanwhile is charged to the job, so
// start should do little more than fork.
func (a *Attempt) StartInJob(start func(cgroupFD int) error) error {
	fd := -1
	for _, h := range a.Hierarchies {
		if h.Version != V2 || a.noCloneInto {
			continue
		}
		dfd, err := openFile(a.jobDir(h), unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			break
		}
		defer closeFile(dfd)
		fd = dfd
		break
	}
	move := func(into func(Hierarchy) string, v2 bool) error {
		for _, h := range a.Hierarchies {
			if h.Version == V2 && !v2 {
				continue
			}
			if err := moveSelf(into(h)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := move(a.jobDir, fd < 0); err != nil {
		_ = a.EnterShim()
		return err
	}
	err := start(fd)
	if fd >= 0 && err != nil && cloneIntoRefused(err) {
		a.noCloneInto = true
		if err = move(a.jobDir, true); err == nil {
			err = start(-1)
		}
	}
	if berr := move(a.shimDir, fd < 0 || a.noCloneInto); berr != nil {
		return errors.Join(err, berr)
	}
	return err
}

// StartInJobThread runs start (which starts a process from the calling
// thread, locked to it) so that the process is born in the job's groups
// while the calling process stays in its own: the way of a supervisor
// shared by many attempts. In a v2 hierarchy start is given an open
// descriptor of the job's group (cgroupFD, else -1) to start the process
// into (CLONE_INTO_CGROUP); in v1 hierarchies the calling thread alone
// moves into the job's groups for the fork (a child is born in its
// forking thread's groups) and back after it. Where the kernel refuses
// CLONE_INTO_CGROUP, the process is moved into the job's v2 group right
// after its start: it runs outside of it for that moment. start returns
// the started process's pid (0: none).
func (a *Attempt) StartInJobThread(start func(cgroupFD int) (int, error)) error {
	fd := -1
	var v2 []Hierarchy
	for _, h := range a.Hierarchies {
		if h.Version != V2 {
			continue
		}
		v2 = append(v2, h)
		if fd >= 0 || a.noCloneInto {
			continue
		}
		dfd, err := openFile(a.jobDir(h), unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return fmt.Errorf("open cgroup %s: %w", a.jobDir(h), err)
		}
		defer closeFile(dfd)
		fd = dfd
	}
	tid := strconv.Itoa(unix.Gettid())
	var homes []string
	var errs []error
	// The calling thread's groups, read once for every v1 hierarchy:
	// moving it in one leaves it where it was in the others.
	var listing []byte
	var listErr error
	if len(v2) < len(a.Hierarchies) {
		listing, listErr = readFile("/proc/thread-self/cgroup")
	}
	for _, h := range a.Hierarchies {
		if h.Version == V2 {
			continue
		}
		home := h.groupFrom(listing, listErr) // where the thread is now
		if err := writeFile(filepath.Join(a.jobDir(h), "tasks"), []byte(tid)); err != nil {
			errs = append(errs, fmt.Errorf("move the supervisor's thread into cgroup %s: %w", a.jobDir(h), err))
			break
		}
		homes = append(homes, home)
	}
	back := func() error {
		var errs []error
		for _, home := range homes {
			if err := writeFile(filepath.Join(home, "tasks"), []byte(tid)); err != nil {
				errs = append(errs, fmt.Errorf("move the supervisor's thread back into cgroup %s: %w", home, err))
			}
		}
		return errors.Join(errs...)
	}
	if len(errs) > 0 {
		return errors.Join(append(errs, back())...)
	}
	pid, err := start(fd)
	if fd >= 0 && err != nil && cloneIntoRefused(err) {
		a.noCloneInto = true
		fd = -1
		pid, err = start(-1)
	}
	if berr := back(); berr != nil {
		errs = append(errs, berr)
	}
	if err != nil {
		return errors.Join(append([]error{err}, errs...)...)
	}
	if fd < 0 && pid > 0 {
		for _, h := range v2 {
			if werr := writeFile(filepath.Join(a.jobDir(h), "cgroup.procs"), []byte(strconv.Itoa(pid))); werr != nil {
				errs = append(errs, fmt.Errorf("move pid %d into cgroup %s: %w", pid, a.jobDir(h), werr))
			}
		}
	}
	return errors.Join(errs...)
}

// cloneIntoRefused reports whether a process start failed because the
// kernel has no CLONE_INTO_CGROUP (clone3 missing or refusing the flag).
func cloneIntoRefused(err error) bool {
	return errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EOPNOTSUPP)
}

// MemoryGroup is the job's memory-limited group, or nil when the attempt has
// no memory limit.
func (a *Attempt) MemoryGroup() *Group {
	for _, h := range a.Hierarchies {
		if h.Memory && a.Limit > 0 {
			return &Group{h: h, path: a.jobDir(h), limit: a.Limit}
		}
	}
	return nil
}

// MemoryAccount is the job's group in the hierarchy that accounts its
// memory (with or without a limit), or nil when it has none.
func (a *Attempt) MemoryAccount() *Group {
	for _, h := range a.Hierarchies {
		if h.Memory {
			return &Group{h: h, path: a.jobDir(h), limit: a.Limit}
		}
	}
	return nil
}

// CPUGroup is the job's CPU-limited group, or nil when the attempt has no
// CPU limit.
func (a *Attempt) CPUGroup() *Group {
	for _, h := range a.Hierarchies {
		if h.CPU && a.CPUs > 0 {
			return &Group{h: h, path: a.jobDir(h)}
		}
	}
	return nil
}

// KillJob ends every process in the job's groups and waits up to wait
// until none is left (see Group.Kill); the supervisor calls it once the
// job's main process ended.
func (a *Attempt) KillJob(wait time.Duration) error {
	var errs []error
	for _, h := range a.Hierarchies {
		errs = append(errs, kill(a.jobDir(h), wait))
	}
	return errors.Join(errs...)
}

// JobDone reports whether no live process is left in the job's groups
// (those that exited and wait to be reaped do not count); an unreadable
// group counts as not done.
func (a *Attempt) JobDone() bool {
	for _, h := range a.Hierarchies {
		if pids, err := treePids(a.jobDir(h), 0); err != nil || len(pids) > 0 {
			return false
		}
	}
	return true
}

// Kill ends every process of the attempt, the supervisor's groups included
// (the caller excepted), and waits up to wait until none is left: what
// whoever finds the supervisor dead does before the attempt may run again.
func (a *Attempt) Kill(wait time.Duration) error {
	var errs []error
	for _, h := range a.Hierarchies {
		errs = append(errs, kill(a.jobDir(h), wait))
		if !a.NoShim {
			errs = append(errs, kill(a.shimDir(h), wait))
		}
	}
	return errors.Join(errs...)
}

// Remove moves the caller back to where it was before EnterShim (if it
// entered) and deletes the attempt's groups, retrying for up to wait while
// exiting processes keep them busy. Groups already gone are not an error.
func (a *Attempt) Remove(wait time.Duration) error {
	for i, home := range a.homes {
		if err := moveSelf(home); err != nil && home != a.Hierarchies[i].Mount {
			_ = moveSelf(a.Hierarchies[i].Mount)
		}
	}
	a.homes = nil
	var errs []error
	for _, h := range a.Hierarchies {
		errs = append(errs, removeTree(a.jobDir(h), wait))
		if !a.NoShim {
			errs = append(errs, removeTree(a.shimDir(h), wait))
		}
	}
	return errors.Join(errs...)
}
