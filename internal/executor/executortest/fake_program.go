package executortest

import (
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/logs"
)

// How the Fake plays a Program: Launch reports Started and runs its steps
// at once, in order (lines go to the attempt's log with the time they are
// played, files to the in-memory outputs, progress reports become
// Progress events as well as log lines), until the program ends or
// reaches a Block step. A blocked program waits for Stop or its timeout:
// SIGTERM is simulated (OnTerm's line, then exit), and with IgnoreTerm the
// program is "killed" when the grace period has passed, on a timer. The
// end is recorded as a real supervisor would: a system line, the
// half-written checkpoints (.tmp) removed, then the Exited event. A
// KillSupervisor step reports Lost instead.

// FakeMasterPort is the MASTER_PORT of every attempt the Fake plays.
const FakeMasterPort = 29500

// fakeRun is a Program being played.
type fakeRun struct {
	l       executor.Launch
	p       Program
	blocked bool // waiting at a Block step
	done    bool // ended (Exited or Lost decided)
	stopped bool // a stop or the timeout is under way
	timer   *time.Timer
}

func (f *Fake) run(l executor.Launch, p Program) {
	l, resumed, note := f.resume(l) // fake_checkpoints.go
	r := &fakeRun{l: l, p: p}
	f.mu.Lock()
	f.history[l.Ref] = []executor.Event{}
	f.programs[l.Ref] = r
	if out, ok := getenv(l.Env, "TRAINYARD_OUTPUT_DIR"); ok && out != "" {
		f.dirs[path.Clean(out)] = true
	}
	f.mu.Unlock()
	pid := 1000 + int(l.JobID)
	argv, _ := json.Marshal(l.Argv)
	f.line(l.Ref, logs.System, fmt.Sprintf("started %s as pid %d in %s", argv, pid, l.WorkDir))
	f.Emit(executor.Event{Ref: l.Ref, Kind: executor.Started, At: time.Now().UTC(), PID: pid, Resumed: resumed, ResumeNote: note})
	for _, s := range p.Steps {
		switch {
		case s.Out != "":
			f.line(l.Ref, logs.Stdout, s.Out)
		case s.Err != "":
			f.line(l.Ref, logs.Stderr, s.Err)
		case s.Partial != "":
			f.line(l.Ref, logs.Stdout, s.Partial)
		case s.Progress > 0:
			at := f.line(l.Ref, logs.Stdout, progressLine(s.Progress))
			f.Emit(executor.Event{Ref: l.Ref, Kind: executor.Progress, Step: s.Progress, At: at,
				Points: []domain.MetricPoint{{JobID: l.JobID, Attempt: l.Attempt, Step: s.Progress, Key: "loss", Value: 0.5, At: at}}})
		case s.File != nil:
			if out, ok := getenv(l.Env, "TRAINYARD_OUTPUT_DIR"); ok {
				f.writeFile(path.Join(out, s.File.Path), s.File.Data, s.File.Append)
			}
		case s.Checkpoint != nil && s.Checkpoint.File:
			if dir, ok := getenv(l.Env, "TRAINYARD_CHECKPOINT_DIR"); ok {
				name := path.Join(dir, s.Checkpoint.Name)
				f.writeFile(name, string(s.Checkpoint.Data), false)
				if s.Checkpoint.Complete {
					f.writeFile(name+domain.CheckpointMarker, "", false)
				}
				f.checkpointed(l, s.Checkpoint.Name) // when complete by any rule
			}
		case s.Checkpoint != nil:
			if dir, ok := getenv(l.Env, "TRAINYARD_CHECKPOINT_DIR"); ok {
				dir = path.Join(dir, s.Checkpoint.Name)
				for _, name := range slices.Sorted(maps.Keys(s.Checkpoint.Files)) {
					f.writeFile(path.Join(dir, name), s.Checkpoint.Files[name], false)
				}
				if s.Checkpoint.Complete {
					f.writeFile(path.Join(dir, domain.CheckpointMarker), "", false)
				}
				f.checkpointed(l, s.Checkpoint.Name) // when complete by any rule
			}
		case len(s.Link) == 2:
			if out, ok := getenv(l.Env, "TRAINYARD_OUTPUT_DIR"); ok {
				f.putFile(path.Join(out, s.Link[0]), &fakeFile{link: s.Link[1]})
			}
		case s.EnvFile != "":
			if out, ok := getenv(l.Env, "TRAINYARD_OUTPUT_DIR"); ok {
				for rank := range max(len(l.Placement.Nodes), 1) {
					f.writeFile(path.Join(out, fmt.Sprintf("%s.%d", s.EnvFile, rank)), strings.Join(fakeEnv(l, rank), "\n")+"\n", false)
				}
			}
		case s.PrintEnv:
			for _, kv := range fakeEnv(l, 0) {
				f.line(l.Ref, logs.Stdout, kv)
			}
		case s.Pwd:
			f.line(l.Ref, logs.Stdout, l.WorkDir)
		case len(s.Run) > 0:
			msg := "/bin/sh: 1: " + s.Run[0] + ": not found"
			f.line(l.Ref, logs.Stderr, msg)
			f.finish(r, executor.Event{State: domain.AttemptFailed, Reason: domain.ReasonEntrypointNotFound, Message: msg})
			return
		case s.Signal != "":
			f.finish(r, executor.Event{State: domain.AttemptFailed, Reason: domain.ReasonExitCode, Message: "killed by signal SIG" + strings.TrimPrefix(s.Signal, "SIG")})
			return
		case s.KillSupervisor:
			f.lose(r)
			return
		case s.Block:
			f.mu.Lock()
			r.blocked = true
			if l.Timeout > 0 {
				r.timer = time.AfterFunc(l.Timeout, func() { f.timeout(r) })
			}
			f.mu.Unlock()
			return
		}
	}
	f.exit(r)
}

