// Package executortest holds the conformance suite every executor passes
// (Exercise), Program, the jobs it runs, and Fake, an in-memory executor
// that passes it too and that control-loop tests script.
//
// The suite checks the contract through the contract only: it launches
// Programs and checks the executor's events, its Logs and its Outputs, so
// that it runs against the Fake as against a real executor. A real
// executor runs a Program as a shell script: /bin/sh, env, sleep, mkdir,
// ln and kill must be on PATH. What only processes show (process trees,
// PATH lookups, directories on disk) is checked with Options.Processes.
package executortest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/logs"
)

// WaitTimeout bounds every wait for an event in the suite. Generous: the
// suite runs under the race detector on small, busy machines.
var WaitTimeout = 30 * time.Second

// Options says what the suite may check beyond the contract.
type Options struct {
	// Processes: the executor runs Argv as processes on this machine, so
	// the suite also checks what only processes show: a process tree ends
	// with its attempt, a program not found in PATH or at its path, the
	// working directory made on disk, the environment of a process started
	// without a shell.
	Processes bool

	// The fields below say what an executor that runs each attempt in a
	// container (a pod) cannot show by nature; their zero values keep
	// every check, as the local executor and Fake pass them.

	// SignalExitCodes: a process killed by signal N is reported as a
	// container runtime reports it, exit code 128+N (the message still
	// names the signal), not as killed without an exit code.
	SignalExitCodes bool
	// MergedStreams: the job's stdout and stderr reach its log as one
	// stream, stdout (the Kubernetes pods/log API does not tell them
	// apart): the checks of each stream's lines, and of the Stream
	// filter, become checks of the merged lines (each stream's lines in
	// their order, the two interleaved as they came).
	MergedStreams bool
	// ContainerEnv: the job's environment is its container's: the job's
	// variables and its placement's rank variables, plus what the
	// container runtime adds (HOSTNAME, HOME of the image's user); HOME
	// and TMPDIR are not directories of the attempt's own and LOGNAME is
	// not set. The environment check then wants every variable of the
	// job with its value, and the rank variables, among what is there.
	ContainerEnv bool
	// ImageWorkDir: the job runs in its image's working directory (where
	// the image keeps its code), not in Launch.WorkDir: the WorkDir check
	// is skipped.
	ImageWorkDir bool
	// PodNetwork: the ranks of a multi-node attempt find rank 0 at its
	// pod's address (each pod has its own), not at its node's name, and
	// CUDA_VISIBLE_DEVICES comes from the node's GPU device plugin, not
	// from the placement's GPU indices: the Placement check wants
	// MASTER_ADDR set alike on every rank, and leaves
	// CUDA_VISIBLE_DEVICES out.
	PodNetwork bool
	// SchedulerPlacesNodes: the cluster's scheduler, not the placement,
	// decides where the ranks of a multi-node attempt run (Slurm): rank
	// 0 is on the first node of the scheduler's allocation, whose name
	// the placement does not know, and each rank's GPUs are those the
	// scheduler allocated on its node. The Placement check then wants
	// MASTER_ADDR set alike on every rank, and leaves
	// CUDA_VISIBLE_DEVICES out, when the attempt has several nodes.
	SchedulerPlacesNodes bool
	// NoSupervisor: the attempt has no supervisor process that the job
	// could kill (the kubelet supervises it): the Lost check, whose job
	// kills its parent process, is skipped. (An executor that runs pods
	// as local processes for its tests must not run it: the parent is
	// the test.)
	NoSupervisor bool
	// NoAgent: the executor has no in-job agent yet, so nothing reads the
	// job's output or outputs while it runs or once it ends: no Progress,
	// Checkpointed or OutputsSealed events, no resume hand-over
	// (TRAINYARD_RESUME_FROM), and half-written checkpoints (.tmp) are
	// not removed after the attempt. Those checks are skipped. A gap, not
	// a limit by nature: remove it once the executor has an agent.
	NoAgent bool
}

