package local

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/logs"
)

// saver is a process that, like a trainer, takes its time to save on
// SIGTERM (its sleep also gets the group's SIGTERM, and the trap runs once
// it has ended), then exits 143.
const saver = `/bin/sh -c 'trap "sleep 0.3; echo saved > saved; exit 143" TERM; echo $$ > saver.pid; while :; do sleep 0.05; done'`

func stop(t *testing.T, h *executortest.Harness, l executor.Launch, req executor.StopRequest) executor.Event {
	t.Helper()
	if err := h.Exec.Stop(context.Background(), l.Ref, req); err != nil {
		t.Fatal(err)
	}
	return h.Wait(t, l.Ref, executor.Exited)
}

func systemLines(t *testing.T, l executor.Launch) string {
	t.Helper()
	var b strings.Builder
	for _, ln := range executortest.ReadLog(t, l.LogPath) {
		if ln.Stream == logs.System {
			b.WriteString(ln.Text + "\n")
		}
	}
	return b.String()
}

// A shell that dies of SIGTERM at once no longer takes its children's
// grace period with it: the shim waits for the whole group.
func TestStopWaitsForTheWholeGroup(t *testing.T) {
	h := executortest.NewHarness(t, newExec(t))
	l := h.Launch(t, shell(saver+` & wait`), nil)
	h.Wait(t, l.Ref, executor.Started)
	executortest.WaitFiles(t, l.WorkDir, "saver.pid")
	ev := stop(t, h, l, executor.StopRequest{Grace: 20 * time.Second})
	if ev.State != domain.AttemptCanceled || ev.Reason != domain.ReasonCanceledByUser {
		t.Errorf("got %s/%s (%q), want canceled/CanceledByUser", ev.State, ev.Reason, ev.Message)
	}
	if b, err := os.ReadFile(filepath.Join(l.WorkDir, "saved")); err != nil || string(b) != "saved\n" {
		t.Errorf("the child's SIGTERM handler did not finish: %q, %v; log:\n%s", b, err, systemLines(t, l))
	}
	if strings.Contains(ev.Message, "grace period") {
		t.Errorf("message %q: the group was killed, though it ended within its grace", ev.Message)
	}
	executortest.CheckGone(t, l.WorkDir, "saver.pid")
}

// The grace period still ends a group member that ignores SIGTERM after the
// main process has gone.
func TestStopKillsWhatOutlivesTheGrace(t *testing.T) {
	h := executortest.NewHarness(t, newExec(t))
	l := h.Launch(t, shell(`/bin/sh -c 'trap "" TERM; echo $$ > stubborn.pid; while :; do sleep 0.05; done' & wait`), nil)
	h.Wait(t, l.Ref, executor.Started)
	executortest.WaitFiles(t, l.WorkDir, "stubborn.pid")
	start := time.Now()
	ev := stop(t, h, l, executor.StopRequest{Grace: 500 * time.Millisecond})
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Errorf("ended %s after the stop, before the grace period", took)
	}
	if !strings.Contains(ev.Message, "after a grace period of 500ms") {
		t.Errorf("message %q does not say the grace ran out", ev.Message)
	}
	executortest.CheckGone(t, l.WorkDir, "stubborn.pid")
}

// A stop request's reason reaches the log and the exit record.
func TestStopCarriesItsReason(t *testing.T) {
	h := executortest.NewHarness(t, newExec(t))
	l := h.Launch(t, shell(`echo $$ > sh.pid; sleep 300`), nil)
	h.Wait(t, l.Ref, executor.Started)
	executortest.WaitFiles(t, l.WorkDir, "sh.pid")
	ev := stop(t, h, l, executor.StopRequest{Reason: domain.ReasonPreempted, Message: "preempted for job 7"})
	if ev.State != domain.AttemptCanceled || ev.Reason != domain.ReasonPreempted || !strings.Contains(ev.Message, "preempted for job 7") {
		t.Errorf("got %s/%s (%q), want canceled/Preempted naming job 7", ev.State, ev.Reason, ev.Message)
	}
	log := systemLines(t, l)
	if !strings.Contains(log, "stop requested (preempted for job 7") || !strings.Contains(log, "canceled (Preempted)") || strings.Contains(log, "CanceledByUser") {
		t.Errorf("log does not name the preemption:\n%s", log)
	}
}

