package local

import (
	"context"
	"fmt"
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
	"trainyard/internal/executor/local/userdb"
	"trainyard/internal/logs"
)

// isolatedExec is an executor that runs each project as its own user, with
// ids from a test range.
func isolatedExec(t *testing.T, first int) *Executor {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(self)
	cfg.Isolation = &Isolation{FirstUID: first, LastUID: first + 99, StateFile: filepath.Join(t.TempDir(), "uids.json")}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// isolatedLaunch launches argv for project with its directories outside
// /tmp (a private /tmp would hide them otherwise) in a fresh directory the
// project's user can pass through.
func isolatedLaunch(t *testing.T, h *executortest.Harness, project string, argv []string, mods ...func(*executor.Launch)) executor.Launch {
	t.Helper()
	root := jobRoot(t)
	l := h.Launch(t, argv, func(l *executor.Launch) {
		l.Project = project
		l.Dir = filepath.Join(root, strconv.FormatInt(l.JobID, 10), "1")
		l.LogPath = filepath.Join(l.Dir, "output.log")
		l.WorkDir = filepath.Join(l.Dir, "work")
		l.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
		for _, m := range mods {
			m(l)
		}
	})
	t.Cleanup(func() {
		if b, _ := os.ReadFile(filepath.Join(l.Dir, shimLogFile)); t.Failed() && len(b) > 0 {
			t.Logf("%s:\n%s", shimLogFile, b)
		}
	})
	return l
}

// jobRoot is a fresh directory outside /tmp, traversable by every user,
// removed when the test ends.
func jobRoot(t *testing.T) string {
	t.Helper()
	root, err := os.MkdirTemp("/var/lib", "trainyard-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o711); err != nil {
		t.Fatal(err)
	}
	return root
}

func stdout(t *testing.T, l executor.Launch) string {
	var out []string
	for _, ln := range executortest.ReadLog(t, l.LogPath) {
		if ln.Stream == logs.Stdout {
			out = append(out, ln.Text)
		}
	}
	return strings.Join(out, "\n")
}

func TestIsolatedAttemptRunsAsProjectUser(t *testing.T) {
	executortest.NeedRoot(t)
	e := isolatedExec(t, 910_000)
	h := executortest.NewHarness(t, e)

	// A file only root may read, as the server's own files are.
	secretDir := jobRoot(t)
	secret := filepath.Join(secretDir, "admin-token")
	if err := os.WriteFile(secret, []byte("ty_admin_secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A name of this run's own, so another run's file is not taken for it.
	mine := fmt.Sprintf("trainyard-test-mine-%d-%d", os.Getpid(), time.Now().UnixNano())
	script := `id -u; id -g; id -G; umask; grep NoNewPrivs /proc/self/status | tr -d '\t '; echo "home=$HOME tmp=$TMPDIR user=$USER"
ls -A /tmp | wc -l
touch /tmp/` + mine + ` "$HOME/mine" && echo wrote
cat ` + secret + ` 2>/dev/null && echo READ-SECRET
echo x > ` + filepath.Join(secretDir, "planted") + ` 2>/dev/null && echo WROTE-OUTSIDE
pwd -P`
	a := isolatedLaunch(t, h, "alpha", []string{"/bin/sh", "-c", script})
	ev := h.Wait(t, a.Ref, executor.Exited)
	if ev.State != domain.AttemptSucceeded {
		t.Fatalf("attempt ended %s (%s): %s", ev.State, ev.Reason, ev.Message)
	}
	out := strings.Split(stdout(t, a), "\n")
	if len(out) < 9 {
		t.Fatalf("output:\n%s", strings.Join(out, "\n"))
	}
	uid, _ := strconv.Atoi(out[0])
	if uid < 910_000 || uid > 910_099 || out[1] != out[0] {
		t.Errorf("uid %s gid %s, want one id from the range for both", out[0], out[1])
	}
	if out[2] != out[0] {
		t.Errorf("groups %q, want only the project's own group %s", out[2], out[0])
	}
	if out[3] != "0027" {
		t.Errorf("umask %s, want 0027", out[3])
	}
	if out[4] != "NoNewPrivs:1" {
		t.Errorf("%s, want NoNewPrivs:1", out[4])
	}
	if want := "home=" + filepath.Join(a.Dir, "home") + " tmp=" + filepath.Join(a.Dir, "tmp") + " user=trainyard-alpha"; out[5] != want {
		t.Errorf("got %q, want %q", out[5], want)
	}
	if e.noMountNS.Load() {
		t.Log("no mount namespace here: /tmp is not private")
	} else if out[6] != "0" {
		t.Errorf("/tmp holds %s entries, want a private, empty /tmp", out[6])
	}
	if out[7] != "wrote" {
		t.Errorf("the job could not write its /tmp and HOME: %q", out[7])
	}
	joined := strings.Join(out, "\n")
	if strings.Contains(joined, "READ-SECRET") || strings.Contains(joined, "WROTE-OUTSIDE") {
		t.Errorf("the job reached the server's files:\n%s", joined)
	}
	if _, err := os.Stat(filepath.Join(secretDir, "planted")); err == nil {
		t.Error("the job planted a file in a directory of the server's")
	}
	if _, err := os.Stat(filepath.Join(a.Dir, "tmp")); err == nil {
		t.Error("the attempt's temporary files outlived it")
	}
	if _, err := os.Stat("/tmp/" + mine); err == nil && !e.noMountNS.Load() {
		t.Error("the job's /tmp file landed in the machine's /tmp")
	}

	// Another project runs as another user and cannot read the first
	// project's working directory or home.
	b := isolatedLaunch(t, h, "beta", []string{"/bin/sh", "-c",
		"id -u; ls " + a.WorkDir + " 2>/dev/null && echo LISTED; cat " + filepath.Join(a.Dir, "home", "mine") + " 2>/dev/null && echo READ-OTHER; true"})
	ev = h.Wait(t, b.Ref, executor.Exited)
	if ev.State != domain.AttemptSucceeded {
		t.Fatalf("attempt ended %s (%s): %s", ev.State, ev.Reason, ev.Message)
	}
	bout := stdout(t, b)
	if strings.HasPrefix(bout, out[0]) {
		t.Errorf("projects alpha and beta share uid %s", out[0])
	}
	if strings.Contains(bout, "LISTED") || strings.Contains(bout, "READ-OTHER") {
		t.Errorf("project beta's job reached alpha's files:\n%s", bout)
	}

	// The same project keeps its id, across executors too.
	st, err := os.ReadFile(e.users.cfg.StateFile)
	if err != nil || !strings.Contains(string(st), `"alpha": `+out[0]) {
		t.Errorf("state file %s = %s (%v), want alpha's id recorded", e.users.cfg.StateFile, st, err)
	}
	again, err := newUsers(e.users.cfg, userdb.System{})
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := again.forProject("alpha", ""); id.UID != uid {
		t.Errorf("alpha got %d after a restart, had %d", id.UID, uid)
	}
}

func TestIsolatedEnvironmentCheckRunsAsTheJob(t *testing.T) {
	executortest.NeedRoot(t)
	e := isolatedExec(t, 911_000)
	h := executortest.NewHarness(t, e)
	l := isolatedLaunch(t, h, "gamma", []string{"/bin/true"}, func(l *executor.Launch) {
		l.Check = []string{"/bin/sh", "-c", "test $(id -u) -ne 0"}
	})
	ev := h.Wait(t, l.Ref, executor.Exited)
	if ev.State != domain.AttemptSucceeded {
		t.Fatalf("the check ran as root: %s (%s): %s", ev.State, ev.Reason, ev.Message)
	}
}

func TestIsolationRefusesBadUsers(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		cfg  Isolation
		want string
	}{
		{Isolation{StateFile: filepath.Join(dir, "a"), FirstUID: 10, LastUID: 20}, "not usable"},
		{Isolation{StateFile: filepath.Join(dir, "b"), ProjectUsers: map[string]string{"p": "root"}}, "root"},
		{Isolation{StateFile: filepath.Join(dir, "c"), ProjectUsers: map[string]string{"p": "no-such-user-here"}}, "no-such-user-here"},
		{Isolation{StateFile: filepath.Join(dir, "d"), PoolUsers: map[string]string{"gpu": "0"}}, "pool gpu"},
		{Isolation{}, "StateFile"},
	} {
		if _, err := newUsers(c.cfg, userdb.System{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error about %q", c.cfg, err, c.want)
		}
	}
	os.WriteFile(filepath.Join(dir, "broken"), []byte("{"), 0o600)
	if _, err := newUsers(Isolation{StateFile: filepath.Join(dir, "broken")}, userdb.System{}); err == nil || !strings.Contains(err.Error(), "backup") {
		t.Errorf("a broken state file: %v", err)
	}
}

func TestIsolatedWorkdirClosedToTheJobSaysWhy(t *testing.T) {
	executortest.NeedRoot(t)
	e := isolatedExec(t, 912_000)
	h := executortest.NewHarness(t, e)
	closed := filepath.Join(jobRoot(t), "private")
	if err := os.MkdirAll(filepath.Join(closed, "code"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(closed, 0o700)
	l := isolatedLaunch(t, h, "delta", []string{"/bin/true"}, func(l *executor.Launch) { l.WorkDir = filepath.Join(closed, "code") })
	ev := h.Wait(t, l.Ref, executor.Exited)
	if ev.Reason != domain.ReasonLaunchFailed || !strings.Contains(ev.Message, closed+" (mode 0700") || !strings.Contains(ev.Message, "--context") {
		t.Errorf("ended %s (%s): %s; want LaunchFailed naming %s", ev.State, ev.Reason, ev.Message, closed)
	}
}

func TestConfiguredUsersWin(t *testing.T) {
	u, err := newUsers(Isolation{StateFile: filepath.Join(t.TempDir(), "uids.json"), FirstUID: 914_000, LastUID: 914_009,
		ProjectUsers: map[string]string{"vip": "nobody"}, PoolUsers: map[string]string{"shared": "65534", "other": "nobody"}}, userdb.System{})
	if err != nil {
		t.Skipf("this machine has no user nobody (65534): %v", err)
	}
	for _, c := range []struct {
		project, pool string
		want          int
	}{{"vip", "any", 65534}, {"x", "shared", 65534}, {"vip", "shared", 65534}, {"x", "elsewhere", 914_000}, {"y", "", 914_001}, {"x", "", 914_000}} {
		id, err := u.forProject(c.project, c.pool)
		if err != nil || id.UID != c.want {
			t.Errorf("project %s in pool %s runs as %d (%v), want %d", c.project, c.pool, id.UID, err, c.want)
		}
	}
}

// A server that dies between starting the shim and sending the launch
// record leaves the attempt unclaimed: the shim exits without shim.pid or
// exit.json, and the next launch of the attempt starts it afresh.
func TestShimWithoutLaunchRecordLeavesTheAttemptUnclaimed(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "attempt")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	er, ew, _ := os.Pipe()
	lr, lw, _ := os.Pipe()
	lw.Close() // the server died before writing
	cmd := exec.Command(self, "--dir", dir)
	cmd.ExtraFiles = []*os.File{ew, lr}
	out, err := cmd.CombinedOutput()
	ew.Close()
	er.Close()
	lr.Close()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), "unclaimed") {
		t.Fatalf("shim without a record: %v, %s", err, out)
	}
	for _, f := range []string{shimPIDFile, exitFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("%s was written; the attempt must stay unclaimed", f)
		}
	}
	h := executortest.NewHarness(t, newExec(t))
	l := h.Launch(t, []string{"true"}, func(l *executor.Launch) {
		l.Dir, l.LogPath, l.WorkDir = dir, filepath.Join(dir, "output.log"), filepath.Join(dir, "work")
	})
	if ev := h.Wait(t, l.Ref, executor.Exited); ev.State != domain.AttemptSucceeded {
		t.Errorf("relaunch ended %s (%s): %s", ev.State, ev.Reason, ev.Message)
	}
}

// TestIsolationNeedsUsers: an executor that isolates jobs without a user
// database to resolve their users is refused, not run unisolated.
func TestIsolationNeedsUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	cfg := testConfig("true")
	cfg.Users = nil
	cfg.Isolation = &Isolation{StateFile: filepath.Join(t.TempDir(), "uids.json")}
	if e, err := New(cfg); err == nil {
		e.Close()
		t.Fatal("New isolated jobs without Config.Users")
	} else if !strings.Contains(err.Error(), "Config.Users") {
		t.Errorf("error %q does not name Config.Users", err)
	}
}