// Exercise runs the conformance suite: every method of the contract,
// through Programs (Program.Argv), so that an executor that runs processes
// and the in-memory Fake are held to the same checks. newExec returns a
// fresh executor for one subtest (subtests run in parallel); it should
// register its own cleanup with t.Cleanup.
func Exercise(t *testing.T, newExec func(t *testing.T) executor.Executor, opts Options) {
	ctx := context.Background()

	t.Run("Succeeds", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, newExec(t))
		l := h.Run(t, Program{}, nil)
		started := h.Wait(t, l.Ref, executor.Started)
		if started.PID <= 0 {
			t.Errorf("Started.PID = %d, want > 0", started.PID)
		}
		ev := h.Wait(t, l.Ref, executor.Exited)
		checkExit(t, ev, domain.AttemptSucceeded, domain.ReasonCompleted, intPtr(0))
		if evs := h.Events(l.Ref); evs[0].Kind != executor.Started {
			t.Errorf("first event is %s, want started", evs[0].Kind)
		}
	})

	t.Run("ExitCode", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, newExec(t))
		l := h.Run(t, Program{Exit: 3}, nil)
		ev := h.Wait(t, l.Ref, executor.Exited)
		checkExit(t, ev, domain.AttemptFailed, domain.ReasonExitCode, intPtr(3))
		if !strings.Contains(ev.Message, "3") {
			t.Errorf("message %q does not mention the exit code 3", ev.Message)
		}
	})

	t.Run("KilledBySignal", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, newExec(t))
		l := h.Run(t, Program{Steps: []Step{{Signal: "KILL"}}}, nil)
		ev := h.Wait(t, l.Ref, executor.Exited)
		var code *int // killed: no exit code
		if opts.SignalExitCodes {
			code = intPtr(128 + int(syscall.SIGKILL))
		}
		checkExit(t, ev, domain.AttemptFailed, domain.ReasonExitCode, code)
		if !strings.Contains(ev.Message, "SIGKILL") {
			t.Errorf("message %q does not name the signal SIGKILL", ev.Message)
		}
	})

	t.Run("EntrypointNotFound", func(t *testing.T) {
		t.Parallel()
		cases := map[string]struct {
			argv []string
			want string // in the message
		}{
			"shell command": {argv: Program{Steps: []Step{{Run: []string{"trainyard-no-such-program", "--epochs", "3"}}}}.Argv(), want: "trainyard-no-such-program"},
		}
		if opts.Processes {
			cases["name searched in PATH"] = struct {
				argv []string
				want string
			}{argv: []string{"trainyard-no-such-program", "--epochs", "3"}, want: "trainyard-no-such-program"}
			cases["absolute path"] = struct {
				argv []string
				want string
			}{argv: []string{"/nonexistent/trainyard-train"}, want: "/nonexistent/trainyard-train"}
		}
		for name, tc := range cases {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				h := NewHarness(t, newExec(t))
				l := h.Launch(t, tc.argv, nil)
				ev := h.Wait(t, l.Ref, executor.Exited)
				if ev.State != domain.AttemptFailed || ev.Reason != domain.ReasonEntrypointNotFound {
					t.Errorf("got %s/%s (%q), want failed/EntrypointNotFound", ev.State, ev.Reason, ev.Message)
				}
				if !strings.Contains(ev.Message, tc.want) {
					t.Errorf("message %q does not name %q", ev.Message, tc.want)
				}
			})
		}
	})

	t.Run("Timeout", func(t *testing.T) {
		t.Parallel()
		cases := map[string]Program{
			"process ends on SIGTERM": {OnTerm: "terminated", Steps: []Step{{Block: true}}},
			"process ignores SIGTERM": {IgnoreTerm: true, Steps: []Step{{Block: true}}},
		}
		for name, p := range cases {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				h := NewHarness(t, newExec(t))
				l := h.Run(t, p, func(l *executor.Launch) {
					l.Timeout = 1500 * time.Millisecond
					l.Grace = 300 * time.Millisecond
				})
				ev := h.Wait(t, l.Ref, executor.Exited)
				if ev.State != domain.AttemptTimedOut || ev.Reason != domain.ReasonTimeout || ev.Message == "" {
					t.Errorf("got %s/%s (%q), want timed_out/Timeout with a message", ev.State, ev.Reason, ev.Message)
				}
				if p.OnTerm != "" && !slices.Contains(h.LogLines(t, l.Ref, executor.LogQuery{}), p.OnTerm) {
					t.Errorf("the program did not get SIGTERM at the timeout: no %q in its log", p.OnTerm)
				}
			})
		}
	})

	t.Run("Warn", func(t *testing.T) {
		t.Parallel()
		ex := newExec(t)
		if !ex.Capabilities().Warn {
			t.Skip("the executor does not send policy.warn's signal")
		}
		h := NewHarness(t, ex)
		p := Program{OnWarn: "warned", OnTerm: "terminated", Steps: []Step{{Out: "ready"}, {Block: true}}}
		l := h.Run(t, p, func(l *executor.Launch) {
			l.Timeout = 3 * time.Second
			l.Warn = executor.Warn{Signal: "USR1", Before: 2 * time.Second}
			l.Grace = 300 * time.Millisecond
		})
		ev := h.Wait(t, l.Ref, executor.Exited)
		if ev.State != domain.AttemptTimedOut || ev.Reason != domain.ReasonTimeout {
			t.Errorf("got %s/%s (%q), want timed_out/Timeout", ev.State, ev.Reason, ev.Message)
		}
		if got := h.LogLines(t, l.Ref, executor.LogQuery{}); !slices.Equal(got, []string{"ready", "warned", "terminated"}) {
			t.Errorf("log %q: want the warning's line before the timeout's", got)
		}
	})

	if opts.Processes {
		t.Run("TimeoutKillsTree", func(t *testing.T) {
			t.Parallel()
			h := NewHarness(t, newExec(t))
			// Both the shell and its background grandchild ignore SIGTERM, so
			// only the SIGKILL after the grace period ends them.
			l := h.Launch(t, []string{"/bin/sh", "-c", `trap "" TERM; sleep 300 & echo $! > bg.pid; echo $$ > sh.pid; wait`}, func(l *executor.Launch) {
				l.Timeout = 1500 * time.Millisecond
				l.Grace = 300 * time.Millisecond
			})
			ev := h.Wait(t, l.Ref, executor.Exited)
			checkExit(t, ev, domain.AttemptTimedOut, domain.ReasonTimeout, nil)
			CheckGone(t, l.WorkDir, "sh.pid", "bg.pid")
		})
	}

	t.Run("Stop", func(t *testing.T) {
		t.Parallel()
		cases := map[string]struct {
			p     Program
			grace time.Duration
			req   executor.StopRequest
			want  domain.Reason
		}{
			"process ends on SIGTERM": {p: Program{OnTerm: "terminated", Steps: []Step{{Out: "ready"}, {Block: true}}}, grace: time.Minute, want: domain.ReasonCanceledByUser},
			"process ignores SIGTERM": {p: Program{IgnoreTerm: true, Steps: []Step{{Out: "ready"}, {Block: true}}}, grace: 200 * time.Millisecond, want: domain.ReasonCanceledByUser},
			"preempted":               {p: Program{Steps: []Step{{Out: "ready"}, {Block: true}}}, grace: time.Minute, req: executor.StopRequest{Reason: domain.ReasonPreempted, Message: "preempted for job 12"}, want: domain.ReasonPreempted},
		}
		for name, tc := range cases {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				h := NewHarness(t, newExec(t))
				l := h.Run(t, tc.p, nil)
				h.WaitLine(t, l.Ref, "ready") // its SIGTERM handling is set up
				req := tc.req
				req.Grace = tc.grace
				if err := h.Exec.Stop(ctx, l.Ref, req); err != nil {
					t.Fatalf("Stop: %v", err)
				}
				ev := h.Wait(t, l.Ref, executor.Exited)
				if ev.State != domain.AttemptCanceled || ev.Reason != tc.want || ev.Message == "" {
					t.Errorf("got %s/%s (%q), want canceled/%s with a message", ev.State, ev.Reason, ev.Message, tc.want)
				}
				if tc.p.OnTerm != "" && !slices.Contains(h.LogLines(t, l.Ref, executor.LogQuery{}), tc.p.OnTerm) {
					t.Errorf("the program did not get SIGTERM: no %q in its log", tc.p.OnTerm)
				}
			})
		}
	})

	if opts.Processes {
		t.Run("StopKillsTree", func(t *testing.T) {
			t.Parallel()
			cases := map[string]struct {
				trap  string
				grace time.Duration
			}{
				"process ends on SIGTERM": {trap: "", grace: time.Minute},
				"process ignores SIGTERM": {trap: `trap "" TERM; `, grace: 200 * time.Millisecond},
			}
			for name, tc := range cases {
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					h := NewHarness(t, newExec(t))
					l := h.Launch(t, []string{"/bin/sh", "-c", tc.trap + `sleep 300 & echo $! > bg.pid; echo $$ > sh.pid; wait`}, nil)
					h.Wait(t, l.Ref, executor.Started)
					WaitFiles(t, l.WorkDir, "sh.pid", "bg.pid")
					if err := h.Exec.Stop(ctx, l.Ref, executor.StopRequest{Grace: tc.grace}); err != nil {
						t.Fatalf("Stop: %v", err)
					}
					ev := h.Wait(t, l.Ref, executor.Exited)
					if ev.State != domain.AttemptCanceled || ev.Reason != domain.ReasonCanceledByUser {
						t.Errorf("got %s/%s (%q), want canceled/CanceledByUser", ev.State, ev.Reason, ev.Message)
					}
					CheckGone(t, l.WorkDir, "sh.pid", "bg.pid")
				})
			}
		})
	}

	t.Run("StopEnded", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, newExec(t))
		l := h.Run(t, Program{}, nil)
		h.Wait(t, l.Ref, executor.Exited)
		if err := h.Exec.Stop(ctx, l.Ref, executor.StopRequest{Grace: time.Second}); err != nil {
			t.Errorf("Stop after exit: %v, want nil", err)
		}
	})

	t.Run("LaunchTwiceRunsOnce", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, newExec(t))
		l := h.Run(t, Program{Steps: []Step{{File: &FileStep{Path: "count", Data: "run\n", Append: true}}}}, nil)
		if err := h.Exec.Launch(ctx, l); err != nil {
			t.Fatalf("second Launch: %v", err)
		}
		h.Wait(t, l.Ref, executor.Exited)
		n := len(h.Events(l.Ref))
		// Launching an attempt that has exited reports its outcome again.
		if err := h.Exec.Launch(ctx, l); err != nil {
			t.Fatalf("Launch after exit: %v", err)
		}
		ev := h.WaitFrom(t, l.Ref, executor.Exited, n)
		checkExit(t, ev, domain.AttemptSucceeded, domain.ReasonCompleted, intPtr(0))
		if got := ReadOutput(t, h.Outputs(t, l), "count"); got != "run\n" {
			t.Errorf("count holds %q: the job ran %d times, want 1", got, strings.Count(got, "run\n"))
		}
	})

	t.Run("Log", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, newExec(t))
		l := h.Run(t, Program{Steps: []Step{{Out: "out1"}, {Err: "err1"}, {Out: "out 2"}, {Err: "err2"}, {Partial: "partial"}}}, nil)
		h.Wait(t, l.Ref, executor.Exited)
		lines := h.Records(t, l.Ref, executor.LogQuery{})
		if len(lines) < 2 || lines[0].Stream != logs.System || lines[len(lines)-1].Stream != logs.System {
			t.Fatalf("log must start and end with a system line; got %q", lines)
		}
		got := map[string][]string{}
		for i, ln := range lines {
			got[ln.Stream] = append(got[ln.Stream], ln.Text)
			if i > 0 && ln.Time.Before(lines[i-1].Time) {
				t.Errorf("line %d time %s is before line %d's %s", i+1, ln.Time, i, lines[i-1].Time)
			}
		}
		want := map[string][]string{logs.Stdout: {"out1", "out 2", "partial"}, logs.Stderr: {"err1", "err2"}}
		if opts.MergedStreams {
			if len(got[logs.Stderr]) != 0 || !interleaves(got[logs.Stdout], want[logs.Stdout], want[logs.Stderr]) {
				t.Errorf("stdout lines = %q, stderr lines = %q; want stdout to hold %q and %q, each in its order, and stderr none (merged streams)",
					got[logs.Stdout], got[logs.Stderr], want[logs.Stdout], want[logs.Stderr])
			}
			want = map[string][]string{logs.Stdout: got[logs.Stdout], logs.Stderr: nil}
		}
		for stream, w := range want {
			if !slices.Equal(got[stream], w) {
				t.Errorf("%s lines = %q, want %q", stream, got[stream], w)
			}
			// The same, as text, through the stream filter.
			if text := h.LogLines(t, l.Ref, executor.LogQuery{Stream: stream}); !slices.Equal(text, w) {
				t.Errorf("Logs(stream %s) = %q, want %q", stream, text, w)
			}
		}
		for stream := range got {
			if stream != logs.Stdout && stream != logs.Stderr && stream != logs.System {
				t.Errorf("unknown stream %q in log", stream)
			}
		}
		// Without timestamps: the program's lines only, no system lines.
		if text := h.LogLines(t, l.Ref, executor.LogQuery{}); len(text) != 5 {
			t.Errorf("Logs without timestamps = %q, want the 5 lines of the program", text)
		}
	})

	t.Run("LogQuery", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, newExec(t))
		var steps []Step
		for i := 1; i <= 12; i++ {
			steps = append(steps, Step{Out: fmt.Sprintf("line %d", i)})
			if i%4 == 0 {
				steps = append(steps, Step{Err: fmt.Sprintf("warning %d", i/4)})
			}
		}
		l := h.Run(t, Program{Steps: steps}, nil)
		h.Wait(t, l.Ref, executor.Exited)
		all := h.Records(t, l.Ref, executor.LogQuery{})
		var text, stdout []string // the program's lines, all and stdout
		for _, ln := range all {
			if ln.Stream != logs.System {
				text = append(text, ln.Text)
			}
			if ln.Stream == logs.Stdout {
				stdout = append(stdout, ln.Text)
			}
		}
		if len(text) != 15 {
			t.Fatalf("the program's lines = %q, want 15", text)
		}
		check := func(name string, q executor.LogQuery, want []string) {
			t.Helper()
			if got := h.LogLines(t, l.Ref, q); !slices.Equal(got, want) {
				t.Errorf("%s: got %q, want %q", name, got, want)
			}
		}
		check("tail 3", executor.LogQuery{Tail: 3}, text[len(text)-3:])
		check("tail beyond the log", executor.LogQuery{Tail: 100}, text)
		check("grep", executor.LogQuery{Grep: regexp.MustCompile(`^line 1[0-9]?$`)}, []string{"line 1", "line 10", "line 11", "line 12"})
		check("grep and tail", executor.LogQuery{Grep: regexp.MustCompile(`^line`), Tail: 2}, []string{"line 11", "line 12"})
		if !opts.MergedStreams {
			check("stream stderr", executor.LogQuery{Stream: executor.StreamStderr}, []string{"warning 1", "warning 2", "warning 3"})
			check("stream and grep", executor.LogQuery{Stream: executor.StreamStderr, Grep: regexp.MustCompile(`[23]$`)}, []string{"warning 2", "warning 3"})
		} else {
			check("stream stderr (merged)", executor.LogQuery{Stream: executor.StreamStderr}, nil)
			check("stream and grep (merged)", executor.LogQuery{Stream: executor.StreamStdout, Grep: regexp.MustCompile(`^warning [23]$`)}, []string{"warning 2", "warning 3"})
		}
		check("stream and tail", executor.LogQuery{Stream: executor.StreamStdout, Tail: 2}, stdout[len(stdout)-2:])
		// Since a line's time: that line and every later one.
		since := all[len(all)/2].Time
		var want []string
		for _, ln := range all {
			if !ln.Time.Before(since) {
				want = append(want, ln.String())
			}
		}
		check("since", executor.LogQuery{Since: since, Timestamps: true}, want)
		if err := h.Exec.Logs(ctx, executor.Ref{JobID: l.JobID + 500_000_000, Attempt: 1}, executor.LogQuery{}, io.Discard); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Logs of an unknown attempt: %v, want an error matching fs.ErrNotExist", err)
		}
	})

	t.Run("LogFollow", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, newExec(t))
		l := h.Run(t, Program{OnTerm: "bye", Steps: []Step{{Out: "one"}, {Block: true}}}, nil)
		h.Wait(t, l.Ref, executor.Started)
		w := newWatchedBuffer()
		done := make(chan error, 1)
		go func() { done <- h.Exec.Logs(ctx, l.Ref, executor.LogQuery{Follow: true}, w) }()
		w.waitFor(t, "one\n")
		select {
		case err := <-done:
			t.Fatalf("Logs(follow) returned while the attempt runs (err %v); wrote %q", err, w.String())
		default:
		}
		if err := h.Exec.Stop(ctx, l.Ref, executor.StopRequest{Grace: time.Minute}); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Logs(follow): %v", err)
			}
		case <-time.After(WaitTimeout):
			t.Fatalf("Logs(follow) still runs %s after the attempt was stopped; wrote %q", WaitTimeout, w.String())
		}
		h.Wait(t, l.Ref, executor.Exited)
		if got := w.String(); got != "one\nbye\n" {
			t.Errorf("followed log = %q, want %q (every line, the last written at the end)", got, "one\nbye\n")
		}
		// Following an ended attempt writes its log and returns.
		var b strings.Builder
		if err := h.Exec.Logs(ctx, l.Ref, executor.LogQuery{Follow: true, Tail: 1}, &b); err != nil || b.String() != "bye\n" {
			t.Errorf("Logs(follow, tail 1) of an ended attempt = %q, %v; want %q", b.String(), err, "bye\n")
		}
	})

	t.Run("Progress", func(t *testing.T) {
		t.Parallel()
		if opts.NoAgent {
			t.Skip("Options.NoAgent: no agent reads the job's progress lines")
		}
		h := NewHarness(t, newExec(t))
		l := h.Run(t, Program{Steps: []Step{{Progress: 1}, {Progress: 2}, {Progress: 3}, {Block: true}}}, nil)
		ev := h.WaitFor(t, l.Ref, "progress at step 3", func(ev executor.Event) bool { return ev.Kind == executor.Progress && ev.Step == 3 })
		if ev.At.IsZero() {
			t.Error("Progress event has no time")
		}
		// Every point reported arrives once, in order, as printed.
		var steps []int64
		for _, ev := range h.Events(l.Ref) {
			if ev.Kind != executor.Progress {
				continue
			}
			if ev.Step < 1 || ev.Step > 3 {
				t.Errorf("Progress at step %d, want one of the steps reported (1-3)", ev.Step)
			}
			for _, p := range ev.Points {
				if p.JobID != l.JobID || p.Attempt != l.Attempt || p.Key != "loss" || p.Value != 0.5 || p.At.IsZero() {
					t.Errorf("point %+v, want loss 0.5 of attempt %s with its time", p, l.Ref)
				}
				steps = append(steps, p.Step)
			}
		}
		if !slices.Equal(steps, []int64{1, 2, 3}) {
			t.Errorf("points at steps %v, want 1, 2, 3", steps)
		}
		if got := h.LogLines(t, l.Ref, executor.LogQuery{Grep: regexp.MustCompile(`^trainyard: `)}); len(got) != 3 {
			t.Errorf("progress lines in the log = %q, want the 3 reported", got)
		}
		if err := h.Exec.Stop(ctx, l.Ref, executor.StopRequest{Grace: time.Minute}); err != nil {
			t.Fatal(err)
		}
		h.Wait(t, l.Ref, executor.Exited)
	})

	t.Run("Outputs", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, newExec(t))
		l := h.Run(t, Program{Steps: []Step{
			{File: &FileStep{Path: "a.txt", Data: "hello"}},
			{File: &FileStep{Path: "sub/b.txt", Data: "bee"}},
			{Checkpoint: &CheckpointStep{Name: "ck-1", Files: map[string]string{"w.bin": "1111"}, Complete: true}},
			{Checkpoint: &CheckpointStep{Name: "ck-2", Files: map[string]string{"w.bin": "22"}}},
			{Checkpoint: &CheckpointStep{Name: "ck-3.tmp", Files: map[string]string{"w.bin": "3"}}},
			{Link: []string{"leak", "/etc/passwd"}},
			{Link: []string{"checkpoints/ck-link", "/etc"}},
		}}, nil)
		h.Wait(t, l.Ref, executor.Exited)
		o := h.Outputs(t, l)
		sum := func(s string) string { b := sha256.Sum256([]byte(s)); return hex.EncodeToString(b[:]) }
		m, err := o.Manifest(ctx, executor.CheckpointsDir)
		if want := []domain.ArtifactFile{{Path: "a.txt", Size: 5, SHA256: sum("hello")}, {Path: "sub/b.txt", Size: 3, SHA256: sum("bee")}}; err != nil || !slices.Equal(m, want) {
			t.Errorf("Manifest(skip checkpoints) = %+v, %v; want %+v (no link)", m, err, want)
		}
		m, err = o.Manifest(ctx)
		var paths []string
		for _, f := range m {
			paths = append(paths, f.Path)
		}
		// The supervisor removes half-written checkpoints (.tmp) after the attempt.
		wantPaths := []string{"a.txt", "checkpoints/ck-1/" + domain.CheckpointMarker, "checkpoints/ck-1/w.bin", "checkpoints/ck-2/w.bin", "sub/b.txt"}
		if opts.NoAgent { // no supervisor in the job's place removes them
			wantPaths = slices.Insert(wantPaths, 4, "checkpoints/ck-3.tmp/w.bin")
		}
		if err != nil || !slices.Equal(paths, wantPaths) {
			t.Errorf("Manifest() paths = %q, %v; want %q", paths, err, wantPaths)
		}
		checkCheckpoints(t, o, map[string]executor.Checkpoint{
			"ck-1": {Name: "ck-1", Complete: true, Size: 4, Files: 2},
			"ck-2": {Name: "ck-2", Complete: false, Size: 2, Files: 1},
		})
		f, err := o.Open(ctx, "a.txt")
		if err != nil {
			t.Fatalf("Open(a.txt): %v", err)
		}
		if f.Path != "a.txt" || f.Size != 5 || f.ModTime.IsZero() {
			t.Errorf("Open(a.txt) = path %q size %d modtime %s, want a.txt, 5 and a time", f.Path, f.Size, f.ModTime)
		}
		if _, err := f.Seek(1, io.SeekStart); err != nil {
			t.Errorf("Seek: %v", err)
		}
		if b, err := io.ReadAll(f); err != nil || string(b) != "ello" {
			t.Errorf("read after Seek(1) = %q, %v; want %q", b, err, "ello")
		}
		f.Close()
		for rel, want := range map[string]error{"leak": executor.ErrNotRegular, "sub": executor.ErrNotRegular, "nope": fs.ErrNotExist} {
			if f, err := o.Open(ctx, rel); !errors.Is(err, want) {
				t.Errorf("Open(%s) = %v, want an error matching %v", rel, err, want)
				if err == nil {
					f.Close()
				}
			}
		}
		for _, rel := range []string{"../x", "/etc/passwd", ""} {
			if f, err := o.Open(ctx, rel); err == nil {
				f.Close()
				t.Errorf("Open(%q) succeeded, want an error (outside the outputs)", rel)
			}
		}
		var walked []string
		err = o.Walk(ctx, "checkpoints/ck-1", func(f executor.OutputFile) error {
			b, err := io.ReadAll(f)
			walked = append(walked, f.Path+"="+string(b))
			return err
		})
		if want := []string{"checkpoints/ck-1/" + domain.CheckpointMarker + "=", "checkpoints/ck-1/w.bin=1111"}; err != nil || !slices.Equal(walked, want) {
			t.Errorf("Walk(checkpoints/ck-1) = %q, %v; want %q", walked, err, want)
		}
		if err := o.MarkComplete(ctx, "ck-2"); err != nil {
			t.Errorf("MarkComplete(ck-2): %v", err)
		}
		if err := o.MarkComplete(ctx, "../sub"); err == nil {
			t.Error("MarkComplete(../sub) succeeded, want an error")
		}
		checkCheckpoints(t, o, map[string]executor.Checkpoint{
			"ck-1": {Name: "ck-1", Complete: true, Size: 4, Files: 2},
			"ck-2": {Name: "ck-2", Complete: true, Size: 2, Files: 2},
		})
		if err := o.MakeReadOnly(ctx); err != nil {
			t.Errorf("MakeReadOnly: %v", err)
		}
		if m2, err := o.Manifest(ctx); err != nil || len(m2) != len(m)+1 {
			t.Errorf("Manifest after sealing = %+v, %v; want the same files and ck-2's marker", m2, err)
		}
		// Sealed outputs can still be pruned.
		for range 2 { // idempotent
			if err := o.Remove(ctx, "checkpoints/ck-1"); err != nil {
				t.Errorf("Remove(checkpoints/ck-1): %v", err)
			}
		}
		checkCheckpoints(t, o, map[string]executor.Checkpoint{"ck-2": {Name: "ck-2", Complete: true, Size: 2, Files: 2}})
		if _, err := o.Open(ctx, "checkpoints/ck-1/w.bin"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Open of a removed file: %v, want fs.ErrNotExist", err)
		}
		if err := o.Remove(ctx, "../x"); err == nil {
			t.Error("Remove(../x) succeeded, want an error")
		}
		if _, err := h.Exec.Outputs(ctx, filepath.Join(t.TempDir(), "none")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Outputs of a missing tree: %v, want fs.ErrNotExist", err)
		}
	})

	t.Run("Checkpoints", func(t *testing.T) {
		t.Parallel()
		exerciseCheckpoints(t, newExec)
	})

	t.Run("CheckpointEvents", func(t *testing.T) {
		t.Parallel()
		if opts.NoAgent {
			t.Skip("Options.NoAgent: no agent reports checkpoints or hands one over")
		}
		exerciseCheckpointEvents(t, newExec)
	})

	t.Run("OutputsSealed", func(t *testing.T) {
		t.Parallel()
		if opts.NoAgent {
			t.Skip("Options.NoAgent: no agent records the outputs")
		}
		exerciseOutputsSealed(t, newExec)
	})

	t.Run("Release", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, newExec(t))
		l := h.Run(t, Program{OnTerm: "bye", Steps: []Step{{File: &FileStep{Path: "result", Data: "42"}}, {Out: "kept"}, {Block: true}}}, nil)
		h.WaitLine(t, l.Ref, "kept")
		if err := h.Exec.Release(ctx, l.Ref); !errors.Is(err, domain.ErrConflict) {
			t.Errorf("Release of a running attempt: %v, want an error matching domain.ErrConflict", err)
		}
		if err := h.Exec.Stop(ctx, l.Ref, executor.StopRequest{Grace: time.Minute}); err != nil {
			t.Fatal(err)
		}
		end := h.Wait(t, l.Ref, executor.Exited)
		for range 2 { // idempotent
			if err := h.Exec.Release(ctx, l.Ref); err != nil {
				t.Errorf("Release: %v", err)
			}
		}
		if got := h.LogLines(t, l.Ref, executor.LogQuery{}); !slices.Equal(got, []string{"kept", "bye"}) {
			t.Errorf("log after Release = %q, want it kept", got)
		}
		if got := ReadOutput(t, h.Outputs(t, l), "result"); got != "42" {
			t.Errorf("output after Release = %q, want it untouched", got)
		}
		n := len(h.Events(l.Ref))
		if err := h.Exec.Launch(ctx, l); err != nil {
			t.Fatalf("Launch after Release: %v", err)
		}
		ev := h.WaitFrom(t, l.Ref, executor.Exited, n)
		if ev.State != end.State || ev.Reason != end.Reason {
			t.Errorf("Launch after Release reports %s/%s, want the recorded outcome %s/%s", ev.State, ev.Reason, end.State, end.Reason)
		}
	})

	t.Run("Lost", func(t *testing.T) {
		t.Parallel()
		if opts.NoSupervisor {
			t.Skip("Options.NoSupervisor: the job has no supervisor to kill")
		}
		h := NewHarness(t, newExec(t))
		l := h.Run(t, Program{Steps: []Step{{Out: "before"}, {KillSupervisor: true}}}, nil)
		ev := h.Wait(t, l.Ref, executor.Lost)
		if ev.Message == "" {
			t.Error("Lost event has no message")
		}
		// Following a lost attempt ends. (Its last lines may be lost with
		// its supervisor.)
		var b strings.Builder
		if err := h.Exec.Logs(ctx, l.Ref, executor.LogQuery{Follow: true}, &b); err != nil || !strings.HasPrefix("before\n", b.String()) {
			t.Errorf("Logs(follow) of a lost attempt = %q, %v; want %q or less", b.String(), err, "before\n")
		}
		if err := h.Exec.Release(ctx, l.Ref); err != nil {
			t.Errorf("Release of a lost attempt: %v", err)
		}
		n := len(h.Events(l.Ref))
		if err := h.Exec.Launch(ctx, l); err != nil {
			t.Fatalf("Launch after Lost: %v", err)
		}
		h.WaitFrom(t, l.Ref, executor.Lost, n)
	})

	t.Run("Environment", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, newExec(t))
		env := []string{"PATH=" + testPath(), "TRAINYARD_JOB_ID=42", "WITH_SPACE=a b  c", "EMPTY=", "QUOTE='\"x\"'", "USER=someone"}
		l := h.Run(t, Program{Steps: []Step{{PrintEnv: true}}}, func(l *executor.Launch) { l.Env = env })
		ev := h.Wait(t, l.Ref, executor.Exited)
		checkExit(t, ev, domain.AttemptSucceeded, domain.ReasonCompleted, intPtr(0))
		checkEnv(t, l, env, h.LogLines(t, l.Ref, executor.LogQuery{Stream: executor.StreamStdout}), opts.ContainerEnv)
	})

	if opts.Processes {
		t.Run("EnvironmentExact", func(t *testing.T) {
			t.Parallel()
			h := NewHarness(t, newExec(t))
			env := []string{"PATH=" + testPath(), "TRAINYARD_JOB_ID=42", "WITH_SPACE=a b  c", "EMPTY=", "QUOTE='\"x\"'", "USER=someone"}
			l := h.Launch(t, []string{"env"}, func(l *executor.Launch) { l.Env = env })
			ev := h.Wait(t, l.Ref, executor.Exited)
			checkExit(t, ev, domain.AttemptSucceeded, domain.ReasonCompleted, intPtr(0))
			checkEnv(t, l, env, h.LogLines(t, l.Ref, executor.LogQuery{Stream: executor.StreamStdout}), false)
		})
	}

	t.Run("Placement", func(t *testing.T) {
		t.Parallel()
		ex := newExec(t)
		nodes := []executor.PlacedNode{{Name: "node-a", GPUs: []int{0, 1}}, {Name: "node-b", GPUs: []int{2}}}
		if !ex.Capabilities().MultiNode {
			nodes = nodes[:1]
		}
		h := NewHarness(t, ex)
		l := h.Run(t, Program{Steps: []Step{{EnvFile: "env"}}}, func(l *executor.Launch) { l.Placement = executor.Placement{Nodes: nodes} })
		checkExit(t, h.Wait(t, l.Ref, executor.Exited), domain.AttemptSucceeded, domain.ReasonCompleted, intPtr(0))
		o := h.Outputs(t, l)
		var port, master string
		schedulerPlaced := opts.SchedulerPlacesNodes && len(nodes) > 1
		for rank, n := range nodes {
			got := map[string]string{}
			for _, kv := range strings.Split(ReadOutput(t, o, fmt.Sprintf("env.%d", rank)), "\n") {
				k, v, _ := strings.Cut(kv, "=")
				got[k] = v
			}
			gpus := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(n.GPUs)), ","), "[]")
			want := map[string]string{"CUDA_VISIBLE_DEVICES": gpus, "WORLD_SIZE": strconv.Itoa(len(nodes)),
				"RANK": strconv.Itoa(rank), "NODE_RANK": strconv.Itoa(rank), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
			if len(nodes) > 1 && !opts.PodNetwork && !schedulerPlaced {
				want["MASTER_ADDR"] = nodes[0].Name
			}
			if opts.PodNetwork || schedulerPlaced {
				delete(want, "CUDA_VISIBLE_DEVICES") // the device plugin's, the scheduler's
				if master != "" && got["MASTER_ADDR"] != master {
					t.Errorf("rank %d: MASTER_ADDR=%q, rank 0 has %q: want the same on every node", rank, got["MASTER_ADDR"], master)
				}
				master = got["MASTER_ADDR"]
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("rank %d: %s=%q, want %q", rank, k, got[k], v)
				}
			}
			if got["MASTER_ADDR"] == "" || got["MASTER_PORT"] == "" || port != "" && got["MASTER_PORT"] != port {
				t.Errorf("rank %d: MASTER_ADDR=%q MASTER_PORT=%q, want both set, the port the same on every node", rank, got["MASTER_ADDR"], got["MASTER_PORT"])
			}
			port = got["MASTER_PORT"]
		}
	})

	t.Run("WorkDir", func(t *testing.T) {
		t.Parallel()
		if opts.ImageWorkDir {
			t.Skip("Options.ImageWorkDir: the job runs in its image's working directory")
		}
		h := NewHarness(t, newExec(t))
		l := h.Run(t, Program{Steps: []Step{{Pwd: true}}}, func(l *executor.Launch) {
			// The executor creates a missing work dir.
			if _, err := os.Stat(l.WorkDir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("precondition: work dir should not exist yet (err=%v)", err)
			}
		})
		ev := h.Wait(t, l.Ref, executor.Exited)
		checkExit(t, ev, domain.AttemptSucceeded, domain.ReasonCompleted, intPtr(0))
		want := l.WorkDir
		if opts.Processes {
			want, _ = filepath.EvalSymlinks(l.WorkDir)
		}
		if got := h.LogLines(t, l.Ref, executor.LogQuery{}); !slices.Equal(got, []string{want}) {
			t.Errorf("job ran in %q, want %q", got, want)
		}
	})

	t.Run("Capabilities", func(t *testing.T) {
		t.Parallel()
		ex := newExec(t)
		if a, b := ex.Capabilities(), ex.Capabilities(); !reflect.DeepEqual(a, b) {
			t.Errorf("Capabilities changed between calls: %+v, then %+v", a, b)
		}
	})

	t.Run("Inventory", func(t *testing.T) {
		t.Parallel()
		inv, err := newExec(t).Inventory(ctx)
		if err != nil {
			t.Fatalf("Inventory: %v", err)
		}
		if len(inv.Nodes) == 0 {
			t.Fatal("Inventory has no nodes")
		}
		for _, n := range inv.Nodes {
			if n.Name == "" || n.CPUs <= 0 || n.Memory <= 0 {
				t.Errorf("node %+v: want a name, CPUs and memory", n)
			}
		}
	})
}