// A simple command string runs as "exec COMMAND": the program is the
// shim's child, with no shell between.
func TestSimpleCommandStringIsExeced(t *testing.T) {
	h := executortest.NewHarness(t, newExec(t))
	l := h.Launch(t, shell(`sleep 300`), nil)
	h.Wait(t, l.Ref, executor.Started)
	executortest.WaitFiles(t, l.Dir, childPIDFile)
	b, _ := os.ReadFile(filepath.Join(l.Dir, childPIDFile))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	deadline := time.Now().Add(executortest.WaitTimeout)
	for {
		comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		if err == nil && strings.TrimSpace(string(comm)) == "sleep" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the attempt's process is %q (%v), want sleep", comm, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ev := stop(t, h, l, executor.StopRequest{})
	if !strings.Contains(ev.Message, "killed by SIGTERM") {
		t.Errorf("message %q: want sleep killed by SIGTERM", ev.Message)
	}
}

func TestExecSimple(t *testing.T) {
	for cmd, want := range map[string]string{
		"python3 trainer.py --steps 10":       "exec python3 trainer.py --steps 10",
		"  ./train.sh 'a b' \"$HOME\" *.json": "exec ./train.sh 'a b' \"$HOME\" *.json",
		"torchrun --nproc_per_node=8 t.py":    "exec torchrun --nproc_per_node=8 t.py",
		"cd x && python3 t.py":                "cd x && python3 t.py",
		"python3 t.py; echo done":             "python3 t.py; echo done",
		"python3 t.py > out":                  "python3 t.py > out",
		"python3 t.py | tee log":              "python3 t.py | tee log",
		"echo $(date)":                        "echo $(date)",
		"FOO=1 python3 t.py":                  "FOO=1 python3 t.py",
		"exit 3":                              "exit 3",
		"exec python3 t.py":                   "exec python3 t.py",
		"$PY t.py":                            "$PY t.py",
		"if true\nthen x\nfi":                 "if true\nthen x\nfi",
		"":                                    "",
	} {
		got := execSimple([]string{"/bin/sh", "-c", cmd})
		if got[2] != want {
			t.Errorf("execSimple(%q) = %q, want %q", cmd, got[2], want)
		}
	}
	argv := []string{"python3", "t.py"}
	if got := execSimple(argv); !slices.Equal(got, argv) {
		t.Errorf("execSimple(%q) = %q, want it unchanged", argv, got)
	}
}

// policy.warn: the warning signal comes before the timeout.
func TestWarnBeforeTimeout(t *testing.T) {
	h := executortest.NewHarness(t, newExec(t))
	l := h.Launch(t, shell(`trap 'echo warned > warned' USR1; while :; do sleep 0.05; done`), func(l *executor.Launch) {
		l.Timeout = 1500 * time.Millisecond
		l.Grace = 300 * time.Millisecond
		l.Warn = executor.Warn{Signal: "USR1", Before: time.Second}
	})
	ev := h.Wait(t, l.Ref, executor.Exited)
	if ev.State != domain.AttemptTimedOut {
		t.Errorf("got %s/%s (%q), want timed_out", ev.State, ev.Reason, ev.Message)
	}
	// Without the warning, SIGTERM would have ended the shell first.
	if _, err := os.Stat(filepath.Join(l.WorkDir, "warned")); err != nil {
		t.Errorf("no warning before the timeout: %v; log:\n%s", err, systemLines(t, l))
	}
	if log := systemLines(t, l); !strings.Contains(log, "sending SIGUSR1 to the process group (policy.warn)") {
		t.Errorf("log does not note the warning:\n%s", log)
	}
}

// stop_signal_to: main signals the main process only; the rest of its
// group hears nothing until the grace period's SIGKILL.
func TestStopSignalToMain(t *testing.T) {
	h := executortest.NewHarness(t, newExec(t))
	child := `/bin/sh -c 'trap "echo termed > child-termed" TERM; echo $$ > child.pid; while :; do sleep 0.05; done'`
	l := h.Launch(t, shell(`trap 'echo termed > main-termed' TERM; `+child+` & while :; do sleep 0.05; done`), func(l *executor.Launch) {
		l.StopSignalTo = domain.StopMain
	})
	h.Wait(t, l.Ref, executor.Started)
	executortest.WaitFiles(t, l.WorkDir, "child.pid")
	ev := stop(t, h, l, executor.StopRequest{Grace: time.Second})
	if _, err := os.Stat(filepath.Join(l.WorkDir, "main-termed")); err != nil {
		t.Errorf("the main process got no SIGTERM: %v", err)
	}
	if _, err := os.Stat(filepath.Join(l.WorkDir, "child-termed")); err == nil {
		t.Error("the child got SIGTERM, though only the main process should")
	}
	if !strings.Contains(ev.Message, "killed by SIGKILL after a grace period of 1s") {
		t.Errorf("message %q: want the grace period's SIGKILL", ev.Message)
	}
	executortest.CheckGone(t, l.WorkDir, "child.pid")
}

// Half-written checkpoints are removed when the attempt ends; complete
// ones, and a link the job put in the checkpoint directory's place, are
// left alone.
func TestCheckpointTempFilesRemoved(t *testing.T) {
	h := executortest.NewHarness(t, newExec(t))
	ckpt := filepath.Join(t.TempDir(), "checkpoints")
	if err := os.Mkdir(ckpt, 0o755); err != nil {
		t.Fatal(err)
	}
	l := h.Launch(t, shell(`cd "$TRAINYARD_CHECKPOINT_DIR" && mkdir .tmp-dir && echo x > .tmp-dir/a && echo x > .tmp-abc && echo x > b.tmp && echo x > ckpt-1.json`), func(l *executor.Launch) {
		l.Env = append(l.Env, "TRAINYARD_CHECKPOINT_DIR="+ckpt)
	})
	h.Wait(t, l.Ref, executor.Exited)
	ents, _ := os.ReadDir(ckpt)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"ckpt-1.json"}) {
		t.Errorf("checkpoint directory holds %q, want [ckpt-1.json]", names)
	}
	if log := systemLines(t, l); !strings.Contains(log, "removed 3 unfinished checkpoint file(s)") {
		t.Errorf("log does not note the removal:\n%s", log)
	}

	// The job replaces its checkpoint directory with a link elsewhere.
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, ".tmp-keep"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ckpt2 := filepath.Join(t.TempDir(), "checkpoints")
	l = h.Launch(t, shell(`ln -s "$OUTSIDE" "$TRAINYARD_CHECKPOINT_DIR"`), func(l *executor.Launch) {
		l.Env = append(l.Env, "TRAINYARD_CHECKPOINT_DIR="+ckpt2, "OUTSIDE="+outside)
	})
	h.Wait(t, l.Ref, executor.Exited)
	if _, err := os.Lstat(filepath.Join(outside, ".tmp-keep")); err != nil {
		t.Errorf("a file outside the checkpoint directory was removed through a link: %v", err)
	}
}
