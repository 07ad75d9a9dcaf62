package local

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
)

// python returns the real python3 interpreter (not a version manager's
// shim, which needs its own environment), or skips.
func python(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Skipf("no python3: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func newExecWith(t *testing.T, mod func(*Config)) *Executor {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(self)
	mod(&cfg)
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// testPorts is a range of n ports, away from the defaults, that other test
// runs on this machine are unlikely to pick at the same time.
func testPorts(n int) PortRange {
	// Below the kernel's ephemeral ports (32768 and up by default), which
	// any test's outgoing connection or port-0 listener may take for a
	// moment and make "in use by other programs".
	first := 12000 + rand.IntN(20000-n)
	return PortRange{First: first, Last: first + n - 1}
}

func envOf(t *testing.T, l executor.Launch) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(l.WorkDir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, kv := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// TestRankAndDeviceEnv: the executor sets the device and rank environment
// from the placement, over whatever Env says, and the thread counts from
// resources.cpus unless Env sets them.
func TestRankAndDeviceEnv(t *testing.T) {
	r := testPorts(50)
	h := executortest.NewHarness(t, newExecWith(t, func(c *Config) { c.Ports = r }))
	l := h.Launch(t, shell("env > env"), func(l *executor.Launch) {
		l.Placement = executor.Local("here", []int{1, 3})
		l.Resources.CPUs = 1.5
		l.Env = append(l.Env, "CUDA_VISIBLE_DEVICES=0,1,2,3", "RANK=7", "MKL_NUM_THREADS=5")
	})
	if ev := h.Wait(t, l.Ref, executor.Exited); ev.State != domain.AttemptSucceeded {
		t.Fatalf("exited %s: %s", ev.State, ev.Message)
	}
	env := envOf(t, l)
	for k, want := range map[string]string{
		"CUDA_VISIBLE_DEVICES": "1,3", "WORLD_SIZE": "1", "RANK": "0", "NODE_RANK": "0", "LOCAL_RANK": "0",
		"LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "5",
	} {
		if env[k] != want {
			t.Errorf("%s=%q, want %q", k, env[k], want)
		}
	}
	port, err := strconv.Atoi(env["MASTER_PORT"])
	if err != nil || port < r.First || port > r.Last {
		t.Errorf("MASTER_PORT=%q, want a port in %s", env["MASTER_PORT"], r)
	}
	// A job without GPUs sees none; one without cpus gets no thread count.
	l = h.Launch(t, shell("env > env"), nil)
	h.Wait(t, l.Ref, executor.Exited)
	env = envOf(t, l)
	if v, ok := env["CUDA_VISIBLE_DEVICES"]; !ok || v != "" {
		t.Errorf("no GPUs: CUDA_VISIBLE_DEVICES=%q (set: %v), want set and empty", v, ok)
	}
	if _, ok := env["OMP_NUM_THREADS"]; ok {
		t.Errorf("no cpus: OMP_NUM_THREADS=%q, want unset", env["OMP_NUM_THREADS"])
	}
}

// TestConcurrentJobsGetDistinctMasterPorts is the acceptance test of
// per-job rendezvous ports: jobs that each bind MASTER_PORT and hold it
// until all of them have bound run side by side without EADDRINUSE.
func TestConcurrentJobsGetDistinctMasterPorts(t *testing.T) {
	py := python(t)
	const jobs = 3
	r := testPorts(8)
	h := executortest.NewHarness(t, newExecWith(t, func(c *Config) { c.Ports = r }))
	shared := filepath.Join(t.TempDir(), "ports")
	script := fmt.Sprintf(`
import os, socket, time
s = socket.socket()
s.bind(("", int(os.environ["MASTER_PORT"])))
s.listen()
with open(%q, "a") as f:
    f.write(os.environ["MASTER_PORT"] + "\n")
deadline = time.time() + 20
while len(open(%q).read().split()) < %d:
    if time.time() > deadline:
        raise SystemExit("the others never bound their ports")
    time.sleep(0.05)
`, shared, shared, jobs)
	var ls []executor.Launch
	for range jobs {
		ls = append(ls, h.Launch(t, []string{py, "-c", script}, nil))
	}
	for _, l := range ls {
		if ev := h.Wait(t, l.Ref, executor.Exited); ev.State != domain.AttemptSucceeded {
			b, _ := os.ReadFile(l.LogPath)
			t.Fatalf("job %s: %s (%s)\n%s", l.Ref, ev.State, ev.Message, b)
		}
	}
	b, err := os.ReadFile(shared)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(b))
	slices.Sort(got)
	if len(slices.Compact(slices.Clone(got))) != jobs {
		t.Fatalf("ports %v, want %d distinct", got, jobs)
	}
}

// TestPortsReserve: a port held by an attempt or in use by another program
// is never handed out; release frees it; an exhausted range says so.
func TestPortsReserve(t *testing.T) {
	p := newPorts(PortRange{First: 100, Last: 102})
	busy := map[int]bool{101: true}
	p.free = func(port int) bool { return !busy[port] }
	a, b, c := executor.Ref{JobID: 1, Attempt: 1}, executor.Ref{JobID: 2, Attempt: 1}, executor.Ref{JobID: 3, Attempt: 1}
	pa, err := p.reserve(a)
	if err != nil || pa != 100 {
		t.Fatalf("first reserve = %d, %v; want 100", pa, err)
	}
	if again, _ := p.reserve(a); again != pa {
		t.Errorf("reserve again = %d, want the same %d", again, pa)
	}
	pb, err := p.reserve(b)
	if err != nil || pb != 102 {
		t.Fatalf("second reserve = %d, %v; want 102 (101 is busy)", pb, err)
	}
	if _, err := p.reserve(c); !errors.Is(err, errNoPort) {
		t.Fatalf("third reserve: %v, want errNoPort", err)
	}
	p.release(a)
	if pc, err := p.reserve(c); err != nil || pc != 100 {
		t.Fatalf("after release: %d, %v; want 100", pc, err)
	}
	// An attempt found running holds its recorded port again.
	p.release(b)
	p.hold(executor.Ref{JobID: 4, Attempt: 1}, 102)
	if _, err := p.reserve(b); !errors.Is(err, errNoPort) {
		t.Errorf("reserve with 102 held on reattach: %v, want errNoPort", err)
	}
}

// TestMasterPortSurvivesRestart: an executor started after the server
// restarted holds the port of an attempt it reattached to, until the
// attempt ends, even while nothing binds it.
func TestMasterPortSurvivesRestart(t *testing.T) {
	r := testPorts(1)
	g := newGate(t)
	a := newExecWith(t, func(c *Config) { c.Ports = r })
	ha := executortest.NewHarness(t, a)
	l := ha.Launch(t, shell("read x < "+string(g)), nil)
	ha.Wait(t, l.Ref, executor.Started)
	a.Close()

	b := newExecWith(t, func(c *Config) { c.Ports = r })
	hb := executortest.NewHarness(t, b)
	if err := b.Launch(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	other := l
	other.Ref = executor.Ref{JobID: l.JobID + 1_000_000, Attempt: 1}
	other.Argv = []string{"true"}
	other.Dir = filepath.Join(t.TempDir(), "attempt")
	other.LogPath = filepath.Join(other.Dir, "output.log")
	if err := b.Launch(t.Context(), other); err == nil || !strings.Contains(err.Error(), "no free rendezvous port") {
		t.Fatalf("launch beside the reattached attempt: %v, want no free rendezvous port", err)
	}
	g.release(t)
	hb.Wait(t, l.Ref, executor.Exited)
	if n := b.ports.held(); n != 0 {
		t.Fatalf("%d ports held after the attempt ended, want 0", n)
	}
	if err := b.Launch(t.Context(), other); err != nil {
		t.Fatalf("launch after the attempt ended: %v", err)
	}
	hb.Wait(t, other.Ref, executor.Exited)
}

// TestCPUQuota is the acceptance test of resources.cpus: a job of one CPU
// that keeps two processes busy gets about one CPU's worth of time.
func TestCPUQuota(t *testing.T) {
	e := newExec(t)
	if !e.Capabilities().CPULimits {
		msg := "no writable cgroup cpu controller on this machine (see cgroup.DetectCPU)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + "; CI machines must have one")
		}
		t.Skip(msg)
	}
	h := executortest.NewHarness(t, e)
	spin := "timeout 3 sh -c 'while :; do :; done'"
	l := h.Launch(t, shell(spin+" & "+spin+" & wait"), func(l *executor.Launch) { l.Resources.CPUs = 1 })
	h.Wait(t, l.Ref, executor.Started)
	// The job's group has the quota while it runs.
	var quota float64
	waitFor(t, "the job's CPU group", func() bool {
		c, err := readClaim(l.Dir)
		if err != nil || c.Cgroups == nil || c.Cgroups.CPUGroup() == nil {
			return false
		}
		quota = c.Cgroups.CPUGroup().CPUQuota()
		return true
	})
	if quota != 1 {
		t.Errorf("the job's group has a quota of %g CPUs, want 1", quota)
	}
	if ev := h.Wait(t, l.Ref, executor.Exited); ev.Reason != domain.ReasonCompleted && ev.Reason != domain.ReasonExitCode {
		t.Fatalf("exited %s/%s: %s", ev.State, ev.Reason, ev.Message)
	}
	rec, err := readExit(l.Dir)
	if err != nil {
		t.Fatal(err)
	}
	wall := rec.FinishedAt.Sub(rec.StartedAt).Seconds()
	ratio := rec.CPUSeconds / wall
	t.Logf("cpus: 1, two busy processes: %.2fs CPU in %.2fs (%.2f CPUs)", rec.CPUSeconds, wall, ratio)
	if ratio > 1.2 {
		t.Errorf("used %.2f CPUs on average, want at most 1.2 (quota 1)", ratio)
	}
}

// TestMemoryPeakFromCgroup: the exit record's memory peak is the job's
// cgroup's, which counts processes together, even without a limit.
func TestMemoryPeakFromCgroup(t *testing.T) {
	e := newExec(t)
	if _, ok := e.LimitsEnforced(); !ok {
		t.Skip("no writable cgroup memory controller on this machine (see cgroup.Detect)")
	}
	py := python(t)
	// Two processes of 48MiB each, alive at the same time.
	hold := fmt.Sprintf(`%s -c 'import os, time; b = bytearray(48 << 20); open(os.environ["F"] + str(os.getpid()), "w").close(); time.sleep(1.5)'`, py)
	h := executortest.NewHarness(t, e)
	l := h.Launch(t, shell("F=$PWD/m "+hold+" & F=$PWD/m "+hold+" & wait"), nil)
	ev := h.Wait(t, l.Ref, executor.Exited)
	if ev.State != domain.AttemptSucceeded {
		t.Fatalf("exited %s: %s", ev.State, ev.Message)
	}
	rec, err := readExit(l.Dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("memory peak %s (largest process %s)", domain.ByteSize(rec.MemoryPeak), domain.ByteSize(rec.MaxRSS))
	if rec.MemoryPeak < 96<<20 || ev.Usage.MaxRSS != domain.ByteSize(rec.MemoryPeak) {
		t.Errorf("memory peak %d, usage %d; want the group's peak, at least 96MiB, in both", rec.MemoryPeak, ev.Usage.MaxRSS)
	}
}
