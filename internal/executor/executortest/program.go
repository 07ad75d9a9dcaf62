package executortest

import (
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	"trainyard/internal/domain"
)

// Program describes what a job does, for the conformance suite to run on
// any executor: Argv turns it into a shell command that a real executor
// runs as it would any job, and Fake decodes the same argv and plays it in
// memory. Steps run in order; then the program exits with Exit.
//
// Files are written below the job's outputs: TRAINYARD_OUTPUT_DIR and
// TRAINYARD_CHECKPOINT_DIR (Harness.Launch sets both).
type Program struct {
	Steps []Step `json:"steps,omitempty"`
	Exit  int    `json:"exit,omitempty"`
	// IgnoreTerm: SIGTERM is ignored, so only the SIGKILL after the
	// grace period ends the program.
	IgnoreTerm bool `json:"ignore_term,omitempty"`
	// OnTerm, when set, is a stdout line the program writes when it gets
	// SIGTERM, before it exits with code 0.
	OnTerm string `json:"on_term,omitempty"`
	// OnWarn, when set, is a stdout line the program writes when it gets
	// SIGUSR1 (the suite's warning signal, policy.warn); it runs on.
	OnWarn string `json:"on_warn,omitempty"`
}

// Step is one thing a Program does; exactly one field is set.
type Step struct {
	Out     string `json:"out,omitempty"`     // a line on stdout
	Err     string `json:"err,omitempty"`     // a line on stderr
	Partial string `json:"partial,omitempty"` // text on stdout without a newline (then nothing more on stdout)
	// Progress reports training step Progress (> 0): a stdout line
	// `trainyard: {"step": N, "loss": 0.5}`.
	Progress int64 `json:"progress,omitempty"`
	// File writes (or, with Append, appends) Data to the outputs' file
	// Path, making its directories.
	File *FileStep `json:"file,omitempty"`
	// Checkpoint writes a checkpoint (a directory, or one file) below the
	// checkpoint directory.
	Checkpoint *CheckpointStep `json:"checkpoint,omitempty"`
	// Link plants a symbolic link at the outputs' path Link[0] pointing
	// to Link[1] (a hostile job).
	Link []string `json:"link,omitempty"`
	// EnvFile writes the environment, one KEY=value a line, to the
	// outputs' file EnvFile.<RANK> (RANK 0 when unset); every node of a
	// multi-node attempt writes its own. Variables the shell itself sets
	// (PWD, OLDPWD, SHLVL, _) are left out.
	EnvFile string `json:"env_file,omitempty"`
	// PrintEnv writes the environment to stdout, as EnvFile does.
	PrintEnv bool `json:"print_env,omitempty"`
	// Pwd writes the working directory (symbolic links resolved) to
	// stdout.
	Pwd bool `json:"pwd,omitempty"`
	// Run runs the command Run[0] (looked up in PATH) with arguments
	// Run[1:], and exits with its status; the suite runs one that does
	// not exist.
	Run []string `json:"run,omitempty"`
	// Signal makes the program kill itself with the signal (e.g. "KILL").
	Signal string `json:"signal,omitempty"`
	// KillSupervisor kills the attempt's supervisor (SIGKILL to the
	// program's parent): the attempt is lost.
	KillSupervisor bool `json:"kill_supervisor,omitempty"`
	// Block waits until the program is stopped (or times out).
	Block bool `json:"block,omitempty"`
}

// FileStep writes an output file.
type FileStep struct {
	Path   string `json:"path"`
	Data   string `json:"data"`
	Append bool   `json:"append,omitempty"`
}

// CheckpointStep writes checkpoint Name: a directory with Files (name,
// slash-separated below it → content), or, with File, the one file Name
// holding Data (any bytes). Complete then marks it complete: it writes
// the directory's domain.CheckpointMarker, or the marker
// Name+domain.CheckpointMarker beside the file.
type CheckpointStep struct {
	Name     string            `json:"name"`
	Files    map[string]string `json:"files,omitempty"`
	File     bool              `json:"file,omitempty"`
	Data     []byte            `json:"data,omitempty"`
	Complete bool              `json:"complete,omitempty"`
}

// programArg0 is $0 of the shell command: it marks an argv as a Program.
const programArg0 = "trainyard-program"

// Argv returns the program as a command: /bin/sh -c SCRIPT
// trainyard-program JSON. The shell runs the script and ignores the
// JSON; Fake decodes it (DecodeProgram).
func (p Program) Argv() []string {
	b, err := json.Marshal(p)
	if err != nil {
		panic(err) // only strings, numbers and booleans
	}
	return []string{"/bin/sh", "-c", p.script(), programArg0, string(b)}
}

