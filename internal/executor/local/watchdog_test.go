package local

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/executor/local/cgroup"
)

// marked lists the live processes whose environment holds token.
func marked(token string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + ent.Name() + "/environ")
		if err != nil || !bytes.Contains(env, []byte(token)) {
			continue
		}
		if executortest.Running(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// forkingJob starts a plain background child, one in a session of its own
// (setsid), and a double-forked daemon in a session of its own whose parent
// exits, then keeps forking short-lived children.
const forkingJob = `sleep 300 &
setsid sleep 300 &
( setsid sleep 300 & ) &
( sleep 300 & exit 0 )
echo ready > ready
while :; do sleep 0.05; done`

// TestLostAttemptLeavesNoProcess: kill -9 of the shim of a job whose
// descendants left its process group and session ends every process of the
// attempt within 5s, before Lost is reported, and removes its cgroups;
// with cgroup v2, the v1 freezer, and without cgroups.
func TestLostAttemptLeavesNoProcess(t *testing.T) {
	executortest.NeedRoot(t)
	modes := map[string]string{"detected": "", "v1 freezer": filepath.Join(cgroup.DefaultMount, "freezer"), "no cgroups": "none"}
	for name, root := range modes {
		t.Run(name, func(t *testing.T) {
			if root != "" && root != "none" {
				if _, err := cgroup.DetectTracking(root); err != nil {
					t.Skipf("no %s hierarchy here: %v", name, err)
				}
			}
			self, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cfg := testConfig(self)
			cfg.CgroupTrackRoot = root
			if root == "none" {
				// Memory and CPU groups would hold the job's processes too.
				cfg.CgroupRoot, cfg.CgroupCPURoot = "none", "none"
			}
			e, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			_, tracked := e.Tracked()
			if root == "none" && tracked {
				t.Fatal("CgroupTrackRoot none still tracks with cgroups")
			}
			if root != "none" && !tracked {
				t.Skip("no cgroup hierarchy to track attempts in here")
			}
			h := executortest.NewHarness(t, e)
			token := "WATCHDOG_TEST=" + strconv.Itoa(os.Getpid()) + "-" + strings.ReplaceAll(name, " ", "-")
			l := h.Launch(t, shell(forkingJob), func(l *executor.Launch) { l.Env = append(l.Env, token) })
			h.Wait(t, l.Ref, executor.Started)
			executortest.WaitFiles(t, l.WorkDir, "ready")
			var before []int
			waitFor(t, "the job's 6 processes", func() bool { before = marked(token); return len(before) >= 6 })
			t.Cleanup(func() {
				for _, pid := range marked(token) {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			var cg cgroup.Attempt
			if tracked {
				c, err := readClaim(l.Dir)
				if err != nil || c.Cgroups == nil {
					t.Fatalf("the claim names no cgroups: %+v, %v", c, err)
				}
				cg = *c.Cgroups
			} else {
				// Without cgroups, the daemon that left the session is found
				// only through the shim's record of its descendants.
				waitFor(t, "the shim to record every process", func() bool {
					rec := readProcs(filepath.Join(l.Dir, procsFile))
					for _, pid := range marked(token) {
						if _, ok := rec[pid]; !ok {
							return false
						}
					}
					return true
				})
			}

			killed := time.Now()
			if err := syscall.Kill(shimID(t, l).PID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "no process of the attempt", func() bool { return len(marked(token)) == 0 })
			took := time.Since(killed)
			t.Logf("%d processes ended %s after the shim was killed", len(before), took)
			if took > 5*time.Second {
				t.Errorf("processes outlived the shim by %s, want at most 5s", took)
			}
			ev := h.Wait(t, l.Ref, executor.Lost)
			if left := marked(token); len(left) > 0 {
				t.Errorf("Lost reported while %v still run", left)
			}
			if !strings.Contains(ev.Message, "without recording an outcome") {
				t.Errorf("Lost message %q does not say what happened", ev.Message)
			}
			for _, d := range cg.Dirs() {
				if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("cgroup %s of the lost attempt still exists: %v", d, err)
				}
			}
		})
	}
}

// TestShimOutsideJobMemoryGroup: the shim is never in the job's memory
// group, so a job that reaches its limit while logging fast ends OOMKilled
// (never lost) and its log goes on to the end.
func TestShimOutsideJobMemoryGroup(t *testing.T) {
	e := newExec(t)
	if _, ok := e.LimitsEnforced(); !ok {
		msg := "no writable cgroup memory controller on this machine; memory limits are not enforced"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + "; CI machines must have one")
		}
		t.Skip(msg)
	}
	g := newGate(t)
	h := executortest.NewHarness(t, e)
	job := `yes 'a log line written as fast as the pipe takes it, to keep the shim busy' &
read x < ` + string(g) + `
exec tail /dev/zero # one ever longer line: grows until the limit`
	l := h.Launch(t, shell(job), func(l *executor.Launch) { l.Resources.Memory = 64 << 20 })
	started := h.Wait(t, l.Ref, executor.Started)
	shim := memoryCgroup(t, shimID(t, l).PID)
	child := memoryCgroup(t, started.PID)
	if shim == child || !strings.Contains(child, "trainyard/") {
		t.Errorf("shim's memory cgroup %q, job's %q: want the job in its own trainyard group, the shim elsewhere", shim, child)
	}
	g.release(t)
	ev := h.Wait(t, l.Ref, executor.Exited)
	if ev.State != domain.AttemptFailed || ev.Reason != domain.ReasonOOMKilled {
		t.Fatalf("got %s/%s (%q), want failed/OOMKilled", ev.State, ev.Reason, ev.Message)
	}
	n := 0
	for _, ln := range executortest.ReadLog(t, l.LogPath) {
		if strings.HasPrefix(ln.Text, "a log line") {
			n++
		}
	}
	if n < 1000 {
		t.Errorf("log has %d lines of the fast writer, want at least 1000", n)
	}
}

// memoryCgroup is pid's group in the memory hierarchy (v1) or the unified
// one (v2, when it has the memory controller).
func memoryCgroup(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	v2 := ""
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if strings.Contains(","+parts[1]+",", ",memory,") {
			return parts[2]
		}
		if parts[0] == "0" {
			v2 = parts[2]
		}
	}
	return v2
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(executortest.WaitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", executortest.WaitTimeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestProcTreeFindsDescendants: the tracker's tree walk finds the same
// descendants, with the same details, as a scan of all of /proc, and
// nothing else.
func TestProcTreeFindsDescendants(t *testing.T) {
	if !childrenFiles() {
		t.Skip("this kernel has no /proc/<pid>/task/<tid>/children; the tracker scans /proc")
	}
	dir := t.TempDir()
	cmd := exec.Command("sh", "-c", "sleep 300 & (sleep 300 & wait) & echo ready > ready; wait")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range descendantsOf(procTable(), cmd.Process.Pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		cmd.Process.Kill()
		cmd.Wait()
	})
	executortest.WaitFiles(t, dir, "ready")
	self := os.Getpid()
	waitFor(t, "the shell's 3 descendants", func() bool { return len(descendantsOf(procTable(), cmd.Process.Pid)) >= 3 }) // the two sleeps and the subshell

	tree, ok := procTree(self)
	if !ok {
		t.Fatal("procTree: no children files, though the kernel has them")
	}
	table := procTable()
	want := map[int]bool{self: true}
	for _, pid := range descendantsOf(table, self) {
		want[pid] = true
	}
	for pid := range want {
		got, ok := tree[pid]
		if !ok {
			t.Errorf("process %d (parent %d) is a descendant, but the tree walk missed it", pid, table[pid].ppid)
			continue
		}
		if got != table[pid] {
			t.Errorf("process %d: tree walk read %+v, scan %+v", pid, got, table[pid])
		}
	}
	for pid := range tree {
		if !want[pid] && table[pid].start != 0 && !table[pid].dead {
			t.Errorf("process %d is not a descendant, but the tree walk lists it", pid)
		}
	}
	if _, ok := tree[1]; ok {
		t.Error("the tree walk lists init")
	}
	if gone, ok := procTree(1 << 30); !ok || len(gone) != 0 {
		t.Errorf("procTree of a process that does not exist = %v, %v; want empty, true", gone, ok)
	}
}

// descendantsOf lists root's live descendants in the table, as the
// scan's own rule finds them.
func descendantsOf(t map[int]procInfo, root int) []int {
	return withDescendants(t, map[int]bool{root: true}, root)
}
