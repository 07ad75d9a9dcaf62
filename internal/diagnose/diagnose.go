// Package diagnose classifies why an attempt failed from the evidence the
// platform holds: the exit record (reason, exit code, signal, peak memory
// against the limit) and the tail of the attempt's log. It is pure: the
// caller reads the log and the store; Classify only looks at what it is
// given, so the same evidence always yields the same diagnosis.
//
// Rules live in one ordered table (rules.go). Facts the supervisor is sure
// of come first (out of memory, entrypoint not found, timeout, stalled,
// launch failed); then log patterns, where the latest matching line wins;
// then the generic classes (killed by a signal, a Python exception, an exit
// code, a lost node).
package diagnose

import (
	"fmt"
	"strings"

	"trainyard/internal/domain"
	"trainyard/internal/logs"
)

// Class names a kind of failure. Classes never change spelling once released.
type Class string

// Failure classes, from the most to the least specific.
const (
	OutOfMemory        Class = "out-of-memory"
	CUDAOutOfMemory    Class = "cuda-out-of-memory"
	MissingDependency  Class = "missing-dependency"
	EntrypointNotFound Class = "entrypoint-not-found"
	NCCLTimeout        Class = "nccl-timeout"
	FileNotFound       Class = "file-not-found"
	PermissionDenied   Class = "permission-denied"
	DiskFull           Class = "disk-full"
	Timeout            Class = "timeout"
	Stalled            Class = "stalled"
	Idle               Class = "idle"
	LaunchFailed       Class = "launch-failed"
	KilledBySignal     Class = "killed-by-signal"
	PythonException    Class = "python-exception"
	ExitCode           Class = "exit-code"
	NodeLost           Class = "node-lost"
	Unknown            Class = "unknown"

	// EnvironmentCheckFailed: the environment's check command failed
	// before the entrypoint started.
	EnvironmentCheckFailed Class = "environment-check-failed"
)

// Classes lists every class in table order (for documentation and tests).
func Classes() []Class {
	return []Class{OutOfMemory, EntrypointNotFound, EnvironmentCheckFailed, Timeout, Stalled, Idle, LaunchFailed, CUDAOutOfMemory, NCCLTimeout,
		MissingDependency, DiskFull, PermissionDenied, FileNotFound, KilledBySignal,
		PythonException, ExitCode, NodeLost, Unknown}
}

// Evidence is what is known about one ended attempt.
type Evidence struct {
	JobID   int64 // for the commands named in hints; 0 leaves them generic
	Attempt int
	State   domain.JobState
	Reason  domain.Reason
	// ExitCode is nil when the process was killed by a signal or never ran.
	ExitCode *int
	// Signal is the signal that killed the process ("SIGKILL"), or "".
	Signal  string
	Message string
	// LogTail is the end of the attempt's log; the supervisor's own
	// ("system") lines are ignored for pattern matching.
	LogTail []logs.Line
	// Resources is the request; Memory is the enforced limit.
	Resources domain.Resources
	// MaxRSS is the attempt's peak memory (0 when unknown).
	MaxRSS     domain.ByteSize
	Env        string   // the job's environment, named in hints
	Entrypoint []string // the job's argv, named in hints
}

// Diagnosis is the classified failure.
type Diagnosis struct {
	Class   Class
	Summary string // one sentence: what went wrong
	// Evidence holds the exact log lines (program text, no timestamp) that
	// matched, oldest first; empty when the class rests on exit facts alone.
	Evidence []string
	Hint     string // what to do next
}

// maxEvidence bounds the lines quoted as evidence.
const maxEvidence = 3

// Classify returns the diagnosis of a failed attempt. It never fails: when
// nothing specific matches, the class is exit-code (or unknown without an
// exit code).
func Classify(ev Evidence) Diagnosis {
	lines := programLines(ev.LogTail)
	// 1. Facts the supervisor recorded, checked before the log.
	for _, r := range rules {
		if r.stage == stageFacts && r.facts(ev) {
			return r.diagnose(ev, nil, "", nil)
		}
	}
	// 2. Log patterns: the rule whose last match is latest wins; on the
	// same line, the earlier rule in the table.
	var best *rule
	bestAt := -1
	var bestSub []string
	for i := range rules {
		r := &rules[i]
		if r.stage != stageLog {
			continue
		}
		for j := len(lines) - 1; j > bestAt; j-- {
			if m := r.pattern.FindStringSubmatch(lines[j]); m != nil {
				best, bestAt, bestSub = r, j, m
				break
			}
		}
	}
	if best != nil {
		return best.diagnose(ev, matching(lines, best, bestAt), lines[bestAt], bestSub)
	}
	// 3. Generic classes.
	for _, r := range rules {
		if r.stage != stageFallback {
			continue
		}
		if r.pattern != nil {
			for j := len(lines) - 1; j >= 0; j-- {
				if m := r.pattern.FindStringSubmatch(lines[j]); m != nil {
					return r.diagnose(ev, []string{lines[j]}, lines[j], m)
				}
			}
			continue
		}
		if r.facts(ev) {
			return r.diagnose(ev, nil, "", nil)
		}
	}
	return Diagnosis{Class: Unknown, Summary: "the attempt ended without an exit code, a signal or a recognizable error in its log",
		Hint: "read the log for the error: " + logsCmd(ev, "")}
}

// programLines is the text of the program's own output lines.
func programLines(tail []logs.Line) []string {
	var out []string
	for _, l := range tail {
		if l.Stream == logs.System {
			continue
		}
		out = append(out, l.Text)
	}
	return out
}

// matching is the evidence for a log rule that matched at index at: the
// lines up to at that match the rule, the last maxEvidence of them.
func matching(lines []string, r *rule, at int) []string {
	var out []string
	for _, l := range lines[:at+1] {
		if r.pattern.MatchString(l) && (len(out) == 0 || out[len(out)-1] != l) {
			out = append(out, l)
		}
	}
	return out[max(len(out)-maxEvidence, 0):]
}

func (r *rule) diagnose(ev Evidence, evidence []string, line string, sub []string) Diagnosis {
	summary, hint := r.explain(ev, line, sub)
	return Diagnosis{Class: r.class, Summary: summary, Evidence: evidence, Hint: hint}
}

// logsCmd is the command that shows the attempt's log, with extra flags.
func logsCmd(ev Evidence, flags string) string {
	if ev.JobID == 0 {
		return "trainyard logs ID" + flags
	}
	cmd := fmt.Sprintf("trainyard logs %d", ev.JobID)
	if ev.Attempt > 0 {
		cmd += fmt.Sprintf(" --attempt %d", ev.Attempt)
	}
	return cmd + flags
}

// envName is the job's environment for messages.
func envName(ev Evidence) string {
	if ev.Env == "" {
		return "(unnamed)"
	}
	return ev.Env
}

// program is argv[0] of the entrypoint, or "the entrypoint".
func program(ev Evidence) string {
	argv := ev.Entrypoint
	if len(argv) == 3 && argv[0] == "/bin/sh" && argv[1] == "-c" {
		argv = argv[2:]
	}
	if len(argv) > 0 {
		if f := strings.Fields(argv[0]); len(f) > 0 {
			return f[0]
		}
	}
	return "the entrypoint"
}