// checkEnv checks the environment lines an attempt printed: exactly env,
// plus the attempt's own HOME and TMPDIR (under its directory) and the
// name of the user it runs as, where env does not set them, plus the
// device and rank environment of its placement (none: no GPUs, a single
// process), and nothing else.
//
// In a container (Options.ContainerEnv), what the runtime adds is
// allowed, and HOME, TMPDIR and LOGNAME are not checked.
func checkEnv(t *testing.T, l executor.Launch, env, lines []string, container bool) {
	t.Helper()
	var got []string
	added := map[string]string{}
	rank := map[string]string{"CUDA_VISIBLE_DEVICES": "", "WORLD_SIZE": "1", "RANK": "0", "NODE_RANK": "0",
		"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "", "MASTER_PORT": ""}
	for _, ln := range lines {
		k, v, _ := strings.Cut(ln, "=")
		if _, ok := rank[k]; ok {
			added[k] = v
			continue
		}
		switch k {
		case "HOME", "TMPDIR", "LOGNAME":
			added[k] = v
			continue
		}
		got = append(got, ln)
	}
	for k, want := range rank {
		if container && k == "CUDA_VISIBLE_DEVICES" {
			continue // the GPU device plugin's (see Options.PodNetwork)
		}
		if v, ok := added[k]; !ok || (want != "" && v != want) || (k != "CUDA_VISIBLE_DEVICES" && v == "") {
			t.Errorf("%s=%q (set: %v), want %q", k, v, ok, want)
		}
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(env))
	if container {
		for _, kv := range want {
			if !slices.Contains(got, kv) {
				t.Errorf("environment = %q, want %q among it", got, kv)
			}
		}
		return
	}
	if !slices.Equal(got, want) {
		t.Errorf("environment = %q, want exactly %q", got, want)
	}
	for _, k := range []string{"HOME", "TMPDIR"} {
		if !strings.HasPrefix(added[k], l.Dir+"/") {
			t.Errorf("%s = %q, want a directory of the attempt's own, under %s", k, added[k], l.Dir)
		}
	}
	if added["LOGNAME"] == "" {
		t.Error("LOGNAME is not set")
	}
}

// checkCheckpoints checks o's checkpoints against want, by name (Location
// and ModTime only for being set), and their order.
func checkCheckpoints(t *testing.T, o executor.Outputs, want map[string]executor.Checkpoint) {
	t.Helper()
	cs, err := o.Checkpoints(context.Background())
	if err != nil {
		t.Fatalf("Checkpoints: %v", err)
	}
	if len(cs) != len(want) {
		t.Errorf("Checkpoints = %+v, want %d: %+v (no .tmp, no marker, no link)", cs, len(want), want)
	}
	for i, c := range cs {
		w, ok := want[c.Name]
		if !ok || c.Complete != w.Complete || c.Size != w.Size || c.Files != w.Files || c.Location == "" || c.ModTime.IsZero() || c.Complete != (c.Why == "") {
			t.Errorf("checkpoint %+v, want %+v with a location and a time, and a reason why when not complete", c, w)
		}
		if i > 0 && c.ModTime.Before(cs[i-1].ModTime) {
			t.Errorf("checkpoints out of order: %s (%s) after %s (%s)", c.Name, c.ModTime, cs[i-1].Name, cs[i-1].ModTime)
		}
	}
}

// watchedBuffer is a writer whose content can be awaited.
type watchedBuffer struct {
	mu     sync.Mutex
	b      strings.Builder
	notify chan struct{}
}

func newWatchedBuffer() *watchedBuffer { return &watchedBuffer{notify: make(chan struct{})} }

func (w *watchedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	close(w.notify)
	w.notify = make(chan struct{})
	return len(p), nil
}

func (w *watchedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// waitFor waits until the buffer holds s.
func (w *watchedBuffer) waitFor(t testing.TB, s string) {
	t.Helper()
	deadline := time.NewTimer(WaitTimeout)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		ok, ch := strings.Contains(w.b.String(), s), w.notify
		w.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("%q not written within %s; got %q", s, WaitTimeout, w.String())
		}
	}
}

