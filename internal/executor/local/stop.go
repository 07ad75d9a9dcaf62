package local

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
)

// How an attempt is stopped (the shim's side of Executor.Stop and of the
// timeout):
//
//   - The stop signal, SIGTERM, goes to the attempt's process group, or to
//     its main process only when the job asks (policy.stop_signal_to:
//     main); then the rest of the group gets SIGTERM once the main process
//     has exited.
//   - The shim then waits for every process of the attempt, not just its
//     child, until the grace period ends, and SIGKILLs what is left.
//   - A shell command string that is one simple command runs as
//     "exec COMMAND" (see execSimple), so the shell, which dies of SIGTERM
//     at once, does not sit between the shim and the trainer.
//   - Half-written checkpoints (see isCheckpointTmp) are removed once no
//     process of the attempt is left.

// stopRecord is the stop file: a stop request. Older servers wrote the
// grace in nanoseconds alone, which is still read.
type stopRecord struct {
	Grace   time.Duration `json:"grace_ns,omitempty"`
	Reason  domain.Reason `json:"reason,omitempty"`
	Message string        `json:"message,omitempty"`
}

func encodeStop(req executor.StopRequest) []byte {
	b, _ := json.Marshal(stopRecord{Grace: req.Grace, Reason: req.Reason, Message: req.Message})
	return b
}

// stopRequest reads the current stop request; a request without a reason
// is a cancellation.
func (s *shim) stopRequest() stopRecord {
	var r stopRecord
	b, err := os.ReadFile(filepath.Join(s.dir, stopFile))
	if err == nil {
		if json.Unmarshal(b, &r) != nil {
			r = stopRecord{}
			if ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
				r.Grace = time.Duration(ns)
			}
		}
	}
	if r.Grace <= 0 {
		r.Grace = s.launchGrace()
	}
	if r.Reason == "" {
		r.Reason = domain.ReasonCanceledByUser
	}
	return r
}

// describe says in words why the attempt was stopped.
func (r stopRecord) describe() string {
	if r.Message != "" {
		return r.Message
	}
	switch r.Reason {
	case domain.ReasonCanceledByUser:
		return "canceled"
	case domain.ReasonPreempted:
		return "preempted"
	default:
		return string(r.Reason)
	}
}

// toMain reports whether the stop and warning signals go to the main
// process only.
func (s *shim) toMain() bool { return s.rec.StopSignalTo == domain.StopMain }

// target names who gets the stop signal, for the log.
func (s *shim) target() string {
	if s.toMain() {
		return "the main process"
	}
	return "the process group"
}

// signalTarget sends sig to the main process or to its whole group.
func (s *shim) signalTarget(pid int, sig syscall.Signal) {
	if s.toMain() {
		_ = syscall.Kill(pid, sig)
		return
	}
	_ = syscall.Kill(-pid, sig)
}

// warnSignal is the launch's warning signal; ok is false when there is
// none or it comes too late to matter.
func (s *shim) warnSignal() (sig syscall.Signal, at time.Duration, ok bool) {
	w := s.rec.Warn
	if w.Signal == "" || s.rec.Timeout <= 0 || w.Before <= 0 || w.Before >= s.rec.Timeout {
		return 0, 0, false
	}
	sig = unix.SignalNum("SIG" + strings.TrimPrefix(w.Signal, "SIG"))
	if sig == 0 {
		return 0, 0, false
	}
	return sig, s.rec.Timeout - w.Before, true
}

// groupDone reports whether none of the attempt's processes is left
// once its main process (pid) has been waited for. A shim of its own
// reaps its exited children (re-parented descendants of the user's
// process) and looks for any left; a shared supervisor, whose other
// children are other attempts', looks in the attempt's groups, else for
// the attempt's processes as its tracker finds them (its reaper reaps).
func (s *shim) groupDone(pid int) bool {
	switch {
	case s.sv == nil:
		return reapExited()
	case s.cg != nil:
		return s.cg.JobDone()
	default:
		return len(sharedAttemptProcs(procTable(), s.self, pid, readProcs(filepath.Join(s.dir, procsFile)))) == 0
	}
}

