// Package cgroup applies per-attempt memory limits with Linux control groups:
// the cgroup v2 unified hierarchy, or the v1 memory controller where only
// that is available (hybrid machines).
//
// Detect runs once in the server and finds a writable place; the supervisor
// of each attempt then creates one group there (Hierarchy.Create), moves
// itself in before starting the user's process so that the process and its
// children inherit the limit, reads the OOM-kill counter after the process
// ended, and removes the group. The package never decides what to do about an
// OOM kill; it only reports counters.
package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Version is a cgroup hierarchy version.
type Version int

// Hierarchy versions.
const (
	V1 Version = 1 // the v1 memory controller (memory.limit_in_bytes)
	V2 Version = 2 // the unified hierarchy (memory.max)
)

// DefaultMount is where cgroup file systems are mounted on common systems.
const DefaultMount = "/sys/fs/cgroup"

// groupDir is the directory, under a hierarchy's mount point, that holds
// every per-attempt group.
const groupDir = "trainyard"

// Hierarchy is a writable cgroup hierarchy with the memory controller.
type Hierarchy struct {
	Version Version `json:"version"`
	// Mount is the mount point of the hierarchy, e.g. /sys/fs/cgroup (v2) or
	// /sys/fs/cgroup/memory (v1).
	Mount string `json:"mount"`
	// Parent is the directory that holds the per-attempt groups.
	Parent string `json:"parent"`
}

// Detect finds a hierarchy where per-attempt memory groups can be created and
// prepares <mount>/trainyard for them. root, when non-empty, is the mount
// point to use (a v2 mount or a v1 memory mount); when empty, Detect tries
// /sys/fs/cgroup (v2), /sys/fs/cgroup/memory (v1) and /sys/fs/cgroup/unified
// (v2 on hybrid machines), in that order. The error says why no candidate is
// usable; callers then run attempts without limits.
func Detect(root string) (Hierarchy, error) {
	candidates := []string{root}
	if root == "" {
		candidates = []string{DefaultMount, filepath.Join(DefaultMount, "memory"), filepath.Join(DefaultMount, "unified")}
	}
	var whys []string
	for _, mount := range candidates {
		h, err := detectAt(mount)
		if err == nil {
			return h, nil
		}
		whys = append(whys, err.Error())
	}
	return Hierarchy{}, fmt.Errorf("no writable cgroup memory controller: %s", strings.Join(whys, "; "))
}

func detectAt(mount string) (Hierarchy, error) {
	switch {
	case exists(filepath.Join(mount, "cgroup.controllers")):
		return prepareV2(mount)
	case exists(filepath.Join(mount, "memory.limit_in_bytes")):
		return prepareV1(mount)
	default:
		return Hierarchy{}, fmt.Errorf("%s: not a cgroup v2 mount nor a v1 memory mount", mount)
	}
}

func prepareV2(mount string) (Hierarchy, error) {
	ctrl, err := os.ReadFile(filepath.Join(mount, "cgroup.controllers"))
	if err != nil {
		return Hierarchy{}, fmt.Errorf("%s: %w", mount, err)
	}
	if !hasWord(ctrl, "memory") {
		return Hierarchy{}, fmt.Errorf("%s: memory controller not available (cgroup.controllers: %q)", mount, strings.TrimSpace(string(ctrl)))
	}
	h := Hierarchy{Version: V2, Mount: mount, Parent: filepath.Join(mount, groupDir)}
	if err := os.MkdirAll(h.Parent, 0o755); err != nil {
		return Hierarchy{}, fmt.Errorf("%s: %w", mount, err)
	}
	// Delegate memory down to the per-attempt groups.
	for _, dir := range []string{mount, h.Parent} {
		if err := enableMemory(dir); err != nil {
			return Hierarchy{}, err
		}
	}
	return h, h.probe("memory.max")
}

func enableMemory(dir string) error {
	f := filepath.Join(dir, "cgroup.subtree_control")
	cur, err := os.ReadFile(f)
	if err == nil && hasWord(cur, "memory") {
		return nil
	}
	if err := os.WriteFile(f, []byte("+memory"), 0); err != nil {
		return fmt.Errorf("%s: enable memory controller: %w", dir, err)
	}
	return nil
}

func prepareV1(mount string) (Hierarchy, error) {
	h := Hierarchy{Version: V1, Mount: mount, Parent: filepath.Join(mount, groupDir)}
	if err := os.MkdirAll(h.Parent, 0o755); err != nil {
		return Hierarchy{}, fmt.Errorf("%s: %w", mount, err)
	}
	return h, h.probe("memory.limit_in_bytes")
}

// probe creates and removes one group to prove the hierarchy is writable.
func (h Hierarchy) probe(limitFile string) error {
	dir := filepath.Join(h.Parent, "probe-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s: create group: %w", h.Parent, err)
	}
	defer os.Remove(dir)
	if !exists(filepath.Join(dir, limitFile)) {
		return fmt.Errorf("%s: new groups have no %s", h.Parent, limitFile)
	}
	return nil
}

// Group is one per-attempt control group.
type Group struct {
	h     Hierarchy
	path  string
	limit int64
	home  string // the group the creating process came from
}