// interleaves reports whether got is a and b merged, each in its order.
func interleaves(got, a, b []string) bool {
	if len(got) != len(a)+len(b) {
		return false
	}
	var i, j int
	for _, s := range got {
		switch {
		case i < len(a) && s == a[i]:
			i++
		case j < len(b) && s == b[j]:
			j++
		default:
			return false
		}
	}
	return true
}

func intPtr(i int) *int { return &i }

func fmtCode(p *int) string {
	if p == nil {
		return "nil"
	}
	return strconv.Itoa(*p)
}

func checkExit(t *testing.T, ev executor.Event, state domain.AttemptState, reason domain.Reason, code *int) {
	t.Helper()
	if ev.State != state || ev.Reason != reason {
		t.Errorf("got %s/%s (%q), want %s/%s", ev.State, ev.Reason, ev.Message, state, reason)
	}
	if (code == nil) != (ev.ExitCode == nil) || (code != nil && *code != *ev.ExitCode) {
		t.Errorf("exit code = %s, want %s (message %q)", fmtCode(ev.ExitCode), fmtCode(code), ev.Message)
	}
	if ev.Message == "" {
		t.Error("Exited event has no message")
	}
}

var nextJob atomic.Int64

func testPath() string {
	if p := os.Getenv("PATH"); p != "" {
		return p
	}
	return "/usr/local/bin:/usr/bin:/bin"
}

