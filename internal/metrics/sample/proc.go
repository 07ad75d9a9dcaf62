package sample

import (
	"bufio"
	"bytes"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// userHZ is the unit of CPU times in /proc/<pid>/stat. Linux fixes it at 100
// for user space on every architecture it supports.
const userHZ = 100

// proc is one process as /proc/<pid>/stat describes it.
type proc struct {
	ppid int
	cpu  float64 // utime+stime+cutime+cstime, seconds
	rss  int64   // bytes
}

// procTable is a snapshot of every process on the machine.
type procTable struct {
	byPID    map[int]proc
	children map[int][]int
}

// readProcTable reads /proc/*/stat once; processes that vanish while it reads
// are skipped.
func readProcTable(root string) *procTable {
	t := &procTable{byPID: map[int]proc{}, children: map[int][]int{}}
	ents, err := os.ReadDir(root)
	if err != nil {
		return t
	}
	page := int64(os.Getpagesize())
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, e.Name(), "stat"))
		if err != nil {
			continue
		}
		p, ok := parseStat(b, page)
		if !ok {
			continue
		}
		t.byPID[pid] = p
		t.children[p.ppid] = append(t.children[p.ppid], pid)
	}
	return t
}

// parseStat reads the fields of /proc/<pid>/stat that sampling needs. The
// command name (field 2) may hold spaces and parentheses, so fields are
// counted from the last ')'.
func parseStat(b []byte, page int64) (proc, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return proc{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): field n is f[n-3].
	if len(f) < 22 {
		return proc{}, false
	}
	num := func(n int) int64 {
		v, _ := strconv.ParseInt(f[n-3], 10, 64)
		return v
	}
	ticks := num(14) + num(15) + num(16) + num(17)
	return proc{ppid: int(num(4)), cpu: float64(ticks) / userHZ, rss: num(24) * page}, true
}

func (t *procTable) alive(pid int) bool {
	if t == nil {
		return false
	}
	_, ok := t.byPID[pid]
	return ok
}

// childrenOf returns the direct children of pid.
func (t *procTable) childrenOf(pid int) []int {
	if t == nil {
		return nil
	}
	return t.children[pid]
}

// tree sums CPU and memory over roots and all their descendants.
func (t *procTable) tree(roots []int) usage {
	var u usage
	if t == nil {
		return u
	}
	seen := map[int]bool{}
	queue := append([]int(nil), roots...)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		p, ok := t.byPID[pid]
		if !ok || seen[pid] {
			continue
		}
		seen[pid] = true
		u.procs++
		u.cpu += p.cpu
		u.rss += p.rss
		queue = append(queue, t.children[pid]...)
	}
	return u
}

// readPIDFile reads the first number of dir/name ("<pid>" or "<pid> <more>").
func readPIDFile(dir, name string) (int, bool) {
	if dir == "" {
		return 0, false
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	pid, err := strconv.Atoi(f[0])
	return pid, err == nil && pid > 0
}

// cgroupUsage is what an attempt's memory group reports.
type cgroupUsage struct {
	cpu    float64 // seconds; 0 when the hierarchy does not count it (v1 memory)
	memory int64   // bytes in use
}

// readCgroup reads the usage of pid's Trainyard memory group: one directly
// under a directory named "trainyard" (see the local executor's cgroup
// package). ok is false when pid is in no such group.
func readCgroup(procRoot, cgroupRoot string, pid int) (cgroupUsage, bool) {
	f, err := os.Open(filepath.Join(procRoot, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return cgroupUsage{}, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "<id>:<controllers>:<path>"; v2 is "0::<path>".
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || path.Base(path.Dir(parts[2])) != "trainyard" {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			dir := filepath.Join(cgroupRoot, filepath.FromSlash(parts[2]))
			mem, ok := readInt(filepath.Join(dir, "memory.current"))
			if !ok {
				continue
			}
			usec, _ := readKey(filepath.Join(dir, "cpu.stat"), "usage_usec")
			return cgroupUsage{cpu: float64(usec) / 1e6, memory: mem}, true
		case hasController(parts[1], "memory"):
			dir := filepath.Join(cgroupRoot, "memory", filepath.FromSlash(parts[2]))
			if mem, ok := readInt(filepath.Join(dir, "memory.usage_in_bytes")); ok {
				return cgroupUsage{memory: mem}, true
			}
		}
	}
	return cgroupUsage{}, false
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

func readInt(file string) (int64, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil
}

// readKey reads "key value" from a flat-keyed cgroup file.
func readKey(file, key string) (int64, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