// Create makes the group <Parent>/<name> with a memory limit of limit bytes
// and no swap. A leftover group of that name is reused.
func (h Hierarchy) Create(name string, limit int64) (*Group, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("create cgroup %s: memory limit must be positive, got %d", name, limit)
	}
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return nil, fmt.Errorf("create cgroup: invalid name %q", name)
	}
	g := &Group{h: h, path: filepath.Join(h.Parent, name), limit: limit}
	if err := os.Mkdir(g.path, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	v := []byte(strconv.FormatInt(limit, 10))
	var err error
	switch h.Version {
	case V2:
		err = g.write("memory.max", v)
		if err == nil {
			// Optional knobs: absent without swap accounting or on old kernels.
			_ = g.write("memory.swap.max", []byte("0"))
			_ = g.write("memory.oom.group", []byte("1"))
		}
	case V1:
		err = g.write("memory.limit_in_bytes", v)
		if err == nil {
			_ = g.write("memory.memsw.limit_in_bytes", v) // absent without swap accounting
		}
	default:
		err = fmt.Errorf("unknown cgroup version %d", h.Version)
	}
	if err != nil {
		os.Remove(g.path)
		return nil, fmt.Errorf("create cgroup %s: set memory limit: %w", g.path, err)
	}
	return g, nil
}

// Path is the group's directory.
func (g *Group) Path() string { return g.path }

// Limit is the group's memory limit in bytes.
func (g *Group) Limit() int64 { return g.limit }

// EnterSelf moves the calling process into the group; children started
// afterwards are born in it. Remove moves the process back where it was.
func (g *Group) EnterSelf() error {
	g.home = g.ownGroup()
	if err := g.write("cgroup.procs", []byte(strconv.Itoa(os.Getpid()))); err != nil {
		return fmt.Errorf("enter cgroup %s: %w", g.path, err)
	}
	return nil
}

// ownGroup returns the directory of the calling process's current group in
// this hierarchy, or the mount point when it cannot be found.
func (g *Group) ownGroup() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return g.h.Mount
	}
	for _, line := range strings.Split(string(b), "\n") {
		// hierarchy-ID:controller-list:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		match := false
		switch g.h.Version {
		case V2:
			match = parts[0] == "0" && parts[1] == ""
		case V1:
			match = hasWord([]byte(strings.ReplaceAll(parts[1], ",", " ")), "memory")
		}
		if match {
			dir := filepath.Join(g.h.Mount, parts[2])
			if exists(filepath.Join(dir, "cgroup.procs")) {
				return dir
			}
		}
	}
	return g.h.Mount
}

// OOMKills returns how many processes the kernel killed in the group for
// exceeding its limit. known is false when the kernel does not count them
// (old v1 kernels); use Failcnt then.
func (g *Group) OOMKills() (n int64, known bool, err error) {
	switch g.h.Version {
	case V2:
		n, known, err = g.readKey("memory.events", "oom_kill")
	case V1:
		n, known, err = g.readKey("memory.oom_control", "oom_kill")
	}
	return n, known, err
}

// Failcnt returns how often the group hit its limit (v1 only; 0 on v2).
func (g *Group) Failcnt() (int64, error) {
	if g.h.Version != V1 {
		return 0, nil
	}
	b, err := os.ReadFile(filepath.Join(g.path, "memory.failcnt"))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// Peak returns the group's highest memory use in bytes, or 0 when the kernel
// does not report it.
func (g *Group) Peak() int64 {
	name := "memory.peak"
	if g.h.Version == V1 {
		name = "memory.max_usage_in_bytes"
	}
	b, err := os.ReadFile(filepath.Join(g.path, name))
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v
}

// KillAll sends SIGKILL to every process in the group except the caller and
// returns how many it signalled. It catches processes that left the user's
// process group (setsid) but not the cgroup.
func (g *Group) KillAll() (int, error) {
	pids, err := g.pids()
	if err != nil {
		return 0, err
	}
	n := 0
	self := os.Getpid()
	for _, pid := range pids {
		if pid == self {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n, nil
}

func (g *Group) pids() ([]int, error) {
	b, err := os.ReadFile(filepath.Join(g.path, "cgroup.procs"))
	if err != nil {
		return nil, fmt.Errorf("list cgroup %s: %w", g.path, err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// Remove moves the caller back to the group it came from (if it entered this
// one) and deletes the group. Processes that are still exiting keep the group
// busy for a moment, so Remove retries for up to wait.
func (g *Group) Remove(wait time.Duration) error {
	if g.home != "" {
		home := g.home
		if err := os.WriteFile(filepath.Join(home, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil && home != g.h.Mount {
			_ = os.WriteFile(filepath.Join(g.h.Mount, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
		}
	}
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Rmdir(g.path)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", g.path, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (g *Group) write(file string, v []byte) error {
	return os.WriteFile(filepath.Join(g.path, file), v, 0)
}

// readKey reads "key value" from a flat-keyed cgroup file.
func (g *Group) readKey(file, key string) (int64, bool, error) {
	f, err := os.Open(filepath.Join(g.path, file))
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, false, fmt.Errorf("%s: bad %s value %q", file, key, v)
			}
			return n, true, nil
		}
	}
	return 0, false, sc.Err()
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func hasWord(b []byte, w string) bool {
	for _, f := range bytes.Fields(b) {
		if string(f) == w {
			return true
		}
	}
	return false
}