// Harness collects one executor's events by attempt.
type Harness struct {
	Exec executor.Executor

	mu     sync.Mutex
	events map[executor.Ref][]executor.Event
	notify chan struct{} // closed and replaced on every event
}

// NewHarness starts collecting ex's events until the test ends.
func NewHarness(t testing.TB, ex executor.Executor) *Harness {
	h := &Harness{Exec: ex, events: map[executor.Ref][]executor.Event{}, notify: make(chan struct{})}
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		for {
			select {
			case ev, ok := <-ex.Events():
				if !ok {
					return
				}
				h.mu.Lock()
				h.events[ev.Ref] = append(h.events[ev.Ref], ev)
				close(h.notify)
				h.notify = make(chan struct{})
				h.mu.Unlock()
			case <-stop:
				return
			}
		}
	}()
	return h
}

// Launch launches argv as a new attempt in fresh directories under
// t.TempDir(), with outputs of its own (TRAINYARD_OUTPUT_DIR, and
// TRAINYARD_CHECKPOINT_DIR below it); mod, when non-nil, adjusts the
// launch first.
func (h *Harness) Launch(t testing.TB, argv []string, mod func(*executor.Launch)) executor.Launch {
	t.Helper()
	root := t.TempDir()
	ref := executor.Ref{JobID: 1_000_000 + nextJob.Add(1), Attempt: 1}
	dir := filepath.Join(root, "attempt")
	out := filepath.Join(root, "outputs")
	ckpt := filepath.Join(out, executor.CheckpointsDir)
	if err := os.MkdirAll(ckpt, 0o755); err != nil {
		t.Fatal(err)
	}
	l := executor.Launch{
		Ref:  ref,
		Argv: argv,
		Env: []string{"PATH=" + testPath(), "HOME=" + root, "LANG=C",
			"TRAINYARD_OUTPUT_DIR=" + out, "TRAINYARD_CHECKPOINT_DIR=" + ckpt},
		WorkDir:  filepath.Join(root, "work"),
		Dir:      dir,
		LogPath:  filepath.Join(dir, "output.log"),
		Writable: []string{out, ckpt},
		Grace:    5 * time.Second,
	}
	if mod != nil {
		mod(&l)
	}
	// A variable mod appended again replaces the harness's.
	seen := map[string]bool{}
	for i := len(l.Env) - 1; i >= 0; i-- {
		k, _, _ := strings.Cut(l.Env[i], "=")
		if seen[k] {
			l.Env = slices.Delete(l.Env, i, i+1)
		}
		seen[k] = true
	}
	// Outputs the job is not told of are not given to it (a launch under
	// /tmp has no private /tmp).
	if v, _ := getenv(l.Env, "TRAINYARD_OUTPUT_DIR"); v != out {
		l.Writable = slices.DeleteFunc(l.Writable, func(d string) bool { return d == out || d == ckpt })
	}
	if err := h.Exec.Launch(context.Background(), l); err != nil {
		t.Fatalf("Launch %v: %v", argv, err)
	}
	return l
}

