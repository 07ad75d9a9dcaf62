package local

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A dead shim leaves its attempt unsupervised: the user's process gets
// SIGKILL from the kernel (Pdeathsig), but its descendants, in particular
// those that started a session of their own or daemonized, would run on
// beside a retry. Before the executor reports such an attempt Lost it ends
// every process left of it (reap):
//
//   - with cgroups (named in the attempt's claim, shim.pid), the attempt's
//     groups are killed as a whole (cgroup v2 cgroup.kill; else frozen,
//     every process sent SIGKILL, thawed) and removed;
//   - without, every process in the shim's session or the user's process
//     group, every process the shim recorded in its procs file (the
//     tracker), and every descendant of those is stopped (SIGSTOP, so none
//     can fork), then killed, until a scan of /proc finds none.

// Bounds on ending a lost attempt: how long one try waits for its processes
// to be gone, and how often it tries again after that.
const (
	lostWait  = 5 * time.Second
	lostRetry = time.Second
)

// trackEvery is how often the shim of an attempt without cgroups records
// its descendants.
const trackEvery = 250 * time.Millisecond

// reap ends every process left of attempt a, whose shim died without
// recording an outcome, and removes its cgroups; it returns once none is
// left, trying again (and logging why) until then. ok is false when the
// executor closed first: the attempt must not be reported, and the next
// executor's Launch reaps it again.
func (e *Executor) reap(a *attempt) (ok bool) {
	for n := 1; ; n++ {
		start := time.Now()
		err := reapAttempt(a.dir)
		if err == nil {
			e.log.Debug("ended what was left of a lost attempt", "attempt", a.ref.String(), "took", time.Since(start))
			return true
		}
		e.log.Warn("cannot end every process of a lost attempt yet; it is reported lost (and may be retried) only once none is left",
			"attempt", a.ref.String(), "try", n, "err", err)
		select {
		case <-e.done:
			return false
		case <-time.After(lostRetry):
		}
	}
}

// reapAttempt ends the processes of the attempt in dir once, waiting up to
// lostWait for them to be gone.
func reapAttempt(dir string) error {
	c, err := readClaim(dir)
	switch {
	case err == nil && c.Cgroups != nil:
		if err := c.Cgroups.Kill(lostWait); err != nil {
			return err
		}
		return c.Cgroups.Remove(time.Second)
	case err == nil || errors.Is(err, fs.ErrNotExist):
		return sweep(dir, time.Now().Add(lostWait))
	default:
		return err
	}
}

