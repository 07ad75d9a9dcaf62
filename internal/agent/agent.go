// Package agent is the in-job agent of attempts whose filesystem is not
// the server's (the Kubernetes executor's pods): `trainyard agent --
// COMMAND...` runs the job's command and reports through the API, with the
// attempt's job token, what the local executor's supervisor reads from
// disk: the command's progress lines (as metrics), the checkpoints it
// completes while it runs and, once it has ended, its outputs.
//
// Reporting never decides the job's fate: whatever the API answers, or
// whether it answers at all, the agent exits with its command's status. The
// job's files are the job's: the agent uploads regular files only, never
// through a symbolic link, and never leaves its output directory.
//
// The agent reads its configuration from the environment the executor gives
// the job: TRAINYARD_API (the server's URL), TRAINYARD_JOB_TOKEN,
// TRAINYARD_JOB_ID, TRAINYARD_ATTEMPT, TRAINYARD_OUTPUT_DIR and
// TRAINYARD_CHECKPOINT_DIR (its "checkpoints" directory), and, for an
// attempt that may resume, TRAINYARD_AGENT_RESUME: the job's checkpoints
// to resume from, which it fetches before the command starts (resume.go).
package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"trainyard/internal/artifacts"
)

// Intervals of the agent's reporting.
const (
	// flushEvery is the shortest interval between two metric reports.
	flushEvery = time.Second
	// scanEvery is how often the checkpoint directory is looked at.
	scanEvery = 2 * time.Second
	// retryFor bounds how long one API call is retried on a network
	// error or a 5xx answer.
	retryFor = 30 * time.Second
	// drainWait bounds the wait for the command's stdout to end once it
	// has exited, when a process that left its group still holds it.
	drainWait = 2 * time.Second
)

// usage is printed for a call without a command.
const usage = "usage: trainyard agent [--] COMMAND [ARG...]\n" +
	"Runs COMMAND, passing its output through, and reports its progress, checkpoints and outputs\n" +
	"through the API (TRAINYARD_API, TRAINYARD_JOB_TOKEN); exits with COMMAND's status.\n"

// Main runs `trainyard agent [--] ARGV...`: args are the arguments after
// "agent". It returns the command's exit status (128+N when a signal N
// ended it), 127 when it could not be found, 126 when it could not be
// started, and 2 when there is no command.
func Main(args []string) int {
	// Pdeathsig fires when the thread that forked the child exits: pinned,
	// only the agent's death kills the command it runs.
	runtime.LockOSThread()
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	// Stop requests are the command's to handle, from the start.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	cfg := configFromEnv(os.Getenv)
	cfg.started = time.Now() // the container's start, near enough: the attempt's
	return run(cfg, args, sigs, os.Stdout, os.Stderr)
}

// config is the agent's environment.
type config struct {
	api, token    string
	jobID         int64
	attempt       int
	outputDir     string
	checkpointDir string
	resume        string // TRAINYARD_AGENT_RESUME; empty: none
	warn          string // TRAINYARD_AGENT_WARN; empty: none
	started       time.Time
	// Test knobs; zero means the defaults above.
	flushEvery, scanEvery, retryFor time.Duration
}

func configFromEnv(getenv func(string) string) config {
	c := config{
		api:           getenv("TRAINYARD_API"),
		token:         getenv("TRAINYARD_JOB_TOKEN"),
		outputDir:     getenv("TRAINYARD_OUTPUT_DIR"),
		checkpointDir: getenv("TRAINYARD_CHECKPOINT_DIR"),
		resume:        getenv(resumeEnv),
		warn:          getenv(warnEnv),
	}
	c.jobID, _ = strconv.ParseInt(getenv("TRAINYARD_JOB_ID"), 10, 64)
	c.attempt, _ = strconv.Atoi(getenv("TRAINYARD_ATTEMPT"))
	return c
}

