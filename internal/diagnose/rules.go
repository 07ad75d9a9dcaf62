package diagnose

import (
	"fmt"
	"strconv"
	"strings"

	"trainyard/internal/domain"
	"trainyard/internal/lazyre"
)

// stage says when a rule is tried (see Classify).
type stage int

const (
	stageFacts    stage = iota // exit facts, before the log
	stageLog                   // log patterns, latest match wins
	stageFallback              // generic classes, in table order
)

// rule is one row of the table: a class and what makes it match.
type rule struct {
	class Class
	stage stage
	// facts matches on the exit record; used when pattern is nil.
	facts func(Evidence) bool
	// pattern matches one line of the program's output.
	pattern *lazyre.Regexp
	// explain returns the summary and the hint; line is the deciding log
	// line and sub its submatches (both empty for facts).
	explain func(ev Evidence, line string, sub []string) (summary, hint string)
}

// nearLimit is the share of the memory limit above which a SIGKILL is taken
// for the out-of-memory killer's.
const nearLimit = 0.9

// rules is the classification table, in order.
var rules = []rule{
	{class: OutOfMemory, stage: stageFacts,
		facts: func(ev Evidence) bool {
			if ev.Reason == domain.ReasonOOMKilled {
				return true
			}
			killed := ev.Signal == "SIGKILL" || (ev.ExitCode != nil && *ev.ExitCode == 128+9)
			return killed && ev.Resources.Memory > 0 && float64(ev.MaxRSS) >= nearLimit*float64(ev.Resources.Memory)
		},
		explain: func(ev Evidence, _ string, _ []string) (string, string) {
			var s string
			if ev.Reason == domain.ReasonOOMKilled {
				s = "the process exceeded its memory limit of " + human(ev.Resources.Memory)
				if ev.MaxRSS > 0 {
					s += " (peak " + human(ev.MaxRSS) + ")"
				}
			} else {
				s = fmt.Sprintf("the process was killed by SIGKILL with its memory at %s of its %s limit: the out-of-memory killer", human(ev.MaxRSS), human(ev.Resources.Memory))
			}
			return s, fmt.Sprintf("raise resources.memory (now %s), or lower the batch size or the number of data loader workers", human(ev.Resources.Memory))
		}},
	{class: EntrypointNotFound, stage: stageFacts,
		facts: func(ev Evidence) bool { return ev.Reason == domain.ReasonEntrypointNotFound },
		explain: func(ev Evidence, _ string, _ []string) (string, string) {
			s := fmt.Sprintf("the program %s could not be started", program(ev))
			if ev.Message != "" {
				s += ": " + ev.Message
			}
			return s, fmt.Sprintf("check that %s is installed in environment %s and on PATH, or give its absolute path in entrypoint", program(ev), envName(ev))
		}},
	{class: EnvironmentCheckFailed, stage: stageFacts,
		facts: func(ev Evidence) bool { return ev.Reason == domain.ReasonEnvironmentCheckFailed },
		explain: func(ev Evidence, _ string, _ []string) (string, string) {
			s := fmt.Sprintf("environment %s failed its check, so the entrypoint never started", envName(ev))
			if ev.Message != "" {
				s += ": " + ev.Message
			}
			return s, fmt.Sprintf("see the check's output with %s; fix the environment (or this machine) and register a new version (trainyard env register), or submit with another env (trainyard env ls)", logsCmd(ev, ""))
		}},
	{class: Timeout, stage: stageFacts,
		facts: func(ev Evidence) bool { return ev.Reason == domain.ReasonTimeout },
		explain: func(ev Evidence, _ string, _ []string) (string, string) {
			s := "the attempt ran past its time limit (policy.timeout) and was stopped"
			if ev.Message != "" {
				s += ": " + ev.Message
			}
			return s, "raise policy.timeout, or make the job re-entrant (policy.reentrant with retries) so it resumes from its latest checkpoint"
		}},
	{class: Stalled, stage: stageFacts,
		facts: func(ev Evidence) bool {
			return ev.Reason == domain.ReasonStalled || ev.Reason == domain.ReasonHealthCheckFailed
		},
		explain: func(ev Evidence, _ string, _ []string) (string, string) {
			s := "the platform stopped the attempt because it reported no training progress in time"
			if ev.Message != "" {
				s += ": " + ev.Message
			}
			return s, "check where the program hangs (data loading, a collective, a deadlock): " + logsCmd(ev, " --tail 50") +
				"; report progress more often, or relax health.first_progress and health.stall"
		}},
	{class: Idle, stage: stageFacts,
		facts: func(ev Evidence) bool { return ev.Reason == domain.ReasonIdle },
		explain: func(ev Evidence, _ string, _ []string) (string, string) {
			s := "the platform stopped the attempt because its GPUs stayed idle for the pool's idle_stop window"
			if ev.Message != "" {
				s += ": " + ev.Message
			}
			return s, "find what starves the GPUs (data loading, a CPU-bound step, waiting on a lock): " + logsCmd(ev, " --tail 50") +
				"; fix it and run the job again (trainyard rerun " + strconv.FormatInt(ev.JobID, 10) + ")"
		}},
	{class: LaunchFailed, stage: stageFacts,
		facts: func(ev Evidence) bool { return ev.Reason == domain.ReasonLaunchFailed },
		explain: func(ev Evidence, _ string, _ []string) (string, string) {
			s := "the platform could not start the attempt"
			if ev.Message != "" {
				s += ": " + ev.Message
			}
			return s, "the message names what was missing (a secret, a directory, the supervisor); fix it and resubmit"
		}},
	{class: CUDAOutOfMemory, stage: stageLog,
		pattern: lazyre.New(`CUDA out of memory|CUBLAS_STATUS_ALLOC_FAILED|CUDA error: out of memory|cudaErrorMemoryAllocation|OutOfMemoryError|RESOURCE_EXHAUSTED: Out of memory`),
		explain: func(ev Evidence, _ string, _ []string) (string, string) {
			return "a GPU ran out of memory",
				"lower the batch size, use mixed precision or gradient accumulation/checkpointing, or run on GPUs with more memory; make sure no other process shares the GPU"
		}},
	{class: NCCLTimeout, stage: stageLog,
		pattern: lazyre.New(`(?i)watchdog caught collective operation timeout|\b(?:nccl|gloo)\b.*\b(?:timeout|timed out)\b|\b(?:timeout|timed out)\b.*\b(?:nccl|gloo)\b|DistStoreError: Timed out|rendezvous.*\b(?:timeout|timed out)\b`),
		explain: func(ev Evidence, _ string, _ []string) (string, string) {
			return "a collective operation (NCCL/Gloo) timed out: one rank stalled, crashed or could not reach the others",
				"look for the first rank that failed in its log; rerun with env_vars NCCL_DEBUG=INFO (and TORCH_NCCL_ASYNC_ERROR_HANDLING=1) to see which collective hung; check that all ranks reach the same collectives"
		}},
	{class: MissingDependency, stage: stageLog,
		pattern: missingDependency,
		explain: func(ev Evidence, line string, sub []string) (string, string) {
			get := func(name string) string { return group(missingDependency, sub, name) }
			env := envName(ev)
			switch {
			case get("mod") != "":
				mod := get("mod")
				top, _, _ := strings.Cut(mod, ".")
				return fmt.Sprintf("environment %s lacks a dependency: %s", env, mod),
					fmt.Sprintf("install the package that provides %s in environment %s (e.g. pip install %s), or choose an environment that has it (spec field env)", top, env, top)
			case get("from") != "":
				return fmt.Sprintf("environment %s lacks a dependency: %s has no %s (a different version is installed)", env, get("from"), get("name")),
					fmt.Sprintf("pin the version of %s the code expects in environment %s", get("from"), env)
			case get("lib") != "" || get("solib") != "":
				lib := get("lib") + get("solib")
				return fmt.Sprintf("environment %s lacks a dependency: the shared library %s", env, lib),
					fmt.Sprintf("install the system package that provides %s in environment %s, or check LD_LIBRARY_PATH (CUDA libraries must match the driver)", lib, env)
			default:
				return fmt.Sprintf("environment %s lacks a dependency: %s", env, get("other")),
					fmt.Sprintf("install the missing package in environment %s, or choose an environment that has it (spec field env)", env)
			}
		}},
	{class: DiskFull, stage: stageLog,
		pattern: lazyre.New(`(?i)No space left on device|\bENOSPC\b|Disk quota exceeded|\bEDQUOT\b`),
		explain: func(ev Evidence, line string, sub []string) (string, string) {
			s := "a disk filled up"
			if p := pathIn(line); p != "" {
				s += " while writing " + p
			}
			return s, "free space or write elsewhere: keep fewer checkpoints (checkpoint.keep), write outputs to $TRAINYARD_OUTPUT_DIR, and ask an operator how much room the volume has"
		}},
	{class: PermissionDenied, stage: stageLog,
		pattern: lazyre.New(`Permission denied|PermissionError|\bEACCES\b|Operation not permitted|\bEPERM\b`),
		explain: func(ev Evidence, line string, sub []string) (string, string) {
			s := "the program was refused access to a file or directory"
			if p := pathIn(line); p != "" {
				s = "the program was refused access to " + p
			}
			return s, "write under $TRAINYARD_OUTPUT_DIR or $TRAINYARD_CHECKPOINT_DIR (the job's own directories), or ask the owner of the path to grant access; scripts run directly need the executable bit"
		}},
	{class: FileNotFound, stage: stageLog,
		pattern: lazyre.New(`FileNotFoundError|No such file or directory|\bENOENT\b`),
		explain: func(ev Evidence, line string, sub []string) (string, string) {
			s := "a file the program needs does not exist"
			if p := pathIn(line); p != "" {
				s += ": " + p
			}
			return s, "check the path and the job's inputs; relative paths start in the attempt's own working directory, not where you submitted from: use absolute paths or the TRAINYARD_* directories"
		}},
	{class: KilledBySignal, stage: stageFallback,
		facts: func(ev Evidence) bool { return ev.Signal != "" },
		explain: func(ev Evidence, _ string, _ []string) (string, string) {
			s := "the process was killed by " + ev.Signal
			switch ev.Signal {
			case "SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE":
				return s + " (a crash in native code)", "a native extension or driver crashed: check that library versions (CUDA, PyTorch, NumPy) match each other and the driver; run with PYTHONFAULTHANDLER=1 for a stack"
			case "SIGABRT":
				return s + " (the program aborted itself)", "look for the assertion or uncaught C++ exception just before the end of the log: " + logsCmd(ev, " --tail 50")
			case "SIGKILL":
				return s, "something outside the program killed it (an operator, or the kernel under memory pressure); compare its peak memory with resources.memory: trainyard show " + jobRef(ev)
			default:
				return s, "find who sent the signal; the log's last lines may say: " + logsCmd(ev, " --tail 50")
			}
		}},
	{class: PythonException, stage: stageFallback,
		pattern: lazyre.New(`^(?:[A-Za-z_]\w*\.)*(?P<exc>[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Fault))(?:: (?P<msg>.*))?$`),
		explain: func(ev Evidence, line string, sub []string) (string, string) {
			return "the program raised " + line,
				"read the traceback above the last line: " + logsCmd(ev, " --tail 50")
		}},
	{class: ExitCode, stage: stageFallback,
		facts: func(ev Evidence) bool { return ev.ExitCode != nil },
		explain: func(ev Evidence, _ string, _ []string) (string, string) {
			code := *ev.ExitCode
			s := "the program exited with code " + strconv.Itoa(code)
			switch {
			case code == 126:
				s += " (found but not executable)"
			case code == 127:
				s += " (command not found)"
			case code > 128 && code < 128+65:
				s += fmt.Sprintf(" (a shell reporting signal %d)", code-128)
			}
			return s, "read the log for the error: " + logsCmd(ev, "")
		}},
	{class: NodeLost, stage: stageFallback,
		facts: func(ev Evidence) bool { return ev.Reason == domain.ReasonNodeLost },
		explain: func(ev Evidence, _ string, _ []string) (string, string) {
			return "the machine or the attempt's supervisor went away before the program ended",
				"mark the job re-entrant with retries (policy.reentrant, policy.retries) so it is retried automatically"
		}},
}