// sweep ends the attempt's processes found without cgroups (see above),
// until deadline.
//
// An attempt of a shared supervisor (claimRecord.Shared) shares the
// supervisor's session with the supervisor's other attempts: while the
// supervisor lives, only the user's process group and session, the
// processes recorded and their descendants are ended; once it is dead,
// every attempt it ran is lost, and its session is ended too.
func sweep(dir string, deadline time.Time) error {
	c, err := readClaim(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no shim claimed the attempt: nothing was started
	}
	if err != nil {
		return err
	}
	shim := c.Shim
	child := 0
	if b, err := readSmall(filepath.Join(dir, childPIDFile)); err == nil {
		child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	recorded := readProcs(filepath.Join(dir, procsFile))
	members := func() []int {
		if c.Shared && shim.alive() {
			return sharedAttemptProcs(procTable(), shim, child, recorded)
		}
		return attemptProcs(procTable(), shim, child, recorded)
	}
	for {
		pids := members()
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d processes of the attempt still run: %v", len(pids), pids)
		}
		// Stop them all first, so that none forks while they are killed;
		// scan again until no new one appears.
		stopped := map[int]bool{}
		for more := pids; len(more) > 0 && time.Now().Before(deadline); {
			for _, pid := range more {
				_ = syscall.Kill(pid, syscall.SIGSTOP)
				stopped[pid] = true
			}
			more = slices.DeleteFunc(members(), func(pid int) bool { return stopped[pid] })
		}
		for pid := range stopped {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// procInfo is what /proc/<pid>/stat says about a process.
type procInfo struct {
	ppid, pgrp, sid int
	start           uint64
	dead            bool // a zombie
}

// procTable reads every process's parent, process group, session and start
// time.
func procTable() map[int]procInfo {
	ents, _ := os.ReadDir("/proc")
	t := make(map[int]procInfo, len(ents))
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if p, ok := readProcInfo(pid); ok {
			t[pid] = p
		}
	}
	return t
}

// readProcInfo reads /proc/<pid>/stat; ok is false once the process is gone.
func readProcInfo(pid int) (p procInfo, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return p, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return p, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return p, false
	}
	p.ppid, _ = strconv.Atoi(f[1])
	p.pgrp, _ = strconv.Atoi(f[2])
	p.sid, _ = strconv.Atoi(f[3])
	p.start, _ = strconv.ParseUint(f[19], 10, 64)
	p.dead = f[0] == "Z" || f[0] == "X"
	return p, true
}

// childrenFiles reports whether this kernel lists each thread's children.
var childrenFiles = sync.OnceValue(func() bool {
	_, err := os.Stat("/proc/thread-self/children")
	return err == nil
})

// procTree reads root and its descendants, following each thread's
// children (/proc/<pid>/task/<tid>/children), so its cost is the
// attempt's processes and threads, not the machine's. ok is false where
// the kernel has no children files (CONFIG_PROC_CHILDREN); procTable is
// the way there. Like a scan of /proc it is a snapshot a fork can race.
func procTree(root int) (t map[int]procInfo, ok bool) {
	if !childrenFiles() {
		return nil, false
	}
	p, alive := readProcInfo(root)
	if !alive {
		return map[int]procInfo{}, true
	}
	t = map[int]procInfo{root: p}
	for queue := []int{root}; len(queue) > 0; {
		pid := queue[0]
		queue = queue[1:]
		dir := "/proc/" + strconv.Itoa(pid) + "/task/"
		tids, err := os.ReadDir(dir)
		if err != nil {
			continue // gone
		}
		for _, tid := range tids {
			b, _ := os.ReadFile(dir + tid.Name() + "/children")
			for f := range strings.FieldsSeq(string(b)) {
				child, err := strconv.Atoi(f)
				if err != nil || child <= 0 {
					continue
				}
				if _, seen := t[child]; seen {
					continue
				}
				if c, alive := readProcInfo(child); alive {
					t[child] = c
					queue = append(queue, child)
				}
			}
		}
	}
	return t, true
}

// attemptProcs lists the live processes of an attempt in the table: those
// started since its shim in the shim's session or the user's process
// group (child; 0: unknown), those recorded (pid → start time), and their
// descendants; never the caller or init.
func attemptProcs(t map[int]procInfo, shim procID, child int, recorded map[int]uint64) []int {
	in := map[int]bool{}
	for pid, p := range t {
		if p.start < shim.Start {
			continue
		}
		if p.sid == shim.PID || (child > 0 && p.pgrp == child) {
			in[pid] = true
		}
		if start, ok := recorded[pid]; ok && start == p.start {
			in[pid] = true
		}
	}
	return withDescendants(t, in, shim.PID)
}

// sharedAttemptProcs lists the live processes of an attempt of the shared
// supervisor sup in the table: the user's process child, those in its
// process group or in a session it leads, those recorded (pid → start
// time), and their descendants, all started since the supervisor; never
// the caller, init or the supervisor, whose other children belong to other
// attempts.
func sharedAttemptProcs(t map[int]procInfo, sup procID, child int, recorded map[int]uint64) []int {
	in := map[int]bool{}
	for pid, p := range t {
		if p.start < sup.Start || pid == sup.PID {
			continue
		}
		if child > 0 && (pid == child || p.pgrp == child || p.sid == child) {
			in[pid] = true
		}
		if start, ok := recorded[pid]; ok && start == p.start {
			in[pid] = true
		}
	}
	return withDescendants(t, in, sup.PID)
}

// withDescendants adds to the processes in the set their descendants in
// the table (never through the supervisor, pid sup) and lists those alive,
// sorted, leaving out the caller, init and the supervisor.
func withDescendants(t map[int]procInfo, in map[int]bool, sup int) []int {
	for grew := true; grew; {
		grew = false
		for pid, p := range t {
			if !in[pid] && in[p.ppid] && pid != sup {
				in[pid], grew = true, true
			}
		}
	}
	self := os.Getpid()
	var out []int
	for pid := range in {
		if pid != self && pid != 1 && pid != sup && !t[pid].dead {
			out = append(out, pid)
		}
	}
	slices.Sort(out)
	return out
}

// readProcs reads a procs file: "<pid> <start>" lines.
func readProcs(path string) map[int]uint64 {
	b, _ := os.ReadFile(path)
	out := map[int]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		if id, err := parseProcID([]byte(line)); err == nil {
			out[id.PID] = id.Start
		}
	}
	return out
}

// tracker records, for an attempt without cgroups, the shim's descendants
// every trackEvery in the procs file, so that whoever finds the shim dead
// can end them even after they left its session and their parents died
// (the shim is their subreaper while it lives; after, init is).
type tracker struct {
	quit chan struct{}
	done chan struct{}
}

// startTracker starts recording the attempt's processes in dir. Under a
// shared supervisor (child > 0), whose children are not all the
// attempt's, it records the user's process (child), its group and
// session, and their descendants, and keeps every process it recorded
// while it lives: one orphaned (re-parented to the supervisor) is still
// the attempt's.
func startTracker(dir string, shim procID, child int) *tracker {
	tr := &tracker{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		t := time.NewTicker(trackEvery)
		defer t.Stop()
		var last string
		recorded := map[int]uint64{}
		for {
			var table map[int]procInfo
			if child > 0 {
				table = procTable()
			} else if t, ok := procTree(shim.PID); ok {
				// The shim is its descendants' subreaper: every process of
				// the attempt is one of them while it lives.
				table = t
			} else {
				table = procTable()
			}
			var pids []int
			if child > 0 {
				pids = sharedAttemptProcs(table, shim, child, recorded)
				clear(recorded)
				for _, pid := range pids {
					recorded[pid] = table[pid].start
				}
			} else {
				pids = attemptProcs(table, procID{PID: shim.PID}, 0, nil)
			}
			var buf strings.Builder
			for _, pid := range pids {
				fmt.Fprintf(&buf, "%d %d\n", pid, table[pid].start)
			}
			if cur := buf.String(); cur != last {
				if writeFileAtomic(filepath.Join(dir, procsFile), []byte(cur), 0o600) == nil {
					last = cur
				}
			}
			select {
			case <-tr.quit:
				return
			case <-t.C:
			}
		}
	}()
	return tr
}

// stop ends the tracker; a nil tracker is stopped already.
func (tr *tracker) stop() {
	if tr == nil {
		return
	}
	close(tr.quit)
	<-tr.done
}