// missing names what the agent needs to report and the environment lacks.
func (c config) missing() string {
	switch {
	case c.api == "":
		return "TRAINYARD_API"
	case c.token == "":
		return "TRAINYARD_JOB_TOKEN"
	case c.jobID <= 0:
		return "TRAINYARD_JOB_ID"
	case c.attempt <= 0:
		return "TRAINYARD_ATTEMPT"
	}
	return ""
}

// logger writes the agent's own lines to stderr (the pod's log), the job
// token never among them.
type logger struct {
	mu    sync.Mutex
	w     io.Writer
	token string
}

func (l *logger) printf(format string, args ...any) {
	msg := redact(fmt.Sprintf(format, args...), l.token)
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "trainyard agent: %s\n", msg)
}

// run is Main once its arguments and environment are read: it starts argv,
// reports while it runs and once it has ended, and returns its status.
func run(cfg config, argv []string, sigs <-chan os.Signal, stdout, stderr io.Writer) int {
	log := &logger{w: stderr, token: cfg.token}
	var rep *reporter
	if m := cfg.missing(); m != "" {
		log.printf("%s is not set: running %s without reporting its progress, checkpoints or outputs", m, argv[0])
	} else {
		rep = newReporter(cfg, log)
	}
	// The outputs are opened before the command runs: the directory the
	// agent reads is the one it was given, whatever the job renames.
	var out *outputs
	if rep != nil && cfg.outputDir != "" {
		var err error
		out, err = openOutputs(cfg, rep, log)
		if err != nil {
			log.printf("outputs: %v; they will not be uploaded", err)
		} else {
			defer out.close()
		}
	}

	// The checkpoint to resume from is there before the command starts;
	// which one it was is reported meanwhile.
	var env []string
	reported := make(chan struct{})
	if cfg.resume != "" {
		r := resumeFrom(cfg, rep, out, log)
		env = commandEnv(os.Environ(), r.path)
		if rep != nil && (r.name != "" || len(r.skipped) > 0) {
			go func() {
				defer close(reported)
				reportResumed(rep, r)
			}()
		} else {
			close(reported)
		}
	} else {
		close(reported)
	}

	cmd, outR, err := start(argv, env, stderr)
	if err != nil {
		log.printf("%v", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return 127
		}
		return 126
	}
	pid := cmd.Process.Pid

	// Progress: the command's stdout passes through, its progress lines
	// are taken on the way.
	var metrics *metricsQueue
	if rep != nil {
		metrics = newMetricsQueue(rep, cfg.flushEvery)
	}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		passThrough(outR, stdout, metrics)
	}()

	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	if out != nil {
		go out.watch(stopWatch, watched)
	} else {
		close(watched)
	}

	exited := make(chan *os.ProcessState, 1)
	go func() {
		_ = cmd.Wait()
		exited <- cmd.ProcessState
	}()
	var warnC <-chan time.Time
	w, err := parseWarn(cfg.warn)
	if err != nil {
		log.printf("%s: %v; no warning will be sent before the timeout", warnEnv, err)
	} else if w.sig != 0 {
		t := time.NewTimer(time.Until(cfg.started.Add(w.after)))
		defer t.Stop()
		warnC = t.C
	}
	var ps *os.ProcessState
	for ps == nil {
		select {
		case ps = <-exited:
		case <-warnC:
			log.printf("sending SIG%s to %s before its timeout (policy.warn)", w.name, argv[0])
			_ = syscall.Kill(-pid, w.sig)
		case s := <-sigs:
			warnC = nil // being stopped: no warning after that
			if sig, ok := s.(syscall.Signal); ok {
				_ = syscall.Kill(-pid, sig)
			}
		}
	}
	// What it left in its group goes with it, as with a container's main
	// process.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	select {
	case <-drained:
	case <-time.After(drainWait):
		outR.Close() // held open by a process outside the group
		<-drained
	}
	outR.Close()
	code := exitStatus(ps)

	close(stopWatch)
	<-watched
	if metrics != nil {
		metrics.close()
	}
	if out != nil {
		out.final()
	}
	<-reported
	if rep != nil {
		rep.summary()
	}
	return code
}