// missingDependency matches Python import failures and the dynamic
// loader's missing shared libraries; its named groups say what is missing.
var missingDependency = lazyre.New(`(?:ModuleNotFoundError|ImportError): (?:No module named '?(?P<mod>[\w.]+)'?|cannot import name '(?P<name>[^']+)' from '(?P<from>[\w.]+)'|(?P<lib>[^\s:]+): cannot open shared object file|(?P<other>.+))|error while loading shared libraries: (?P<solib>[^\s:]+)`)

// group returns the named submatch of re in sub, or "".
func group(re *lazyre.Regexp, sub []string, name string) string {
	if i := re.SubexpIndex(name); i >= 0 && i < len(sub) {
		return sub[i]
	}
	return ""
}

var (
	singleQuoted = lazyre.New(`'([^']+)'`)
	doubleQuoted = lazyre.New(`"([^"]+)"`)
	barePath     = lazyre.New(`(?:^|\s)(/[^\s:'"]+)`)
)

// pathIn is the last path-looking token of a log line: quoted first, else a
// bare absolute path.
func pathIn(line string) string {
	for _, re := range []*lazyre.Regexp{singleQuoted, doubleQuoted, barePath} {
		if m := re.FindAllStringSubmatch(line, -1); m != nil {
			return m[len(m)-1][1]
		}
	}
	return ""
}

// human writes a byte size to one decimal in binary units.
func human(b domain.ByteSize) string {
	if b <= 0 {
		return "unknown"
	}
	for _, u := range []struct {
		s string
		n float64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if float64(b) >= u.n {
			return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(b)/u.n), ".0") + u.s
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// jobRef is the job id for commands, or ID.
func jobRef(ev Evidence) string {
	if ev.JobID == 0 {
		return "ID"
	}
	return strconv.FormatInt(ev.JobID, 10)
}

var signalInMessage = lazyre.New(`\bkilled by (SIG[A-Z0-9]+|signal \d+)`)

// SignalFromMessage returns the signal named in an exit message such as
// "killed by SIGKILL", or "".
func SignalFromMessage(msg string) string {
	if m := signalInMessage.FindStringSubmatch(msg); m != nil {
		return m[1]
	}
	return ""
}