// DecodeProgram returns the Program of an argv made by Program.Argv; ok is
// false for any other argv.
func DecodeProgram(argv []string) (p Program, ok bool) {
	if len(argv) != 5 || argv[0] != "/bin/sh" || argv[1] != "-c" || argv[3] != programArg0 {
		return Program{}, false
	}
	if err := json.Unmarshal([]byte(argv[4]), &p); err != nil {
		return Program{}, false
	}
	return p, true
}

// quote quotes s for the shell.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// envCmd writes the environment without what the shell sets itself.
const envCmd = "env -u PWD -u OLDPWD -u SHLVL -u _"

func (p Program) script() string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line(`out=${TRAINYARD_OUTPUT_DIR:-}; ckpt=${TRAINYARD_CHECKPOINT_DIR:-}`)
	switch {
	case p.IgnoreTerm:
		line(`trap "" TERM`)
	case p.OnTerm != "":
		line(`trap 'printf "%%s\n" %s; exit 0' TERM`, strings.ReplaceAll(quote(p.OnTerm), "'", `'\''`))
	}
	if p.OnWarn != "" {
		line(`trap 'printf "%%s\n" %s' USR1`, strings.ReplaceAll(quote(p.OnWarn), "'", `'\''`))
	}
	for _, s := range p.Steps {
		switch {
		case s.Out != "":
			line(`printf '%%s\n' %s`, quote(s.Out))
		case s.Err != "":
			line(`printf '%%s\n' %s >&2`, quote(s.Err))
		case s.Partial != "":
			line(`printf '%%s' %s`, quote(s.Partial))
		case s.Progress > 0:
			line(`printf '%%s\n' %s`, quote(progressLine(s.Progress)))
		case s.File != nil:
			dst := `"$out"/` + quote(s.File.Path)
			op := ">"
			if s.File.Append {
				op = ">>"
			}
			line(`mkdir -p "$out"/%s && printf '%%s' %s %s %s`, quote(path.Dir(s.File.Path)), quote(s.File.Data), op, dst)
		case s.Checkpoint != nil && s.Checkpoint.File:
			dst := `"$ckpt"/` + quote(s.Checkpoint.Name)
			line(`mkdir -p "$ckpt" && printf '%s' > %s`, octal(s.Checkpoint.Data), dst)
			if s.Checkpoint.Complete {
				line(`: > "$ckpt"/%s`, quote(s.Checkpoint.Name+domain.CheckpointMarker))
			}
		case s.Checkpoint != nil:
			dir := `"$ckpt"/` + quote(s.Checkpoint.Name)
			line(`mkdir -p %s`, dir)
			for _, name := range slices.Sorted(maps.Keys(s.Checkpoint.Files)) {
				if sub := path.Dir(name); sub != "." {
					line(`mkdir -p %s/%s`, dir, quote(sub))
				}
				line(`printf '%%s' %s > %s/%s`, quote(s.Checkpoint.Files[name]), dir, quote(name))
			}
			if s.Checkpoint.Complete {
				line(`: > %s/%s`, dir, quote(domain.CheckpointMarker))
			}
		case len(s.Link) == 2:
			line(`ln -s %s "$out"/%s`, quote(s.Link[1]), quote(s.Link[0]))
		case s.EnvFile != "":
			line(`%s > "$out"/%s."${RANK:-0}"`, envCmd, quote(s.EnvFile))
		case s.PrintEnv:
			line(envCmd)
		case s.Pwd:
			line(`pwd -P`)
		case len(s.Run) > 0:
			args := make([]string, len(s.Run))
			for i, a := range s.Run {
				args[i] = quote(a)
			}
			line(`%s; exit $?`, strings.Join(args, " "))
		case s.Signal != "":
			line(`kill -%s $$`, s.Signal)
		case s.KillSupervisor:
			line(`kill -KILL $PPID`)
			line(`sleep 300 & wait`)
		case s.Block:
			// wait returns early when a trapped signal arrives; the loop
			// bounds the wait of a shell that missed one (it came before
			// the sleep started, and the shell did not run its trap
			// before waiting) to a second.
			line(`while :; do sleep 1 & wait; done`)
		}
	}
	line(`exit %d`, p.Exit)
	return b.String()
}

// octal writes b as a printf format of octal escapes: any bytes, NUL
// included, through the shell's printf builtin.
func octal(b []byte) string {
	var s strings.Builder
	for _, c := range b {
		fmt.Fprintf(&s, `\%03o`, c)
	}
	return s.String()
}

// progressLine is the stdout line that reports step.
func progressLine(step int64) string {
	return `trainyard: {"step": ` + strconv.FormatInt(step, 10) + `, "loss": 0.5}`
}
