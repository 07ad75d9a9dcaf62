package local

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/artifacts"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/logs"
)

func TestCheckpointsDirAgrees(t *testing.T) {
	if executor.CheckpointsDir != artifacts.CheckpointsDir {
		t.Errorf("executor.CheckpointsDir = %q, artifacts.CheckpointsDir = %q", executor.CheckpointsDir, artifacts.CheckpointsDir)
	}
}

// TestReleaseRemovesWorkspace: Release removes the attempt's HOME, tmp
// and the shim's state, keeps the log, the exit record, the metric log,
// the shim's diagnostics, child.pid and a working directory without a
// code package, and follows no link the job left.
func TestReleaseRemovesWorkspace(t *testing.T) {
	ex := newExec(t)
	h := executortest.NewHarness(t, ex)
	outside := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(outside, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	script := `echo 'trainyard: {"step": 1}'; echo data > "$HOME/cache"; mkdir "$HOME/locked" && echo x > "$HOME/locked/f" && chmod 500 "$HOME/locked"; ` +
		`ln -s ` + outside + ` "$HOME/link"; ln -s ` + filepath.Dir(outside) + ` "$TMPDIR/dirlink"; echo w > here`
	l := h.Launch(t, []string{"/bin/sh", "-c", script}, func(l *executor.Launch) {
		l.Env = slices.DeleteFunc(l.Env, func(kv string) bool { return strings.HasPrefix(kv, "HOME=") })
		l.WorkDir = filepath.Join(l.Dir, workDirName)
	})
	ev := h.Wait(t, l.Ref, executor.Exited)
	if ev.State != domain.AttemptSucceeded {
		t.Fatalf("attempt %s/%s: %s", ev.State, ev.Reason, ev.Message)
	}
	if _, err := os.Stat(filepath.Join(l.Dir, homeDir, "locked", "f")); err != nil {
		t.Fatalf("precondition: the job's files in HOME: %v", err)
	}
	if err := ex.Release(context.Background(), l.Ref); err != nil {
		t.Fatalf("Release: %v", err)
	}
	for _, gone := range []string{homeDir, tmpDir, legacyPortFile, procsFile, legacyCgroupFile} {
		if _, err := os.Lstat(filepath.Join(l.Dir, gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after Release: %v, want it removed", gone, err)
		}
	}
	keep := []string{exitFile, shimPIDFile, childPIDFile, filepath.Base(l.LogPath), metricsFile, workDirName + "/here"}
	if !ex.sharedMode {
		keep = append(keep, shimLogFile) // a shared supervisor's is made by its first line
	}
	for _, kept := range keep {
		if _, err := os.Lstat(filepath.Join(l.Dir, kept)); err != nil {
			t.Errorf("%s after Release: %v, want it kept", kept, err)
		}
	}
	if b, err := os.ReadFile(outside); err != nil || string(b) != "keep me" {
		t.Errorf("the file a job's link pointed to: %q, %v; want it untouched", b, err)
	}
}

// An attempt that left its HOME and tmp empty keeps them after Release
// (removing them would free inodes, which ext4 without a journal makes
// the next ones slow to allocate); one that swapped them for links to
// empty directories elsewhere has the links removed, never what they
// point to.
func TestReleaseKeepsEmptyDirs(t *testing.T) {
	ex := newExec(t)
	h := executortest.NewHarness(t, ex)
	l := h.Launch(t, []string{"true"}, nil)
	if ev := h.Wait(t, l.Ref, executor.Exited); ev.State != domain.AttemptSucceeded {
		t.Fatalf("attempt %s/%s: %s", ev.State, ev.Reason, ev.Message)
	}
	if err := ex.Release(context.Background(), l.Ref); err != nil {
		t.Fatalf("Release: %v", err)
	}
	for _, d := range []string{homeDir, tmpDir} {
		if st, err := os.Lstat(filepath.Join(l.Dir, d)); err != nil || !st.IsDir() {
			t.Errorf("the empty %s after Release: %v, want it kept", d, err)
		}
	}

	outside := t.TempDir() // empty: a link to it must not pass for an empty HOME or tmp
	script := `rmdir "$TMPDIR" && ln -s ` + outside + ` "$TMPDIR"; cd / && rmdir "$HOME" && ln -s ` + outside + ` "$HOME"`
	l = h.Launch(t, []string{"/bin/sh", "-c", script}, func(l *executor.Launch) {
		l.Env = slices.DeleteFunc(l.Env, func(kv string) bool { return strings.HasPrefix(kv, "HOME=") })
	})
	if ev := h.Wait(t, l.Ref, executor.Exited); ev.State != domain.AttemptSucceeded {
		t.Fatalf("attempt %s/%s: %s", ev.State, ev.Reason, ev.Message)
	}
	if err := ex.Release(context.Background(), l.Ref); err != nil {
		t.Fatalf("Release: %v", err)
	}
	for _, d := range []string{homeDir, tmpDir} {
		if _, err := os.Lstat(filepath.Join(l.Dir, d)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s, a link the job made, after Release: %v, want it removed", d, err)
		}
	}
	if st, err := os.Stat(outside); err != nil || !st.IsDir() {
		t.Errorf("the directory the job's links pointed to: %v, want it untouched", err)
	}
}

// Release removes the attempt's unpacked code package, through whatever
// links the job left there, and nothing they point to is touched.
func TestReleaseRemovesUnpackedCode(t *testing.T) {
	ex := newExec(t)
	h := executortest.NewHarness(t, ex)
	outside := t.TempDir()
	victim := filepath.Join(outside, "keep.txt")
	if err := os.WriteFile(victim, []byte("not the job's"), 0o644); err != nil {
		t.Fatal(err)
	}
	pkg := tarball(t, map[string]string{"train.py": "print(1)", "lib/util.py": "x"})
	l := h.Launch(t, []string{"/bin/sh", "-c", "ln -s " + outside + " out; ln -s " + victim + " victim; ln -s " + outside + " lib/up; echo x > scratch"},
		func(l *executor.Launch) {
			l.WorkDir = filepath.Join(l.Dir, workDirName)
			l.Code = codeOf(pkg, l.WorkDir)
		})
	if ev := h.Wait(t, l.Ref, executor.Exited); ev.State != domain.AttemptSucceeded {
		t.Fatalf("attempt %s/%s: %s", ev.State, ev.Reason, ev.Message)
	}
	if err := ex.Release(context.Background(), l.Ref); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, err := os.Lstat(l.WorkDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the unpacked package after Release: %v, want it removed", err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "not the job's" {
		t.Errorf("a file a link pointed to was touched: %q, %v", b, err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("the directory a link pointed to holds %d entries, want its 1", len(ents))
	}
}

// TestFilesFromRuns: an executor that launched nothing finds attempts in
// its runs directory (a restarted or read-only server): Logs reads the
// log, following ends at the recorded outcome, and Release works.
func TestFilesFromRuns(t *testing.T) {
	runs := t.TempDir()
	layout := logs.Layout{Root: runs}
	ex := newExec(t)
	h := executortest.NewHarness(t, ex)
	l := h.Run(t, executortest.Program{Steps: []executortest.Step{{Out: "hello"}, {Out: "world"}}}, func(l *executor.Launch) {
		l.Dir = layout.AttemptDir(l.JobID, l.Attempt)
		l.LogPath = layout.LogPath(l.JobID, l.Attempt)
		l.WorkDir = layout.WorkDir(l.JobID, l.Attempt)
	})
	h.Wait(t, l.Ref, executor.Exited)

	reader, err := New(Config{ShimCommand: []string{"true"}, Runs: runs})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	ctx, cancel := context.WithTimeout(context.Background(), executortest.WaitTimeout)
	defer cancel()
	var b strings.Builder
	if err := reader.Logs(ctx, l.Ref, executor.LogQuery{Follow: true}, &b); err != nil || b.String() != "hello\nworld\n" {
		t.Errorf("Logs(follow) from the runs directory = %q, %v; want %q", b.String(), err, "hello\nworld\n")
	}
	if ctx.Err() != nil {
		t.Error("following an ended attempt did not end")
	}
	if err := os.WriteFile(filepath.Join(l.Dir, homeDir, "cache"), []byte("x"), 0o600); err != nil {
		t.Fatal(err) // what the job left in HOME, which Release removes
	}
	if err := reader.Release(ctx, l.Ref); err != nil {
		t.Errorf("Release from the runs directory: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(l.Dir, homeDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("HOME after Release: %v, want it removed", err)
	}
	// Without a runs directory, an attempt this executor did not launch
	// is not found.
	blind, err := New(Config{ShimCommand: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	defer blind.Close()
	if err := blind.Release(ctx, l.Ref); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("Release of an unknown attempt without Runs: %v, want domain.ErrNotFound", err)
	}
	// An attempt that never ran has nothing to release.
	if err := reader.Release(ctx, executor.Ref{JobID: l.JobID + 1, Attempt: 1}); err != nil {
		t.Errorf("Release of an attempt that never ran: %v", err)
	}

	// Log retention: the logs go, the expiry is remembered, and a second
	// expiry finds nothing.
	if st, err := NewReader(runs).LogState(ctx, l.Ref); err != nil || st.Limited {
		t.Errorf("LogState of an unlimited log = %+v, %v", st, err)
	}
	files := NewReader(runs)
	x := executor.LogExpiry{DeletedAt: time.Now().UTC().Truncate(time.Second), Retention: 72 * time.Hour}
	if removed, err := files.ExpireLogs(ctx, l.JobID, x); err != nil || !removed {
		t.Fatalf("ExpireLogs = %v, %v; want the logs removed", removed, err)
	}
	if got, ok := files.LogsExpired(ctx, l.JobID); !ok || !got.DeletedAt.Equal(x.DeletedAt) || got.Retention != x.Retention {
		t.Errorf("LogsExpired = %+v, %v; want %+v", got, ok, x)
	}
	if err := files.Logs(ctx, l.Ref, executor.LogQuery{}, io.Discard); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Logs after expiry: %v, want fs.ErrNotExist", err)
	}
	if removed, err := files.ExpireLogs(ctx, l.JobID, x); err != nil || removed {
		t.Errorf("second ExpireLogs = %v, %v; want nothing removed", removed, err)
	}
}

// TestLogsLinkRefused: a log replaced by a link (to a file the server may
// read, the job may not) is not followed.
func TestLogsLinkRefused(t *testing.T) {
	ex := newExec(t)
	h := executortest.NewHarness(t, ex)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("2006-01-02T15:04:05.000000000Z stdout the secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l := h.Run(t, executortest.Program{Steps: []executortest.Step{{Out: "hello"}}}, nil)
	h.Wait(t, l.Ref, executor.Exited)
	if err := os.Remove(l.LogPath); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, l.LogPath); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	err := ex.Logs(context.Background(), l.Ref, executor.LogQuery{}, &b)
	if err == nil || strings.Contains(b.String(), "secret") {
		t.Errorf("Logs through a link = %q, %v; want an error and nothing of the link's target", b.String(), err)
	}
}

// TestLogsStreamTailFollow: with a stream filter, the tail of a followed
// log is the last lines of that stream so far, then new lines follow.
func TestLogsStreamTailFollow(t *testing.T) {
	ex := newExec(t)
	h := executortest.NewHarness(t, ex)
	l := h.Run(t, executortest.Program{OnTerm: "bye", Steps: []executortest.Step{
		{Out: "o1"}, {Err: "e1"}, {Out: "o2"}, {Err: "e2"}, {Out: "o3"}, {Err: "ready"}, {Block: true}}}, nil)
	// stdout and stderr are separate pipes, read concurrently: "ready"
	// on stderr can reach the log before "o3" on stdout.
	h.WaitLine(t, l.Ref, "ready")
	h.WaitLine(t, l.Ref, "o3")
	b := &syncBuilder{}
	done := make(chan error, 1)
	go func() {
		done <- ex.Logs(context.Background(), l.Ref, executor.LogQuery{Stream: executor.StreamStdout, Tail: 2, Follow: true}, b)
	}()
	deadline := time.Now().Add(executortest.WaitTimeout)
	for b.String() != "o2\no3\n" {
		if time.Now().After(deadline) {
			t.Fatalf("the follower wrote %q, want the tail %q", b.String(), "o2\no3\n")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := ex.Stop(context.Background(), l.Ref, executor.StopRequest{Grace: time.Minute}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil || b.String() != "o2\no3\nbye\n" {
			t.Errorf("Logs(stdout, tail 2, follow) = %q, %v; want %q", b.String(), err, "o2\no3\nbye\n")
		}
	case <-time.After(executortest.WaitTimeout):
		t.Fatal("following did not end with the attempt")
	}
}

// syncBuilder is a strings.Builder safe for a writer and a reader.
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A shim that gets its launch record only after the attempt ran and was
// released (its server was paused between starting it and sending the
// record, while another replica ran the attempt) must not run it again:
// the claim outlives the attempt. An attempt that ended before claims were
// kept is refused by its exit record.
func TestLateShimNeverRunsAnEndedAttempt(t *testing.T) {
	ex := newExec(t)
	h := executortest.NewHarness(t, ex)
	marker := filepath.Join(t.TempDir(), "ran")
	l := h.Launch(t, shell("echo run >> "+marker), nil)
	if ev := h.Wait(t, l.Ref, executor.Exited); ev.State != domain.AttemptSucceeded {
		t.Fatalf("attempt %s: %s", ev.State, ev.Message)
	}
	if err := ex.Release(context.Background(), l.Ref); err != nil {
		t.Fatal(err)
	}
	lateShim := func() int {
		t.Helper()
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		rec, err := json.Marshal(launchRecord{JobID: l.JobID, Attempt: l.Attempt, Argv: shell("echo run >> " + marker),
			Env: l.Env, WorkDir: l.Dir, LogPath: l.LogPath})
		if err != nil {
			t.Fatal(err)
		}
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(self, "--dir", l.Dir)
		cmd.ExtraFiles = []*os.File{nil, r} // fd 3: no events; fd 4: the launch record
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r.Close()
		w.Write(rec)
		w.Close()
		err = cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	}
	if code := lateShim(); code != exitOwned {
		t.Errorf("a late shim on a released attempt exited %d, want %d (owned)", code, exitOwned)
	}
	// As an attempt of an earlier version: released without its claim.
	if err := os.Remove(filepath.Join(l.Dir, shimPIDFile)); err != nil {
		t.Fatal(err)
	}
	if code := lateShim(); code != exitOwned {
		t.Errorf("a late shim on an ended attempt without a claim exited %d, want %d", code, exitOwned)
	}
	if b, _ := os.ReadFile(marker); strings.Count(string(b), "run") != 1 {
		t.Fatalf("the attempt ran %d times, want once", strings.Count(string(b), "run"))
	}
}