// exit ends r with its exit code.
func (f *Fake) exit(r *fakeRun) {
	code := r.p.Exit
	ev := executor.Event{State: domain.AttemptSucceeded, Reason: domain.ReasonCompleted, ExitCode: &code, Message: "exited with code 0"}
	if code != 0 {
		ev.State, ev.Reason, ev.Message = domain.AttemptFailed, domain.ReasonExitCode, fmt.Sprintf("exited with code %d", code)
	}
	f.finish(r, ev)
}

// finish records r's end (ev: State, Reason, ExitCode, Message) once.
func (f *Fake) finish(r *fakeRun, ev executor.Event) {
	f.mu.Lock()
	if r.done {
		f.mu.Unlock()
		return
	}
	r.done = true
	if r.timer != nil {
		r.timer.Stop()
	}
	f.mu.Unlock()
	if dir, ok := getenv(r.l.Env, "TRAINYARD_CHECKPOINT_DIR"); ok {
		f.removeCheckpointTmp(dir)
	}
	f.sealOutputs(r.l, ev.State) // fake_checkpoints.go
	ev.Ref, ev.Kind = r.l.Ref, executor.Exited
	ev.At = f.line(r.l.Ref, logs.System, fmt.Sprintf("%s (%s): %s", ev.State, ev.Reason, ev.Message))
	f.Emit(ev)
}

// lose reports r Lost: its supervisor died without an outcome.
func (f *Fake) lose(r *fakeRun) {
	f.mu.Lock()
	if r.done {
		f.mu.Unlock()
		return
	}
	r.done = true
	f.mu.Unlock()
	f.Emit(executor.Event{Ref: r.l.Ref, Kind: executor.Lost, At: time.Now().UTC(),
		Message: fmt.Sprintf("the supervisor of attempt %s died without recording an outcome (fake)", r.l.Ref)})
}

// terminate simulates SIGTERM to a blocked r, then SIGKILL once grace has
// passed when r ignores it; end is the Exited event's state, reason and
// message.
func (f *Fake) terminate(r *fakeRun, grace time.Duration, end executor.Event) {
	f.mu.Lock()
	if r.done || r.stopped {
		f.mu.Unlock()
		return
	}
	r.stopped = true
	if r.timer != nil {
		r.timer.Stop()
	}
	f.mu.Unlock()
	if grace <= 0 {
		grace = 10 * time.Second
	}
	f.line(r.l.Ref, logs.System, fmt.Sprintf("%s; sending SIGTERM, SIGKILL to whatever is left after %s", end.Message, domain.FormatDuration(grace)))
	if r.p.IgnoreTerm {
		time.AfterFunc(grace, func() {
			f.line(r.l.Ref, logs.System, "grace period over; sending SIGKILL")
			f.finish(r, end)
		})
		return
	}
	if r.p.OnTerm != "" {
		f.line(r.l.Ref, logs.Stdout, r.p.OnTerm)
	}
	f.finish(r, end)
}

// stopProgram stops ref when it is a Program the Fake plays; false when it
// is not one.
func (f *Fake) stopProgram(ref executor.Ref, req executor.StopRequest) bool {
	f.mu.Lock()
	r := f.programs[ref]
	f.mu.Unlock()
	if r == nil {
		return false
	}
	reason, msg := req.Reason, "stopped on request"
	if reason == "" {
		reason = domain.ReasonCanceledByUser
	}
	if req.Message != "" {
		msg = "stopped: " + req.Message
	}
	grace := req.Grace
	if grace <= 0 {
		grace = r.l.Grace
	}
	f.terminate(r, grace, executor.Event{State: domain.AttemptCanceled, Reason: reason, Message: msg})
	return true
}

// timeout ends r at its launch's timeout.
func (f *Fake) timeout(r *fakeRun) {
	f.terminate(r, r.l.Grace, executor.Event{State: domain.AttemptTimedOut, Reason: domain.ReasonTimeout,
		Message: "timed out after " + domain.FormatDuration(r.l.Timeout)})
}

// fakeEnv is the environment of the process on the node of rank: the
// launch's, the attempt's own HOME, TMPDIR and LOGNAME where it sets none,
// and the placement's device and rank variables (the first node is the
// rendezvous; "localhost" without a placement).
func fakeEnv(l executor.Launch, rank int) []string {
	master := "localhost"
	if len(l.Placement.Nodes) > 0 {
		master = l.Placement.Nodes[0].Name
	}
	placed := l.Placement.Env(rank, master, FakeMasterPort)
	env := slices.DeleteFunc(slices.Clone(l.Env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.ContainsFunc(placed, func(p string) bool { return strings.HasPrefix(p, k+"=") })
	})
	for _, kv := range [][2]string{{"HOME", path.Join(l.Dir, "home")}, {"TMPDIR", path.Join(l.Dir, "tmp")}, {"LOGNAME", "fake"}} {
		if _, ok := getenv(env, kv[0]); !ok {
			env = append(env, kv[0]+"="+kv[1])
		}
	}
	return append(env, placed...)
}

// getenv returns the value of key in env ("KEY=value" entries; the last
// wins).
func getenv(env []string, key string) (string, bool) {
	for _, kv := range slices.Backward(env) {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}
