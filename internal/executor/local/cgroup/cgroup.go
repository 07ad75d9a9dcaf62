// Package cgroup places each attempt's processes in Linux control groups, to
// limit their memory and to end them all together: the cgroup v2 unified
// hierarchy, or v1 controllers where those are what the host has (the memory
// controller for limits; the freezer, else the pids controller, to hold and
// end an attempt's processes).
//
// Detect (memory) and DetectTracking run once in the server and find
// writable places; together they are a Layout. The supervisor of each
// attempt plans its groups (Layout.Plan), records the plan where the server
// can read it, creates the groups, and starts every process of the attempt
// in the job's group while it stays in a group of its own beside it, so that
// it is never charged to the job's memory limit (see Attempt). It reads the
// OOM-kill counter after the process ended, ends what is left (Attempt.Kill)
// and removes the groups. When a supervisor dies, the server ends the
// attempt from the recorded plan the same way. The package never decides
// what to do about an OOM kill; it only reports counters.
package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
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

// Hierarchy is a writable cgroup hierarchy.
type Hierarchy struct {
	Version Version `json:"version"`
	// Mount is the mount point of the hierarchy, e.g. /sys/fs/cgroup (v2) or
	// /sys/fs/cgroup/memory (v1).
	Mount string `json:"mount"`
	// Parent is the directory that holds the per-attempt groups.
	Parent string `json:"parent"`
	// Controller is the v1 controller the hierarchy was mounted for
	// ("memory", "freezer" or "pids"); empty on v2.
	Controller string `json:"controller,omitempty"`
	// Memory is set when groups in the hierarchy can take a memory limit.
	Memory bool `json:"memory,omitempty"`
	// CPU is set when groups in the hierarchy can take a CPU quota.
	CPU bool `json:"cpu,omitempty"`
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
	h := Hierarchy{Version: V2, Mount: mount, Parent: filepath.Join(mount, groupDir), Memory: true}
	if err := os.MkdirAll(h.Parent, 0o755); err != nil {
		return Hierarchy{}, fmt.Errorf("%s: %w", mount, err)
	}
	// Delegate memory down to the per-attempt groups.
	for _, dir := range []string{mount, h.Parent} {
		if err := enable(dir, "memory"); err != nil {
			return Hierarchy{}, err
		}
	}
	return h, h.probe("memory.max")
}

// enable delegates the v2 controller to the groups below dir.
func enable(dir, controller string) error {
	f := filepath.Join(dir, "cgroup.subtree_control")
	cur, err := os.ReadFile(f)
	if err == nil && hasWord(cur, controller) {
		return nil
	}
	if err := os.WriteFile(f, []byte("+"+controller), 0); err != nil {
		return fmt.Errorf("%s: enable %s controller: %w", dir, controller, err)
	}
	return nil
}

// DetectCPU finds a hierarchy where per-attempt groups can take a CPU
// quota and prepares <mount>/trainyard for them. root, when non-empty, is
// the mount point to use (a v2 mount or a v1 cpu mount); when empty,
// DetectCPU tries /sys/fs/cgroup (v2), /sys/fs/cgroup/cpu,cpuacct and
// /sys/fs/cgroup/cpu (v1), and /sys/fs/cgroup/unified (v2 on hybrid
// machines), in that order. The error says why no candidate is usable;
// callers then run attempts without CPU limits.
func DetectCPU(root string) (Hierarchy, error) {
	candidates := []string{root}
	if root == "" {
		candidates = []string{DefaultMount, filepath.Join(DefaultMount, "cpu,cpuacct"),
			filepath.Join(DefaultMount, "cpu"), filepath.Join(DefaultMount, "unified")}
	}
	var whys []string
	for _, mount := range candidates {
		h, err := detectCPUAt(mount)
		if err == nil {
			return h, nil
		}
		whys = append(whys, err.Error())
	}
	return Hierarchy{}, fmt.Errorf("no writable cgroup cpu controller: %s", strings.Join(whys, "; "))
}