// TestIsolatedOutputsLinkIsNotFollowed: a job's outputs outlive its
// attempts, and the job may replace a directory there with a link before
// its next attempt. That attempt's launch takes the existing entry as
// made (one mkdir, refused with EEXIST) and must then refuse it, never
// handing the link's target to the job's user.
func TestIsolatedOutputsLinkIsNotFollowed(t *testing.T) {
	executortest.NeedRoot(t)
	e := isolatedExec(t, 915_000)
	h := executortest.NewHarness(t, e)
	outRoot := jobRoot(t)
	out := filepath.Join(outRoot, "outputs")
	ckpt := filepath.Join(out, executor.CheckpointsDir)
	withOutputs := func(l *executor.Launch) { l.Writable = []string{out, ckpt} }
	first := isolatedLaunch(t, h, "gamma", []string{"/bin/true"}, withOutputs)
	if ev := h.Wait(t, first.Ref, executor.Exited); ev.State != domain.AttemptSucceeded {
		t.Fatalf("first attempt ended %s (%s): %s", ev.State, ev.Reason, ev.Message)
	}
	if st, err := os.Stat(ckpt); err != nil || st.Sys().(*syscall.Stat_t).Uid == 0 {
		t.Fatalf("the first attempt's checkpoint directory is not the job's: %v", err)
	}

	// A directory of the server's, and the job's link to it in place of
	// its checkpoint directory.
	secret := jobRoot(t)
	if err := os.Chmod(secret, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(ckpt); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, ckpt); err != nil {
		t.Fatal(err)
	}
	second := first
	second.Attempt = 2
	second.Dir = filepath.Join(filepath.Dir(first.Dir), "2")
	second.LogPath = filepath.Join(second.Dir, "output.log")
	second.WorkDir = filepath.Join(second.Dir, "work")
	if err := e.Launch(context.Background(), second); err == nil {
		h.Wait(t, second.Ref, executor.Exited)
		t.Error("the second attempt launched with its checkpoint directory a link to a directory of the server's")
	}
	st, err := os.Stat(secret)
	if err != nil {
		t.Fatal(err)
	}
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 0 || sys.Gid != 0 || st.Mode().Perm() != 0o700 {
		t.Errorf("the link's target is now owner %d:%d, mode %04o; want root's, 0700", sys.Uid, sys.Gid, st.Mode().Perm())
	}
}
