package local

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
)

// shimPIDs lists the distinct supervisors of the launches.
func shimPIDs(t *testing.T, ls ...executor.Launch) []int {
	t.Helper()
	var pids []int
	for _, l := range ls {
		if pid := shimID(t, l).PID; !slices.Contains(pids, pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestAttemptsAreIndependent: beside an attempt that runs on, others are
// stopped, kill their own process group, run out of memory, or fork and
// exit, and that attempt neither notices nor ends; under a shared
// supervisor all run in one process.
func TestAttemptsAreIndependent(t *testing.T) {
	e := newExec(t)
	h := executortest.NewHarness(t, e)
	g := newGate(t)
	token := "INDEPENDENT_TEST=" + strconv.Itoa(os.Getpid())
	steady := h.Launch(t, shell(`sleep 300 & read x < `+string(g)+`; echo steady-done`), func(l *executor.Launch) { l.Env = append(l.Env, token) })
	h.Wait(t, steady.Ref, executor.Started)

	stopped := h.Launch(t, shell("sleep 300"), nil)
	selfKill := h.Launch(t, shell("sleep 300 & kill -9 0"), nil)
	forkExit := h.Launch(t, shell("(sleep 300 &) ; exit 3"), nil)
	ls := []executor.Launch{steady, stopped, selfKill, forkExit}
	_, limits := e.LimitsEnforced()
	var oom executor.Launch
	if limits {
		oom = h.Launch(t, shell("exec tail /dev/zero"), func(l *executor.Launch) { l.Resources.Memory = 32 << 20 })
		ls = append(ls, oom)
	}
	h.Wait(t, stopped.Ref, executor.Started)
	if err := e.Stop(context.Background(), stopped.Ref, executor.StopRequest{Grace: time.Second}); err != nil {
		t.Fatal(err)
	}
	if ev := h.Wait(t, stopped.Ref, executor.Exited); ev.State != domain.AttemptCanceled {
		t.Errorf("stopped attempt: %s/%s (%s), want canceled", ev.State, ev.Reason, ev.Message)
	}
	if ev := h.Wait(t, selfKill.Ref, executor.Exited); ev.State != domain.AttemptFailed || !strings.Contains(ev.Message, "SIGKILL") {
		t.Errorf("attempt that killed its process group: %s/%s (%s), want failed by SIGKILL", ev.State, ev.Reason, ev.Message)
	}
	if ev := h.Wait(t, forkExit.Ref, executor.Exited); ev.State != domain.AttemptFailed || ev.ExitCode == nil || *ev.ExitCode != 3 {
		b, _ := os.ReadFile(filepath.Join(forkExit.Dir, shimLogFile))
		t.Errorf("attempt that forked and exited: %s/%s (%s), want failed with code 3; %s:\n%s", ev.State, ev.Reason, ev.Message, shimLogFile, b)
	}
	if limits {
		if ev := h.Wait(t, oom.Ref, executor.Exited); ev.Reason != domain.ReasonOOMKilled {
			t.Errorf("attempt over its memory limit: %s/%s (%s), want OOMKilled", ev.State, ev.Reason, ev.Message)
		}
	}
	if e.sharedMode {
		if pids := shimPIDs(t, ls...); len(pids) != 1 {
			t.Errorf("the attempts ran under supervisors %v, want one shared", pids)
		}
	}
	for _, ev := range h.Events(steady.Ref) {
		if ev.Kind != executor.Started {
			t.Fatalf("the steady attempt saw %s (%s) while the others ended", ev.Kind, ev.Message)
		}
	}
	if n := len(marked(token)); n != 2 {
		t.Fatalf("the steady attempt has %d processes left, want its shell and its sleep", n)
	}
	g.release(t)
	if ev := h.Wait(t, steady.Ref, executor.Exited); ev.State != domain.AttemptSucceeded {
		t.Fatalf("steady attempt: %s/%s (%s), want succeeded", ev.State, ev.Reason, ev.Message)
	}
	waitFor(t, "no process of the steady attempt", func() bool { return len(marked(token)) == 0 })
}

// TestSupervisorKilled: SIGKILL to the supervisor of two running attempts
// (one process, when shared) ends both: each is reported Lost, and none
// of their processes, those that left the process group included, is left.
func TestSupervisorKilled(t *testing.T) {
	executortest.NeedRoot(t)
	e := newExec(t)
	h := executortest.NewHarness(t, e)
	token := "SUPERVISOR_KILLED_TEST=" + strconv.Itoa(os.Getpid())
	var ls []executor.Launch
	for range 2 {
		l := h.Launch(t, shell(forkingJob), func(l *executor.Launch) { l.Env = append(l.Env, token) })
		ls = append(ls, l)
	}
	for _, l := range ls {
		h.Wait(t, l.Ref, executor.Started)
		executortest.WaitFiles(t, l.WorkDir, "ready")
	}
	t.Cleanup(func() {
		for _, pid := range marked(token) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	waitFor(t, "the jobs' 12 processes", func() bool { return len(marked(token)) >= 12 })
	if _, tracked := e.Tracked(); !tracked {
		for _, l := range ls {
			waitFor(t, "the shim to record every process", func() bool {
				return len(readProcs(filepath.Join(l.Dir, procsFile))) >= 6
			})
		}
	}
	pids := shimPIDs(t, ls...)
	if e.sharedMode && len(pids) != 1 {
		t.Fatalf("the attempts run under supervisors %v, want one shared", pids)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range ls {
		ev := h.Wait(t, l.Ref, executor.Lost)
		if !strings.Contains(ev.Message, "without recording an outcome") {
			t.Errorf("Lost message %q does not say what happened", ev.Message)
		}
	}
	if left := marked(token); len(left) > 0 {
		t.Errorf("Lost reported while %v still run", left)
	}
	// The next launch gets a supervisor again.
	l := h.Launch(t, shell("echo again"), nil)
	if ev := h.Wait(t, l.Ref, executor.Exited); ev.State != domain.AttemptSucceeded {
		t.Fatalf("launch after the supervisor died: %s (%s)", ev.State, ev.Message)
	}
	if pid := shimID(t, l).PID; slices.Contains(pids, pid) {
		t.Errorf("the launch after the supervisor died claims the dead one, pid %d", pid)
	}
}

// TestSharedSupervisorOutlivesTheServer: once its executor closed, a
// shared supervisor takes no new attempt but supervises its running one
// to its end (a new executor reattaches and reports it), then exits.
func TestSharedSupervisorOutlivesTheServer(t *testing.T) {
	a := newExec(t)
	if !a.sharedMode {
		t.Skip("attempts have supervisors of their own here")
	}
	g := newGate(t)
	ha := executortest.NewHarness(t, a)
	l := ha.Launch(t, shell("read x < "+string(g)), nil)
	ha.Wait(t, l.Ref, executor.Started)
	sup := shimID(t, l)
	a.Close()
	if !sup.alive() {
		t.Fatal("the shared supervisor ended with its executor while an attempt ran")
	}
	hb := executortest.NewHarness(t, newExec(t))
	if err := hb.Exec.Launch(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	g.release(t)
	if ev := hb.Wait(t, l.Ref, executor.Exited); ev.State != domain.AttemptSucceeded {
		t.Fatalf("reattached attempt: %s (%s)", ev.State, ev.Message)
	}
	waitFor(t, "the old supervisor to exit after its last attempt", func() bool { return !sup.alive() })
}

// TestSharedSupervisorKeepsNothingOfEndedAttempts: the shared supervisor
// lives on; the attempts it ran leave it no descriptor or child (the Go
// runtime keeps the threads it made for a while).
func TestSharedSupervisorKeepsNothingOfEndedAttempts(t *testing.T) {
	e := newExec(t)
	if !e.sharedMode {
		t.Skip("attempts have supervisors of their own here")
	}
	h := executortest.NewHarness(t, e)
	g := newGate(t)
	keep := h.Launch(t, shell("read x < "+string(g)), nil) // keeps the supervisor running
	h.Wait(t, keep.Ref, executor.Started)
	sup := shimID(t, keep).PID
	count := func(what string) int {
		ents, _ := os.ReadDir("/proc/" + strconv.Itoa(sup) + "/" + what)
		return len(ents)
	}
	children := func() int {
		n := 0
		for _, p := range procTable() {
			if p.ppid == sup && !p.dead {
				n++
			}
		}
		return n
	}
	batch := func(n int) {
		var ls []executor.Launch
		for range n {
			ls = append(ls, h.Launch(t, shell("echo out; echo err >&2; (sleep 300 &); exit 1"), nil))
		}
		for _, l := range ls {
			h.Wait(t, l.Ref, executor.Exited)
		}
	}
	batch(10)
	var fds, threads int
	waitFor(t, "the first batch's descriptors to close", func() bool {
		fds, threads = count("fd"), count("task")
		return children() == 1
	})
	t.Logf("after 10 attempts: %d descriptors, %d threads", fds, threads)
	batch(30)
	deadline := time.Now().Add(executortest.WaitTimeout)
	for count("fd") > fds || children() != 1 {
		if time.Now().After(deadline) {
			links := []string{}
			ents, _ := os.ReadDir("/proc/" + strconv.Itoa(sup) + "/fd")
			for _, ent := range ents {
				l, _ := os.Readlink("/proc/" + strconv.Itoa(sup) + "/fd/" + ent.Name())
				links = append(links, ent.Name()+"→"+l)
			}
			t.Fatalf("after 30 more attempts: %d descriptors (%v), %d children; want %d, 1", len(ents), links, children(), fds)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("after 40 attempts: %d threads", count("task"))
	g.release(t)
	h.Wait(t, keep.Ref, executor.Exited)
}

// panicEnv, in a test shim's environment, makes the supervision of every
// attempt whose argv holds its value panic once the process started.
const panicEnv = "TRAINYARD_TEST_SHIM_PANIC"

// TestSupervisorPanicEndsOneAttempt: a panic in the shared supervisor's
// code for one attempt ends that attempt, failed with the panic's text and
// none of its processes left, while another runs on to its end.
func TestSupervisorPanicEndsOneAttempt(t *testing.T) {
	marker := "panic-" + strconv.Itoa(os.Getpid())
	t.Setenv(panicEnv, marker) // the supervisor, started by the first launch, inherits it
	e := newExec(t)
	if !e.sharedMode {
		t.Skip("attempts have supervisors of their own here")
	}
	h := executortest.NewHarness(t, e)
	g := newGate(t)
	steady := h.Launch(t, shell("read x < "+string(g)+"; echo steady-done"), nil)
	h.Wait(t, steady.Ref, executor.Started)
	token := "PANIC_TEST=" + strconv.Itoa(os.Getpid())
	bad := h.Launch(t, []string{"/bin/sh", "-c", "sleep 300 & wait", marker}, func(l *executor.Launch) { l.Env = append(l.Env, token) })
	ev := h.Wait(t, bad.Ref, executor.Exited)
	if ev.State != domain.AttemptFailed || !strings.Contains(ev.Message, "a test's panic") {
		t.Errorf("attempt whose supervision panicked: %s/%s (%s), want failed with the panic", ev.State, ev.Reason, ev.Message)
	}
	waitFor(t, "no process of the failed attempt", func() bool { return len(marked(token)) == 0 })
	g.release(t)
	if ev := h.Wait(t, steady.Ref, executor.Exited); ev.State != domain.AttemptSucceeded {
		t.Fatalf("the other attempt: %s (%s)", ev.State, ev.Message)
	}
	if !shimID(t, steady).alive() {
		t.Error("the shared supervisor died of one attempt's panic")
	}
}

// TestIsolationStaysWithItsAttempt: an isolated attempt's surroundings
// (no_new_privs, its umask, its mount namespace with the private /tmp) are
// its thread's under the shared supervisor: once it ended, no thread of
// the supervisor has any of them.
func TestIsolationStaysWithItsAttempt(t *testing.T) {
	executortest.NeedRoot(t)
	e := isolatedExec(t, 910_300)
	if !e.sharedMode {
		t.Skip("attempts have supervisors of their own here")
	}
	h := executortest.NewHarness(t, e)
	a := isolatedLaunch(t, h, "alpha", []string{"sleep", "300"})
	started := h.Wait(t, a.Ref, executor.Started)
	sup := shimID(t, a).PID
	ns := func(pid int) string {
		l, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/mnt")
		return l
	}
	if !e.noMountNS.Load() && ns(started.PID) == ns(os.Getpid()) {
		t.Error("the isolated job shares the host's mount namespace")
	}
	if err := e.Stop(context.Background(), a.Ref, executor.StopRequest{Grace: time.Second}); err != nil {
		t.Fatal(err)
	}
	if ev := h.Wait(t, a.Ref, executor.Exited); ev.State != domain.AttemptCanceled {
		t.Fatalf("attempt: %s (%s)", ev.State, ev.Message)
	}
	check := func() []string {
		var bad []string
		tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(sup) + "/task/*")
		for _, task := range tasks {
			b, err := os.ReadFile(task + "/status")
			if err != nil {
				continue // a thread that just ended
			}
			st := string(b)
			if strings.Contains(st, "NoNewPrivs:\t1") || strings.Contains(st, "Umask:\t0027") {
				bad = append(bad, task+": no_new_privs or the job's umask")
			}
			if l, err := os.Readlink(task + "/ns/mnt"); err == nil && l != ns(os.Getpid()) {
				bad = append(bad, task+": mount namespace "+l)
			}
		}
		return bad
	}
	deadline := time.Now().Add(executortest.WaitTimeout)
	for bad := check(); len(bad) > 0; bad = check() {
		if time.Now().After(deadline) {
			t.Fatalf("the supervisor keeps an isolated attempt's surroundings: %v", bad)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSupervisorKeepsItsOOMScore: a shared supervisor scores for the OOM
// killer no lower than the server that started it, since whatever a job
// forks before its score could be raised again keeps the supervisor's.
func TestSupervisorKeepsItsOOMScore(t *testing.T) {
	e := newExec(t)
	if !e.sharedMode {
		t.Skip("attempts have supervisors of their own here")
	}
	h := executortest.NewHarness(t, e)
	a := h.Launch(t, shell("sleep 300"), nil)
	started := h.Wait(t, a.Ref, executor.Started)
	score := func(pid int) int {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/oom_score_adj")
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	own := score(os.Getpid())
	if got := score(shimID(t, a).PID); got < own {
		t.Errorf("the supervisor scores %d for the OOM killer, below the server's %d: jobs would inherit it", got, own)
	}
	if got := score(started.PID); got < own {
		t.Errorf("the job scores %d for the OOM killer, below the server's %d", got, own)
	}
	if err := e.Stop(context.Background(), a.Ref, executor.StopRequest{Grace: time.Second}); err != nil {
		t.Fatal(err)
	}
	h.Wait(t, a.Ref, executor.Exited)
}