func detectCPUAt(mount string) (Hierarchy, error) {
	switch {
	case exists(filepath.Join(mount, "cgroup.controllers")):
		ctrl, err := os.ReadFile(filepath.Join(mount, "cgroup.controllers"))
		if err != nil {
			return Hierarchy{}, fmt.Errorf("%s: %w", mount, err)
		}
		if !hasWord(ctrl, "cpu") {
			return Hierarchy{}, fmt.Errorf("%s: cpu controller not available (cgroup.controllers: %q)", mount, strings.TrimSpace(string(ctrl)))
		}
		h := Hierarchy{Version: V2, Mount: mount, Parent: filepath.Join(mount, groupDir), CPU: true}
		if err := os.MkdirAll(h.Parent, 0o755); err != nil {
			return Hierarchy{}, fmt.Errorf("%s: %w", mount, err)
		}
		for _, dir := range []string{mount, h.Parent} {
			if err := enable(dir, "cpu"); err != nil {
				return Hierarchy{}, err
			}
		}
		// The same hierarchy may also limit memory (Detect): Layout.Plan
		// merges them.
		return h, h.probe("cpu.max")
	case exists(filepath.Join(mount, "cpu.cfs_quota_us")):
		h, err := prepareV1Controller(mount, "cpu", "cpu.cfs_quota_us")
		h.CPU = err == nil
		return h, err
	default:
		return Hierarchy{}, fmt.Errorf("%s: not a cgroup v2 mount nor a v1 cpu mount", mount)
	}
}

// cpuPeriod is the CPU quota's accounting period, in microseconds.
const cpuPeriod = 100_000

// setCPUs limits the group to cpus CPUs' worth of time: a quota of
// cpus × 100ms per 100ms period (at least 1ms).
func (g *Group) setCPUs(cpus float64) error {
	quota := max(int64(math.Ceil(cpus*cpuPeriod)), 1000)
	var err error
	switch g.h.Version {
	case V2:
		err = g.write("cpu.max", []byte(strconv.FormatInt(quota, 10)+" "+strconv.Itoa(cpuPeriod)))
	case V1:
		err = g.write("cpu.cfs_period_us", []byte(strconv.Itoa(cpuPeriod)))
		if err == nil {
			err = g.write("cpu.cfs_quota_us", []byte(strconv.FormatInt(quota, 10)))
		}
	default:
		err = fmt.Errorf("unknown cgroup version %d", g.h.Version)
	}
	if err != nil {
		return fmt.Errorf("cgroup %s: set a CPU quota of %g CPUs: %w", g.path, cpus, err)
	}
	return nil
}

// CPUQuota returns the group's CPU quota as a number of CPUs; 0 when it
// has none or the hierarchy has no cpu controller.
func (g *Group) CPUQuota() float64 {
	switch g.h.Version {
	case V2:
		b, err := readFile(filepath.Join(g.path, "cpu.max"))
		f := strings.Fields(string(b))
		if err != nil || len(f) != 2 {
			return 0
		}
		q, err1 := strconv.ParseFloat(f[0], 64)
		p, err2 := strconv.ParseFloat(f[1], 64)
		if err1 != nil || err2 != nil || p <= 0 {
			return 0 // "max": none
		}
		return q / p
	case V1:
		q, err1 := readInt(filepath.Join(g.path, "cpu.cfs_quota_us"))
		p, err2 := readInt(filepath.Join(g.path, "cpu.cfs_period_us"))
		if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
			return 0 // -1: none
		}
		return float64(q) / float64(p)
	}
	return 0
}

func prepareV1(mount string) (Hierarchy, error) {
	return prepareV1Controller(mount, "memory", "memory.limit_in_bytes")
}

// prepareV1Controller prepares the v1 hierarchy at mount, mounted for
// controller, whose groups have the file probeFile.
func prepareV1Controller(mount, controller, probeFile string) (Hierarchy, error) {
	h := Hierarchy{Version: V1, Mount: mount, Parent: filepath.Join(mount, groupDir), Controller: controller, Memory: controller == "memory"}
	if err := os.MkdirAll(h.Parent, 0o755); err != nil {
		return Hierarchy{}, fmt.Errorf("%s: %w", mount, err)
	}
	return h, h.probe(probeFile)
}

// probes numbers this process's probe groups: two detections at once (two
// executors in one process) must never share one, or one removes the other's
// group before it looks inside.
var probes atomic.Uint64

// probe creates and removes one group to prove the hierarchy is writable.
// An existing group of its name can only be a leftover of a dead process
// with this pid, and is reused.
func (h Hierarchy) probe(limitFile string) error {
	dir := filepath.Join(h.Parent, fmt.Sprintf("probe-%d-%d", os.Getpid(), probes.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s: create group: %w", h.Parent, err)
	}
	defer os.Remove(dir)
	if !exists(filepath.Join(dir, limitFile)) {
		return fmt.Errorf("%s: new groups have no %s", h.Parent, limitFile)
	}
	return nil
}

// Group is one control group.
type Group struct {
	h     Hierarchy
	path  string
	limit int64
}

// Create makes the group <Parent>/<name> with a memory limit of limit bytes
// and no swap. A leftover group of that name is reused.
func (h Hierarchy) Create(name string, limit int64) (*Group, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("create cgroup %s: memory limit must be positive, got %d", name, limit)
	}
	return h.create(name, limit)
}