// reapExited reaps the shim's exited children (re-parented descendants of
// the user's process) and reports whether none is left. It must not run
// before the main process has been waited for.
func reapExited() bool {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR) || pid > 0:
			continue
		case err != nil: // ECHILD: none left
			return true
		}
		return false // some still run
	}
}

// groupPoll is how often the shim looks for the attempt's remaining
// processes once its main process has exited during a stop.
const groupPoll = 20 * time.Millisecond

// shellWords are the shell's reserved words and the builtins that no
// program stands for: "exec WORD" would not do what "WORD" does.
var shellWords = []string{
	"!", "{", "}", "case", "do", "done", "elif", "else", "esac", "fi", "for", "if", "in", "then", "until", "while", "function", "select",
	".", ":", "alias", "bg", "break", "builtin", "cd", "command", "continue", "eval", "exec", "exit", "export", "fg", "getopts", "hash",
	"jobs", "local", "read", "readonly", "return", "set", "shift", "source", "times", "trap", "type", "ulimit", "umask", "unalias",
	"unset", "wait",
}

// execSimple returns argv with a shell command string that is one simple
// command (no ; & | < > ( ) ` or newline, and a first word that names a
// program) rewritten to "exec COMMAND": the shell replaces itself with the
// program, so the stop signal reaches the program and no shell lingers.
// Quotes, variables and globs still work, as the shell still parses the
// string. Anything else is returned unchanged.
func execSimple(argv []string) []string {
	if !isShell(argv) {
		return argv
	}
	cmd := argv[2]
	if strings.ContainsAny(cmd, ";&|<>()`\n") {
		return argv
	}
	first, _, _ := strings.Cut(strings.TrimLeft(cmd, " \t"), " ")
	first, _, _ = strings.Cut(first, "\t")
	if first == "" || slices.Contains(shellWords, first) ||
		strings.ContainsFunc(first, func(r rune) bool { return !isNameRune(r) }) {
		return argv
	}
	out := slices.Clone(argv)
	out[2] = "exec " + strings.TrimLeft(cmd, " \t")
	return out
}

// isNameRune reports whether r may appear in a program name that needs no
// quoting and is not an assignment (FOO=1) or expansion.
func isNameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._/+-@%,:", r)
}

// isCheckpointTmp reports whether a name in the checkpoint directory is a
// checkpoint being written: ".tmp*" (the SDK's and examples/trainer.py's
// temporary files) or "*.tmp". The platform never registers these
// (artifacts.Checkpoints), and once the attempt is over nobody finishes
// them.
func isCheckpointTmp(name string) bool {
	return strings.HasPrefix(name, ".tmp") || strings.HasSuffix(name, ".tmp")
}

// removeCheckpointTmp deletes the half-written checkpoints left in the
// attempt's checkpoint directory, once none of its processes is left. The
// directory's last element belongs to the job (it may have made it a
// link), so it is opened below its parent with os.Root, which never
// follows a link out of it.
func (s *shim) removeCheckpointTmp() {
	dir := s.rec.CheckpointDir
	if dir == "" {
		return
	}
	parent, err := os.OpenRoot(filepath.Dir(dir))
	if err != nil {
		return
	}
	defer parent.Close()
	root, err := parent.OpenRoot(filepath.Base(dir))
	if err != nil {
		return // missing, or not a directory inside its parent
	}
	defer root.Close()
	f, err := root.Open(".")
	if err != nil {
		return
	}
	names, _ := f.Readdirnames(-1)
	f.Close()
	var removed []string
	for _, n := range names {
		if !isCheckpointTmp(n) {
			continue
		}
		if err := root.RemoveAll(n); err != nil {
			s.log.system("cannot remove the unfinished checkpoint %s: %v", filepath.Join(dir, n), err)
			continue
		}
		removed = append(removed, n)
	}
	if len(removed) > 0 {
		slices.Sort(removed)
		s.log.system("removed %d unfinished checkpoint file(s) from %s: %s", len(removed), dir, strings.Join(removed, ", "))
	}
}

// stopReasons are the reasons a stop request may carry; an attempt ended
// for one of them is canceled.
var stopReasons = []domain.Reason{domain.ReasonCanceledByUser, domain.ReasonPreempted, domain.ReasonHealthCheckFailed, domain.ReasonStalled}

func isStopReason(r domain.Reason) bool { return slices.Contains(stopReasons, r) }