// warnEnv hands the agent the attempt's advance warning (policy.warn) as
// SIGNAL@AFTER: a signal's name (SIG prefix optional) and, as a Go
// duration, how long after the agent's start to send it to the
// command's process group, where a stop's SIGTERM goes. The executor
// stops the attempt at its timeout; the agent only warns.
const warnEnv = "TRAINYARD_AGENT_WARN"

// warning is warnEnv's value; a zero sig: none.
type warning struct {
	name  string // without the SIG prefix
	sig   syscall.Signal
	after time.Duration
}

// warnSignals are the signals of domain.WarnSignals.
var warnSignals = map[string]syscall.Signal{
	"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "HUP": syscall.SIGHUP, "INT": syscall.SIGINT,
	"QUIT": syscall.SIGQUIT, "ALRM": syscall.SIGALRM, "TERM": syscall.SIGTERM, "URG": syscall.SIGURG,
	"WINCH": syscall.SIGWINCH, "CONT": syscall.SIGCONT,
}

func parseWarn(v string) (warning, error) {
	if v == "" {
		return warning{}, nil
	}
	name, after, ok := strings.Cut(v, "@")
	if !ok {
		return warning{}, fmt.Errorf("%q is not SIGNAL@AFTER", v)
	}
	name = strings.TrimPrefix(name, "SIG")
	sig, ok := warnSignals[name]
	if !ok {
		return warning{}, fmt.Errorf("%q: no signal %q", v, name)
	}
	d, err := time.ParseDuration(after)
	if err != nil || d < 0 {
		return warning{}, fmt.Errorf("%q: %q is not a duration of 0 or more", v, after)
	}
	return warning{name: name, sig: sig, after: d}, nil
}

// resumeFrom fetches the checkpoint the attempt resumes from, when it can
// (resume), or says why it starts afresh.
func resumeFrom(cfg config, rep *reporter, out *outputs, log *logger) resumed {
	cands, err := parseCandidates(cfg.resume)
	switch {
	case err != nil:
		log.printf("%v; starting afresh", err)
		return resumed{skipped: []string{resumeEnv + ": " + err.Error()}}
	case rep == nil:
		log.printf("not resuming from any of the %d checkpoints handed over: the agent cannot reach the API (see above); starting afresh", len(cands))
		return resumed{}
	}
	return resume(out, cfg, cands, log)
}

// commandEnv is environ with TRAINYARD_RESUME_FROM set to from, and
// without the agent's own candidates.
func commandEnv(environ []string, from string) []string {
	env := make([]string, 0, len(environ)+1)
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "TRAINYARD_RESUME_FROM=") && !strings.HasPrefix(kv, resumeEnv+"=") {
			env = append(env, kv)
		}
	}
	return append(env, "TRAINYARD_RESUME_FROM="+from)
}

// start starts argv (looked up in PATH) in a process group of its own,
// with env (nil: the agent's), stdin from /dev/null, stderr to stderr and
// stdout into the returned pipe.
func start(argv, env []string, stderr io.Writer) (*exec.Cmd, *os.File, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout = outW
	if f, ok := stderr.(*os.File); ok {
		cmd.Stderr = f
	} else {
		cmd.Stderr = stderr
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	outW.Close()
	if err != nil {
		outR.Close()
		return nil, nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	return cmd, outR, nil
}

// exitStatus is the status a shell reports for ps: 128+N for a signal N.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// passThrough copies r to w as it comes, handing each complete line to
// metrics (when not nil).
func passThrough(r io.Reader, w io.Writer, metrics *metricsQueue) {
	var lines lineSplitter
	if metrics != nil {
		lines.fn = metrics.line
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_, _ = w.Write(buf[:n])
			if metrics != nil {
				lines.feed(buf[:n])
			}
		}
		if err != nil {
			if metrics != nil {
				lines.end()
			}
			return
		}
	}
}

// isCheckpointsOf reports whether dir is parent's "checkpoints" directory.
func isCheckpointsOf(dir, parent string) bool {
	return dir != "" && filepath.Clean(dir) == filepath.Join(filepath.Clean(parent), artifacts.CheckpointsDir)
}