// create makes the group <Parent>/<name>, with a memory limit when limit is
// positive.
func (h Hierarchy) create(name string, limit int64) (*Group, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	g := &Group{h: h, path: filepath.Join(h.Parent, name), limit: limit}
	if err := os.Mkdir(g.path, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	if limit <= 0 {
		return g, nil
	}
	v := []byte(strconv.FormatInt(limit, 10))
	var err error
	switch {
	case !h.Memory:
		err = fmt.Errorf("the hierarchy at %s has no memory controller", h.Mount)
	case h.Version == V2:
		err = g.write("memory.max", v)
		if err == nil {
			// Optional knobs: absent without swap accounting or on old kernels.
			_ = g.write("memory.swap.max", []byte("0"))
			_ = g.write("memory.oom.group", []byte("1"))
		}
	case h.Version == V1:
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

func checkName(name string) error {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return fmt.Errorf("create cgroup: invalid name %q", name)
	}
	return nil
}

// Path is the group's directory.
func (g *Group) Path() string { return g.path }

// Limit is the group's memory limit in bytes.
func (g *Group) Limit() int64 { return g.limit }

// ownGroup returns the directory of the calling process's current group in
// this hierarchy, or the mount point when it cannot be found.
func (h Hierarchy) ownGroup() string {
	return h.groupIn("/proc/self/cgroup")
}

// groupIn returns the directory of this hierarchy's group in the cgroup
// listing file, or the mount point when it cannot be found.
func (h Hierarchy) groupIn(file string) string {
	return h.groupFrom(readFile(file))
}

// groupFrom is groupIn of the listing b, read with err.
func (h Hierarchy) groupFrom(b []byte, err error) string {
	if err != nil {
		return h.Mount
	}
	for _, line := range strings.Split(string(b), "\n") {
		// hierarchy-ID:controller-list:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		match := false
		switch h.Version {
		case V2:
			match = parts[0] == "0" && parts[1] == ""
		case V1:
			match = hasWord([]byte(strings.ReplaceAll(parts[1], ",", " ")), h.controller())
		}
		if match {
			dir := filepath.Join(h.Mount, parts[2])
			if exists(filepath.Join(dir, "cgroup.procs")) {
				return dir
			}
		}
	}
	return h.Mount
}

// controller is the v1 controller of h; hierarchies recorded before
// Controller existed were memory hierarchies.
func (h Hierarchy) controller() string {
	if h.Controller == "" {
		return "memory"
	}
	return h.Controller
}

// moveSelf moves the calling process (all its threads) into the group dir.
func moveSelf(dir string) error {
	if err := writeFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid()))); err != nil {
		return fmt.Errorf("move into cgroup %s: %w", dir, err)
	}
	return nil
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
	return readInt(filepath.Join(g.path, "memory.failcnt"))
}

// Peak returns the group's highest memory use in bytes, or 0 when the kernel
// does not report it.
func (g *Group) Peak() int64 {
	name := "memory.peak"
	if g.h.Version == V1 {
		name = "memory.max_usage_in_bytes"
	}
	v, _ := readInt(filepath.Join(g.path, name))
	return v
}

// Kill ends every process in the group and the groups below it, except the
// caller, and waits up to wait until none is left (see kill).
func (g *Group) Kill(wait time.Duration) error { return kill(g.path, wait) }

// Remove deletes the group (and any group below it). Processes that are
// still exiting keep a group busy for a moment, so Remove retries for up to
// wait. A group that is already gone is not an error.
func (g *Group) Remove(wait time.Duration) error { return removeTree(g.path, wait) }

func (g *Group) write(file string, v []byte) error {
	return writeFile(filepath.Join(g.path, file), v)
}

// readKey reads "key value" from a flat-keyed cgroup file.
func (g *Group) readKey(file, key string) (int64, bool, error) {
	b, err := readFile(filepath.Join(g.path, file))
	if err != nil {
		return 0, false, err
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, false, fmt.Errorf("%s: bad %s value %q", file, key, v)
			}
			return n, true, nil
		}
	}
	return 0, false, nil
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