// Run launches the Program p as Launch does.
func (h *Harness) Run(t testing.TB, p Program, mod func(*executor.Launch)) executor.Launch {
	t.Helper()
	return h.Launch(t, p.Argv(), mod)
}

// Outputs opens the outputs of l (its TRAINYARD_OUTPUT_DIR) until the test
// ends.
func (h *Harness) Outputs(t testing.TB, l executor.Launch) executor.Outputs {
	t.Helper()
	var dir string
	for _, kv := range l.Env {
		if v, ok := strings.CutPrefix(kv, "TRAINYARD_OUTPUT_DIR="); ok {
			dir = v
		}
	}
	o, err := h.Exec.Outputs(context.Background(), dir)
	if err != nil {
		t.Fatalf("Outputs(%s): %v", dir, err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

// ReadOutput returns the content of the output file rel.
func ReadOutput(t testing.TB, o executor.Outputs, rel string) string {
	t.Helper()
	f, err := o.Open(context.Background(), rel)
	if err != nil {
		t.Fatalf("open output %s: %v", rel, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("read output %s: %v", rel, err)
	}
	if int64(len(b)) != f.Size {
		t.Errorf("output %s: read %d bytes, Size says %d", rel, len(b), f.Size)
	}
	return string(b)
}

// LogLines returns the lines the executor's Logs writes for q (not
// following), without their newlines.
func (h *Harness) LogLines(t testing.TB, ref executor.Ref, q executor.LogQuery) []string {
	t.Helper()
	var b strings.Builder
	if err := h.Exec.Logs(context.Background(), ref, q, &b); err != nil {
		t.Fatalf("Logs(%s, %+v): %v", ref, q, err)
	}
	s := b.String()
	if s == "" {
		return nil
	}
	if !strings.HasSuffix(s, "\n") {
		t.Errorf("Logs(%s, %+v) = %q: the last line has no newline", ref, q, s)
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// WaitLine waits up to WaitTimeout until the program's output (Logs
// without timestamps) of ref holds line.
func (h *Harness) WaitLine(t testing.TB, ref executor.Ref, line string) {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for {
		var b strings.Builder
		err := h.Exec.Logs(context.Background(), ref, executor.LogQuery{}, &b)
		if err == nil && slices.Contains(strings.Split(b.String(), "\n"), line) {
			return
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Logs(%s): %v", ref, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("attempt %s: no line %q in its log within %s; log: %q", ref, line, WaitTimeout, b.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Records returns the whole log of ref as Logs writes it with timestamps
// (q.Timestamps is set), parsed; every line must be well formed.
func (h *Harness) Records(t testing.TB, ref executor.Ref, q executor.LogQuery) []logs.Line {
	t.Helper()
	q.Timestamps = true
	var out []logs.Line
	for i, raw := range h.LogLines(t, ref, q) {
		ln := logs.ParseLine([]byte(raw))
		if ln.Stream == "" || ln.Time.IsZero() {
			t.Errorf("log line %d is malformed: %q", i+1, raw)
		}
		out = append(out, ln)
	}
	return out
}

// WaitFor returns the first event of ref that match reports true for,
// waiting up to WaitTimeout; an Exited or Lost event that does not match
// fails the test at once.
func (h *Harness) WaitFor(t testing.TB, ref executor.Ref, what string, match func(executor.Event) bool) executor.Event {
	t.Helper()
	deadline := time.NewTimer(WaitTimeout)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		evs := h.events[ref]
		ch := h.notify
		h.mu.Unlock()
		for _, ev := range evs {
			if match(ev) {
				return ev
			}
			if ev.Kind == executor.Exited || ev.Kind == executor.Lost {
				t.Fatalf("attempt %s: waiting for %s, got %s: %s %s: %s", ref, what, ev.Kind, ev.State, ev.Reason, ev.Message)
			}
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("attempt %s: no %s within %s; events so far: %+v", ref, what, WaitTimeout, evs)
		}
	}
}

// Events returns the events of ref seen so far.
func (h *Harness) Events(ref executor.Ref) []executor.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events[ref])
}

// Wait returns the first event of kind for ref, waiting up to WaitTimeout.
func (h *Harness) Wait(t testing.TB, ref executor.Ref, kind executor.EventKind) executor.Event {
	t.Helper()
	return h.WaitFrom(t, ref, kind, 0)
}

// WaitFrom is Wait among the events of ref from index from on. An Exited or
// Lost event of another kind than the one awaited fails the test at once.
func (h *Harness) WaitFrom(t testing.TB, ref executor.Ref, kind executor.EventKind, from int) executor.Event {
	t.Helper()
	deadline := time.NewTimer(WaitTimeout)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		evs := h.events[ref]
		ch := h.notify
		h.mu.Unlock()
		for i := from; i < len(evs); i++ {
			if evs[i].Kind == kind {
				return evs[i]
			}
			if evs[i].Kind == executor.Exited || evs[i].Kind == executor.Lost {
				t.Fatalf("attempt %s: waiting for %s, got %s: %s %s: %s", ref, kind, evs[i].Kind, evs[i].State, evs[i].Reason, evs[i].Message)
			}
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("attempt %s: no %s event within %s; events so far: %+v", ref, kind, WaitTimeout, evs)
		}
	}
}

// ReadLog parses the attempt's log file; every line must be well formed.
func ReadLog(t testing.TB, path string) []logs.Line {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read log: %v", err)
	}
	var lines []logs.Line
	for i, raw := range strings.SplitAfter(string(b), "\n") {
		if raw == "" {
			continue
		}
		if !strings.HasSuffix(raw, "\n") {
			t.Errorf("log line %d has no newline: %q", i+1, raw)
		}
		ln := logs.ParseLine([]byte(raw))
		if ln.Stream == "" || ln.Time.IsZero() {
			t.Errorf("log line %d is malformed: %q", i+1, raw)
		}
		lines = append(lines, ln)
	}
	return lines
}

// WaitFiles waits until the named files exist in dir.
func WaitFiles(t testing.TB, dir string, names ...string) {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for _, name := range names {
		for {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err == nil && strings.HasSuffix(string(b), "\n") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not appear in %s within %s", name, dir, WaitTimeout)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// CheckGone fails the test unless every process whose pid is in one of the
// named files in dir has ended (zombies count as ended) within a few seconds:
// the time its parent or init needs to reap it.
func CheckGone(t testing.TB, dir string, names ...string) {
	t.Helper()
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("pid file: %v", err)
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			t.Errorf("pid file %s holds %q, not a pid", name, b)
			continue
		}
		deadline := time.Now().Add(5 * time.Second)
		for Running(pid) {
			if time.Now().After(deadline) {
				t.Errorf("process %d (%s) still runs after the attempt ended", pid, name)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// Running reports whether pid exists and is not a zombie.
func Running(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

// NeedRoot skips a test that runs jobs as other users (job isolation) when
// the tests do not run as root; under CI, which runs as root, it fails
// instead, so the isolation tests can never be skipped there unseen.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("job isolation tests need root, and CI runs as root: run them as root")
	}
	t.Skip("job isolation tests need root (jobs run as other users only when the server is root); run them as root to include them")
}
