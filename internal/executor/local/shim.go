package local

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"trainyard/internal/domain"
	"trainyard/internal/executor/local/cgroup"
	"trainyard/internal/logs"
)

// eventsFD is the descriptor on which the shim reports "started <pid>
// <unix ns>" and "exited" to the executor that launched it; launchFD the one
// it reads the launch record from, to its end.
const (
	eventsFD = 3
	launchFD = 4
)

// maxLaunchRecord bounds the launch record the shim reads.
const maxLaunchRecord = 64 << 20

// Bounds on cleanup after the user's process exited: how long to chase
// leftover descendants and wait for the output pipes to drain when some
// process that escaped the process group still holds them.
const (
	reapWait  = 2 * time.Second
	drainWait = 2 * time.Second
)

// maxLine is the longest log line; longer output is split.
const maxLine = 64 << 10

// ShimMain is the entry point of the attempt supervisor, run as
// "trainyard-shim [--dir DIR]" (or "trainyard shim [--dir DIR]") by the
// local executor, not by people; "--protocol" prints its ShimProtocol.
// args are the arguments after the command name. It reads the launch
// record from descriptor 4, runs the attempt's process to its end and
// records the outcome in DIR/exit.json. Without --dir it is a spare,
// started before its attempt was known: DIR is the record's, and the shim
// sends its stdout and stderr to DIR/shim.log itself; a spare whose record
// never comes (its pipe closes empty) exits 0. With "--shared" it is the
// shared supervisor (supervisor.go), which takes attempts from descriptor 3
// until it closes, and exits 0 after the last one ended.
//
// Exit status: 0 when the outcome is recorded; 75 when another shim already
// owns the attempt; 2 for bad arguments; 1 when it could not supervise at
// all (the reason is on stderr).
func ShimMain(args []string) int {
	// Pdeathsig fires when the thread that forked the child exits, not the
	// process. Pinning this goroutine (which forks the child) to its thread
	// for the shim's whole life makes "the shim died" the only trigger.
	runtime.LockOSThread()
	// No heap profile is ever taken of a shim: sampling allocations for one
	// would only cost memory (the profile's buckets) in every attempt.
	runtime.MemProfileRate = 0
	if len(args) == 1 && args[0] == protocolFlag {
		fmt.Println(protocolLine())
		return 0
	}
	// A stop request (SIGTERM) must be handled, not fatal, from the start.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if len(args) == 1 && args[0] == sharedFlag {
		return sharedMain(sigs) // supervisor.go
	}

	fs := flag.NewFlagSet("shim", flag.ContinueOnError)
	dir := fs.String("dir", "", "the attempt's directory")
	launch := fs.String("launch", "", "read the launch record from this file, and remove it (a batch job's)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: trainyard shim [--dir DIR] [--launch FILE] (internal: started by the server's executors)")
		return 2
	}
	s := &shim{dir: *dir, sigs: sigs, events: openEvents()}
	if *launch != "" {
		f, err := openLaunchFile(*launch)
		if err != nil {
			fmt.Fprintf(os.Stderr, "trainyard shim: %v\n", err)
			return 1
		}
		s.launch = f
	}
	return s.run()
}

// openLaunchFile opens a batch job's launch record and removes it at
// once: it holds the job's secrets, and the job must not find it. Only a
// regular file is read: never a link, and never a FIFO or device that
// could block or feed the supervisor.
func openLaunchFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open the launch record: %w", err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("the launch record %s is not a regular file, so the attempt's directory was tampered with; check who else can write to it, then retry the job", path)
	}
	if err := os.Remove(path); err != nil {
		f.Close()
		return nil, fmt.Errorf("remove the launch record once open (it holds the job's secrets): %w", err)
	}
	return f, nil
}

// openEvents returns the executor's event pipe, or nil when the shim was
// started without one. The descriptor must not leak into the user's process,
// or the executor would not see it close when the shim exits.
func openEvents() *os.File {
	if _, err := unix.FcntlInt(eventsFD, unix.F_GETFD, 0); err != nil {
		return nil
	}
	syscall.CloseOnExec(eventsFD)
	return os.NewFile(eventsFD, "events")
}

type shim struct {
	dir    string
	sigs   chan os.Signal
	events *os.File
	// launch is the launch record's pipe; nil: descriptor launchFD.
	launch *os.File
	// errOut receives the shim's own diagnostics; nil: stderr. A shared
	// supervisor gives each attempt its shim.log here.
	errOut io.Writer
	// sv is the shared supervisor running this attempt among others; nil:
	// the shim is a process of its own (see supervisor.go).
	sv *supervisor
	// pid and proc are the user's process once started (0, nil: not
	// yet), waiting whether its wait began, claimed whether the attempt
	// is this shim's, and failure a panic of the attempt's supervision:
	// for a shared supervisor's recovery (supervisor.go).
	pid     int
	proc    *os.Process
	waiting bool
	claimed bool
	failure atomic.Pointer[string]
	// ownThread: under a shared supervisor, the attempt's goroutine is
	// locked to its thread, which forks the job's processes.
	ownThread bool
	rec       launchRecord
	log       *logWriter
	cg        *cgroup.Attempt // the attempt's groups; nil: none
	plan      *cgroup.Attempt // the groups planned (and claimed); nil: none
	self      procID
	// track records the attempt's processes when it has no cgroup; nil
	// otherwise.
	track *tracker
}

// notify writes one line to the executor. Errors are ignored: the server may
// be gone, and the attempt goes on without it.
func (s *shim) notify(line string) {
	if s.events != nil {
		_, _ = s.events.WriteString(line + "\n")
	}
}

// stderr is where the shim's own diagnostics go.
func (s *shim) stderr() io.Writer {
	if s.errOut != nil {
		return s.errOut
	}
	return os.Stderr
}

// supervisorID identifies the process supervising the attempt.
func (s *shim) supervisorID() (procID, error) {
	if s.sv != nil {
		return s.sv.self, nil
	}
	return selfProcID()
}

func (s *shim) run() int {
	self, err := s.supervisorID()
	if err != nil {
		fmt.Fprintf(s.stderr(), "shim: %v\n", err)
		return 1
	}
	s.self = self
	// The record first: a server that dies between starting the shim and
	// sending it leaves the attempt unclaimed, so the next leader's launch
	// starts it afresh instead of finding it failed.
	spare := s.dir == ""
	if spare {
		// Waiting anyway: the record's decoder is made now rather than
		// between the launch and the attempt's start.
		_ = json.Unmarshal([]byte(`{"argv":[""],"env":[""],"cgroups":{}}`), new(launchRecord))
	}
	if err := readLaunch(s.launch, &s.rec); err != nil {
		if spare && errors.Is(err, errNoRecord) {
			return 0 // a spare never needed
		}
		fmt.Fprintf(s.stderr(), "shim: cannot read the launch record (did the server stop while launching?): %v; leaving the attempt unclaimed\n", err)
		return 1
	}
	s.rec.inherit()
	if spare {
		if err := s.adopt(); err != nil {
			fmt.Fprintf(s.stderr(), "shim: %v; leaving the attempt unclaimed\n", err)
			return 1
		}
	}
	// The groups are planned (named) before the claim records them, and
	// made after it: whoever finds this shim dead can always remove them.
	var planErr error
	if s.rec.Cgroups != nil {
		name := fmt.Sprintf("%d-%d-%d", s.rec.JobID, s.rec.Attempt, self.PID)
		if s.sv != nil {
			name += "-" + strconv.FormatUint(s.sv.seq.Add(1), 10) // one supervisor, many attempts
		}
		s.plan, planErr = s.rec.Cgroups.Plan(name, cgroup.Limits{Memory: s.rec.Memory, CPUs: s.rec.CPUs})
		if s.plan != nil && s.sv != nil {
			s.plan.NoShim = true // the shared supervisor stays in its own groups
		}
	}
	if err := claim(s.dir, claimRecord{Shim: self, Port: s.rec.Port, Cgroups: s.plan, Shared: s.sv != nil}); err != nil {
		if errors.Is(err, os.ErrExist) {
			return exitOwned
		}
		fmt.Fprintf(s.stderr(), "shim: %v\n", err)
		return 1
	}
	s.claimed = true
	f, err := logs.Create(s.rec.LogPath, s.rec.LogLimit)
	if err != nil {
		return s.finishEarly(domain.ReasonLaunchFailed, fmt.Sprintf("cannot open the log file: %v", err))
	}
	s.log = &logWriter{f: f, redact: newRedactor(s.rec.Redact), limit: s.rec.LogLimit,
		onLimit: func(t time.Time) {
			s.notify("loglimit " + strconv.FormatInt(s.rec.LogLimit, 10) + " " + strconv.FormatInt(t.UnixNano(), 10))
		}}
	defer f.Close()

	if st, err := os.Stat(s.rec.WorkDir); err != nil || !st.IsDir() {
		return s.finishEarly(domain.ReasonLaunchFailed, fmt.Sprintf("working directory %s is not usable: %v", s.rec.WorkDir, errOrNotDir(err)))
	}
	if s.rec.credential() != nil {
		if err := enterable(s.rec.WorkDir, s.rec.UID, s.rec.GID); err != nil {
			return s.finishEarly(domain.ReasonLaunchFailed, fmt.Sprintf("working directory %s is closed to the job's user (uid %d): %v; "+
				"keep job code where every user may read it, or submit with --context to ship it with the job", s.rec.WorkDir, s.rec.UID, err))
		}
	}
	if s.stopRequested() {
		req := s.stopRequest()
		return s.finishEarly(req.Reason, "stopped before the process started: "+req.describe())
	}
	if s.plan != nil || planErr != nil {
		s.enterGroups(planErr)
	}
	if s.rec.credential() != nil {
		if err := s.isolate(); err != nil {
			s.leaveGroup()
			return s.finishEarly(domain.ReasonLaunchFailed, err.Error())
		}
	}
	return s.supervise()
}

// errNoRecord: the launch pipe closed before any record was written.
var errNoRecord = errors.New("the launch pipe closed without a record")

// adopt makes a spare shim the supervisor of the record's attempt: its
// directory, and its stdout and stderr on the directory's shim.log, as an
// executor starting a shim for the attempt gives them.
func (s *shim) adopt() error {
	if !filepath.IsAbs(s.rec.Dir) {
		return fmt.Errorf("the launch record names no attempt directory (got %q)", s.rec.Dir)
	}
	s.dir = s.rec.Dir
	if s.sv != nil {
		s.sv.adopted(s) // the attempt's own diagnostics: supervisor.go
		return nil
	}
	f, err := os.OpenFile(filepath.Join(s.dir, shimLogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open shim log: %w", err)
	}
	defer f.Close()
	for _, fd := range []int{1, 2} {
		if err := unix.Dup3(int(f.Fd()), fd, 0); err != nil {
			return fmt.Errorf("open shim log: %w", err)
		}
	}
	return nil
}

// readLaunch reads the launch record from f, or from launchFD when f is nil.
func readLaunch(f *os.File, rec *launchRecord) error {
	if f == nil {
		if _, err := unix.FcntlInt(launchFD, unix.F_GETFD, 0); err != nil {
			return errors.New("the shim was started without its launch pipe (descriptor 4)")
		}
		f = os.NewFile(launchFD, "launch")
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxLaunchRecord))
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return errNoRecord
	}
	if err := json.Unmarshal(b, rec); err != nil {
		return err
	}
	if len(rec.Argv) == 0 {
		return errors.New("argv is empty")
	}
	return nil
}

// isolate prepares an isolated job's surroundings: its private /tmp and
// the shim thread's restrictions that its processes inherit.
func (s *shim) isolate() error {
	if s.sv != nil {
		return s.isolateThread() // supervisor.go
	}
	if s.rec.PrivateTmp {
		if err := privateTmp(s.rec.TmpDir); err != nil {
			return fmt.Errorf("cannot give the job a private /tmp: %w", err)
		}
	}
	return dropPrivileges()
}

func errOrNotDir(err error) error {
	if err != nil {
		return err
	}
	return errors.New("not a directory")
}

// claim creates shim.pid exclusively: link(2) of a complete temporary file
// fails with EEXIST when another shim owns the attempt, and readers never see
// a partial file. The claim outlives the attempt (Release keeps it), so a
// shim started late (by a server paused between starting it and sending
// its launch record, while another one ran the attempt) never runs an
// attempt again; one that ended before claims were kept is refused by its
// exit record.
func claim(dir string, c claimRecord) error {
	if exists(filepath.Join(dir, exitFile)) {
		return fmt.Errorf("claim attempt: it already ended: %w", os.ErrExist)
	}
	b, err := c.encode()
	if err != nil {
		return fmt.Errorf("claim attempt: %w", err)
	}
	tmp := filepath.Join(dir, shimPIDFile+"."+strconv.Itoa(c.Shim.PID))
	if err := writeFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("claim attempt: %w", err)
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, filepath.Join(dir, shimPIDFile)); err != nil {
		if errors.Is(err, os.ErrExist) {
			return err
		}
		return fmt.Errorf("claim attempt: %w", err)
	}
	return nil
}

func selfProcID() (procID, error) {
	pid := os.Getpid()
	_, start, err := procStat(pid)
	if err != nil {
		return procID{}, fmt.Errorf("read own start time: %w", err)
	}
	return procID{PID: pid, Start: start}, nil
}

func (s *shim) stopRequested() bool {
	_, err := os.Stat(filepath.Join(s.dir, stopFile))
	return err == nil
}

func (s *shim) launchGrace() time.Duration {
	if s.rec.Grace > 0 {
		return s.rec.Grace
	}
	return defaultGrace
}

// enterGroups creates the groups planned (and recorded in the claim, for
// whoever finds the shim dead: see Executor.reap) and moves the shim into
// its own; the job's processes are started in the job's (startProcess).
// Failure (planErr, or making them) is logged and the attempt runs without
// limit, tracked by its process group and session only; groups the claim
// names but that do not exist are no trouble to whoever removes them.
func (s *shim) enterGroups(planErr error) {
	a, err := s.plan, planErr
	if err == nil {
		if err = a.Create(); err == nil && s.sv == nil {
			if err = a.EnterShim(); err != nil {
				_ = a.Remove(0)
			}
		}
	}
	if err != nil {
		s.log.system("the attempt's cgroups could not be set up (its processes are tracked by process group and session only; a memory limit is not enforced): %v", err)
		return
	}
	s.cg = a
	if s.rec.Memory > 0 && a.MemoryGroup() == nil {
		s.log.system("memory limit of %s not enforced: no writable cgroup memory controller", domain.ByteSize(s.rec.Memory))
	}
	if s.rec.CPUs > 0 && a.CPUGroup() == nil {
		s.log.system("CPU limit of %g not enforced: no writable cgroup cpu controller", s.rec.CPUs)
	}
}

// startProcess starts a process of the job: in the job's cgroups when the
// attempt has them.
func (s *shim) startProcess(path string, argv []string, attr *os.ProcAttr) (*os.Process, error) {
	if s.sv != nil {
		return s.sv.startProcess(s, path, argv, attr) // supervisor.go
	}
	if s.cg == nil {
		return os.StartProcess(path, argv, attr)
	}
	var proc *os.Process
	err := s.cg.StartInJob(func(cgroupFD int) error {
		a := *attr
		if cgroupFD >= 0 && attr.Sys != nil {
			sys := *attr.Sys
			sys.UseCgroupFD, sys.CgroupFD = true, cgroupFD
			a.Sys = &sys
		}
		var err error
		proc, err = os.StartProcess(path, argv, &a)
		return err
	})
	if err != nil && proc != nil {
		// Started, but the shim could not leave the job's group: the job
		// runs, and the shim counts against its limit.
		s.log.system("%v", err)
		err = nil
	}
	return proc, err
}

// finishEarly records an attempt that never started.
func (s *shim) finishEarly(reason domain.Reason, msg string) int {
	state := domain.AttemptFailed
	if isStopReason(reason) {
		state = domain.AttemptCanceled
	}
	if s.log != nil {
		s.log.system("not started: %s", msg)
	}
	return s.finish(&exitRecord{State: state, Reason: reason, Message: msg, FinishedAt: time.Now().UTC()})
}

func (s *shim) finish(r *exitRecord) int {
	if msg := s.failure.Load(); msg != nil && r.State != domain.AttemptFailed {
		r.State, r.Reason, r.Message = domain.AttemptFailed, domain.ReasonLaunchFailed, *msg+"; "+r.Message
	}
	if s.log != nil {
		s.sealOutputs(r) // checkpoints.go
	}
	if s.log != nil {
		s.log.system("%s (%s): %s", r.State, r.Reason, r.Message)
	}
	b, _ := json.Marshal(r)
	if err := writeFileAtomic(filepath.Join(s.dir, exitFile), append(b, '\n'), 0o600); err != nil {
		fmt.Fprintf(s.stderr(), "shim: write exit record: %v\n", err)
		return 1
	}
	s.notify("exited")
	return 0
}

// supervise starts the user's process and sees it to its end.
func (s *shim) supervise() int {
	rec := &s.rec
	// The checkpoint to resume from is chosen (and verified) first, so
	// that the environment's check sees the job's environment.
	var ckw *checkpointWatch
	if o := s.checkpointOutputs(); o != nil {
		defer o.Close()
		ckw = s.newCheckpointWatch(o)
	}
	s.chooseResume(ckw)
	if reason, msg, ok := s.checkEnvironment(); !ok { // the environment's check first: envcheck.go
		s.leaveGroup()
		return s.finishEarly(reason, msg)
	}
	argv := execSimple(rec.Argv)
	path, err := resolve(argv[0], rec.Env, rec.WorkDir)
	if err != nil {
		s.leaveGroup()
		return s.finishEarly(domain.ReasonEntrypointNotFound, err.Error())
	}
	outR, outW, err1 := os.Pipe()
	errR, errW, err2 := os.Pipe()
	devNull, err3 := os.Open(os.DevNull)
	if err := errors.Join(err1, err2, err3); err != nil {
		s.leaveGroup()
		return s.finishEarly(domain.ReasonLaunchFailed, fmt.Sprintf("cannot set up the process's output: %v", err))
	}
	// Orphaned descendants are re-parented to the shim, so none escapes the
	// cleanup after the process exits by leaving the process group. (A
	// shared supervisor is one from its start.)
	if s.sv == nil {
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	env := rec.Env
	if env == nil {
		env = []string{}
	}
	proc, err := s.startProcess(path, argv, &os.ProcAttr{
		Dir:   rec.WorkDir,
		Env:   env,
		Files: []*os.File{devNull, outW, errW},
		Sys: &syscall.SysProcAttr{
			Setpgid: true,
			// If the shim dies, its process must not run on unwatched.
			Pdeathsig:  syscall.SIGKILL,
			Credential: rec.credential(),
		},
	})
	outW.Close()
	errW.Close()
	devNull.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		s.leaveGroup()
		reason, msg := startError(rec.Argv[0], path, err)
		return s.finishEarly(reason, msg)
	}
	startedAt := time.Now().UTC()
	pid := proc.Pid
	s.pid, s.proc = pid, proc
	s.notify("started " + strconv.Itoa(pid) + " " + strconv.FormatInt(startedAt.UnixNano(), 10))
	_ = writeFile(filepath.Join(s.dir, childPIDFile), []byte(strconv.Itoa(pid)+"\n"), 0o600)
	argvJSON, _ := json.Marshal(argv)
	s.log.system("started %s as pid %d in %s", argvJSON, pid, rec.WorkDir)
	if shimTestHook != nil {
		shimTestHook(s)
	}
	switch {
	case s.sv != nil:
		if s.cg == nil {
			s.track = startTracker(s.dir, s.self, pid) // the shared supervisor's own children are not all this attempt's
		}
	case s.cg != nil:
		// The kernel's OOM killer must pick the user's process, never the
		// shim (which is outside the job's memory group anyway). The child
		// was forked before this, so it keeps its own score.
		_ = os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0)
	default:
		s.track = startTracker(s.dir, s.self, 0)
	}

	stopScan, scanDone := make(chan struct{}), make(chan struct{})
	if ckw != nil {
		s.goSafe(func() { ckw.run(stopScan, scanDone) })
	} else {
		close(scanDone)
	}

	var lastErrLine string
	pumped := make(chan struct{}, 2) // a value for each output drained
	prog := newProgressSink(filepath.Join(s.dir, metricsFile), s.notify)
	s.goSafe(func() { defer func() { pumped <- struct{}{} }(); s.log.pumpProgress(outR, logs.Stdout, nil, prog) })
	s.goSafe(func() { defer func() { pumped <- struct{}{} }(); s.log.pump(errR, logs.Stderr, &lastErrLine) })

	type waited struct {
		st  *os.ProcessState
		err error
	}
	exitCh := make(chan waited, 1)
	s.waiting = true
	go func() {
		awaitExit(pid)
		st, err := s.wait(proc)
		exitCh <- waited{st, err}
	}()

	var timeoutC, warnC, killC, pollC <-chan time.Time
	if rec.Timeout > 0 {
		t := time.NewTimer(rec.Timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	warnSig, warnAt, warn := s.warnSignal()
	if warn {
		t := time.NewTimer(warnAt)
		defer t.Stop()
		warnC = t.C
	}
	// cause is Timeout or the stop request's reason once the shim ends the
	// process; then the loop waits for every process of the attempt, not
	// only the main one, until the grace period ends.
	var cause domain.Reason
	var stopMsg string // the stop request's words
	var grace time.Duration
	killed := false
	var w waited
	mainDone := false
	startStop := func(c domain.Reason, g time.Duration, what string) {
		cause, grace = c, g
		s.log.system("%s; sending SIGTERM to %s, SIGKILL to whatever is left after %s", what, s.target(), domain.FormatDuration(grace))
		s.signalTarget(pid, syscall.SIGTERM)
		killC = time.After(grace)
	}
loop:
	for {
		select {
		case w = <-exitCh:
			exitCh, mainDone = nil, true
			if cause == "" || killed {
				break loop // the attempt ended on its own, or all got SIGKILL
			}
			if s.toMain() {
				_ = syscall.Kill(-pid, syscall.SIGTERM) // the rest of the group, told now
			}
			if s.groupDone(pid) {
				break loop
			}
			pollC = time.After(groupPoll)
		case <-pollC:
			if s.groupDone(pid) {
				break loop
			}
			pollC = time.After(groupPoll)
		case <-warnC:
			warnC = nil
			if cause == "" {
				s.log.system("timeout in %s; sending %s to %s (policy.warn)", domain.FormatDuration(rec.Warn.Before), unix.SignalName(warnSig), s.target())
				s.signalTarget(pid, warnSig)
			}
		case <-timeoutC:
			if cause == "" {
				startStop(domain.ReasonTimeout, s.launchGrace(), "timeout of "+domain.FormatDuration(rec.Timeout)+" reached")
			}
		case sig := <-s.sigs:
			if cause == "" {
				req := s.stopRequest()
				stopMsg = req.describe()
				startStop(req.Reason, req.Grace, fmt.Sprintf("stop requested (%s, %v)", stopMsg, sig))
			}
		case <-killC:
			killC = nil
			killed = true
			s.log.system("grace period of %s over; sending SIGKILL to the attempt's processes", domain.FormatDuration(grace))
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			if mainDone {
				break loop // the cleanup below ends the rest
			}
		}
	}
	finishedAt := time.Now().UTC()

	// No process of the attempt outlives it.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	if s.cg != nil {
		if err := s.cg.KillJob(reapWait); err != nil {
			s.log.system("%v", err)
		}
	}
	if s.sv == nil {
		reapOrphans(time.Now().Add(reapWait))
	} else if s.cg == nil {
		s.sv.endTracked(s, pid) // supervisor.go
	}
	s.track.stop()
	s.removeTmp()
	s.removeCheckpointTmp()
	close(stopScan)
	<-scanDone
	if ckw != nil {
		ckw.close() // the checkpoints completed at the end reach the executor before "exited"
	}
	drainC := time.After(drainWait)
	for left := 2; left > 0; {
		select {
		case <-pumped:
			left--
		case <-drainC:
			drainC = nil
			s.log.system("output still open %s after the process exited (a descendant left the process group); closing it", domain.FormatDuration(drainWait))
			outR.Close()
			errR.Close()
		}
	}
	outR.Close()
	errR.Close()
	prog.close() // the last progress reaches the executor before "exited"

	r := &exitRecord{PID: pid, StartedAt: startedAt, FinishedAt: finishedAt}
	var ws syscall.WaitStatus
	if w.err != nil {
		r.State, r.Reason, r.Message = domain.AttemptFailed, domain.ReasonExitCode, fmt.Sprintf("cannot wait for pid %d: %v", pid, w.err)
		s.leaveGroup()
		return s.finish(r)
	}
	ws, _ = w.st.Sys().(syscall.WaitStatus)
	if ru, ok := w.st.SysUsage().(*syscall.Rusage); ok {
		r.MaxRSS = ru.Maxrss * 1024
		r.CPUSeconds = tvSeconds(ru.Utime) + tvSeconds(ru.Stime)
	}
	var how string
	if ws.Signaled() {
		r.Signal = unix.SignalName(ws.Signal())
		if r.Signal == "" {
			r.Signal = "signal " + strconv.Itoa(int(ws.Signal()))
		}
		how = "killed by " + r.Signal
	} else {
		code := ws.ExitStatus()
		r.ExitCode = &code
		how = "exited with code " + strconv.Itoa(code)
	}
	oom := s.oomKilled(ws)
	if s.cg != nil {
		if g := s.cg.MemoryAccount(); g != nil {
			r.MemoryPeak = g.Peak()
		}
	}
	s.leaveGroup()

	switch {
	case isStopReason(cause):
		r.State, r.Reason = domain.AttemptCanceled, cause
		r.Message = "stopped: " + stopMsg + "; " + how
		if killed {
			r.Message += " after a grace period of " + domain.FormatDuration(grace)
		}
	case cause == domain.ReasonTimeout:
		r.State, r.Reason = domain.AttemptTimedOut, cause
		r.Message = "exceeded its timeout of " + domain.FormatDuration(rec.Timeout) + "; " + how
		if killed {
			r.Message += " after a grace period of " + domain.FormatDuration(grace)
		}
	case oom && !(r.ExitCode != nil && *r.ExitCode == 0):
		r.State, r.Reason = domain.AttemptFailed, domain.ReasonOOMKilled
		r.Message = fmt.Sprintf("out of memory: exceeded its memory limit of %s; %s", domain.ByteSize(rec.Memory), how)
	case r.ExitCode != nil && *r.ExitCode == 0:
		r.State, r.Reason, r.Message = domain.AttemptSucceeded, domain.ReasonCompleted, how
	case r.ExitCode != nil && *r.ExitCode == 127 && isShell(rec.Argv):
		r.State, r.Reason = domain.AttemptFailed, domain.ReasonEntrypointNotFound
		r.Message = lastErrLine
		if r.Message == "" {
			r.Message = "command not found (the shell exited with code 127)"
		}
	default:
		r.State, r.Reason, r.Message = domain.AttemptFailed, domain.ReasonExitCode, how
	}
	return s.finish(r)
}

// awaitExit returns once process pid (a child of the shim) has exited,
// without reaping it: it waits in the runtime's poller on a pidfd, so that
// the wait holds no thread of its own (each thread costs a running shim
// its stacks). Without pidfds (Linux before 5.3) it returns at once, and
// the caller's wait blocks a thread instead.
func awaitExit(pid int) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool {
		for {
			var info unix.Siginfo
			switch err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false // running: wait until the pidfd is readable
			case nil:
				return info.Signo != 0 // zero: no exit to report yet
			default:
				return true // cannot wait this way: the caller's wait blocks
			}
		}
	})
}

// removeTmp deletes the attempt's temporary files once none of its
// processes is left (os.RemoveAll never follows the symlinks a job
// leaves). An empty TMPDIR, as most are, stays (see emptyDirIn).
func (s *shim) removeTmp() {
	if root, err := os.OpenRoot(s.dir); err == nil {
		empty := emptyDirIn(root, tmpDir)
		root.Close()
		if empty {
			return
		}
	}
	if err := os.RemoveAll(filepath.Join(s.dir, tmpDir)); err != nil && s.log != nil {
		s.log.system("cannot remove the attempt's temporary files: %v", err)
	}
}

// oomKilled reads the group's OOM counters. On v1 kernels without an OOM
// counter, hitting the limit and dying of SIGKILL counts as an OOM kill.
func (s *shim) oomKilled(ws syscall.WaitStatus) bool {
	g := s.memoryGroup()
	if g == nil {
		return false
	}
	n, known, err := g.OOMKills()
	if err == nil && known {
		return n > 0
	}
	fc, err := g.Failcnt()
	return err == nil && fc > 0 && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func (s *shim) memoryGroup() *cgroup.Group {
	if s.cg == nil {
		return nil
	}
	return s.cg.MemoryGroup()
}

// leaveGroup moves the shim back where it came from and deletes the
// attempt's groups, if any.
func (s *shim) leaveGroup() {
	if s.cg == nil {
		return
	}
	if err := s.cg.Remove(time.Second); err != nil && s.log != nil {
		s.log.system("%v", err)
	}
	s.cg = nil
}

// reapOrphans kills and reaps the shim's remaining children: descendants of
// the user's process that were re-parented to the shim (a child subreaper).
func reapOrphans(deadline time.Time) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR) || pid > 0:
			continue
		case err != nil: // ECHILD: none left
			return
		}
		if time.Now().After(deadline) {
			return
		}
		for _, c := range children() {
			_ = syscall.Kill(c, syscall.SIGKILL)
		}
		time.Sleep(time.Millisecond)
	}
}

// children lists the shim's child processes.
func children() []int {
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	var pids []int
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// isShell reports whether argv runs a command string in a POSIX shell.
func isShell(argv []string) bool {
	if len(argv) < 3 {
		return false
	}
	switch filepath.Base(argv[0]) {
	case "sh", "bash", "dash", "zsh", "ksh", "ash":
	default:
		return false
	}
	return strings.HasPrefix(argv[1], "-") && strings.Contains(argv[1], "c")
}

// getenv returns the first value of key in env.
func getenv(env []string, key string) (string, bool) {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// resolve finds the program to run: a name without a slash is searched in
// PATH of the job's environment (not the shim's); other paths are used as
// given (relative ones from the working directory).
func resolve(name string, env []string, workDir string) (string, error) {
	if name == "" {
		return "", errors.New("entrypoint is empty")
	}
	if strings.Contains(name, "/") {
		return name, nil
	}
	pathVar, ok := getenv(env, "PATH")
	if !ok {
		return "", fmt.Errorf("entrypoint %q not found: PATH is not set in the job's environment; give an absolute path or set PATH", name)
	}
	var notExec string
	for _, dir := range filepath.SplitList(pathVar) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		check := p
		if !filepath.IsAbs(p) {
			check = filepath.Join(workDir, p)
		}
		st, err := os.Stat(check)
		if err != nil || st.IsDir() {
			continue
		}
		if st.Mode()&0o111 == 0 {
			if notExec == "" {
				notExec = check
			}
			continue
		}
		if !filepath.IsAbs(p) {
			p = "./" + p // relative to the working directory, never searched again
		}
		return p, nil
	}
	if notExec != "" {
		return "", fmt.Errorf("entrypoint %q: %s is not executable (PATH=%s)", name, notExec, pathVar)
	}
	return "", fmt.Errorf("entrypoint %q not found in PATH=%s", name, pathVar)
}

// startError classifies a failed start.
func startError(name, path string, err error) (domain.Reason, string) {
	switch {
	case errors.Is(err, syscall.ENOENT):
		msg := fmt.Sprintf("entrypoint %q not found", name)
		if path != name {
			msg += " (resolved to " + path + ")"
		}
		return domain.ReasonEntrypointNotFound, msg + ": no such file, or its #! interpreter is missing"
	case errors.Is(err, syscall.EACCES):
		return domain.ReasonEntrypointNotFound, fmt.Sprintf("entrypoint %q is not executable: permission denied", path)
	case errors.Is(err, syscall.ENOTDIR):
		return domain.ReasonEntrypointNotFound, fmt.Sprintf("entrypoint %q not found: a path component is not a directory", path)
	case errors.Is(err, syscall.ENOEXEC):
		return domain.ReasonEntrypointNotFound, fmt.Sprintf("entrypoint %q is not a program this machine can run (bad format; a script needs a #! line)", path)
	default:
		return domain.ReasonLaunchFailed, fmt.Sprintf("cannot start %q: %v", path, err)
	}
}

// logWriter appends formatted lines to the attempt's log. Every read from a
// pipe becomes one write, so lines reach the file (and `logs -f`) as soon as
// the process writes them.
type logWriter struct {
	mu     sync.Mutex
	f      io.Writer // a *logs.Writer, except in tests
	buf    []byte    // guarded by mu
	redact *redactor // secret values to hide in every line; nil: none
	// limit is the log's limit; when the log first reaches it, the writer
	// notes it in the log.
	limit   int64
	limited bool // guarded by mu
	// onLimit, when set, is told (once, with mu held) when the log
	// reached its limit: the shim notifies the executor.
	onLimit func(t time.Time)
}

// system writes one "system" line.
func (w *logWriter) system(format string, args ...any) {
	text := strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", " ")
	w.lines(logs.System, [][]byte{w.redact.line([]byte(text))})
}

// lines writes lines of one stream in one write. The time is taken under the
// lock, so timestamps never decrease through the file.
func (w *logWriter) lines(stream string, lines [][]byte) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := time.Now()
	w.buf = w.buf[:0]
	for _, l := range lines {
		w.buf = logs.AppendLine(w.buf, t, stream, l)
	}
	_, _ = w.f.Write(w.buf)
	if c, ok := w.f.(interface{ Limited() bool }); ok && !w.limited && c.Limited() {
		w.limited = true
		w.noteLimit(t)
		if w.onLimit != nil {
			w.onLimit(t)
		}
	}
	return t
}

// noteLimit notes in the log (the first line of its rolling tail, the
// head being full) that the log reached its limit. Readers learn it from
// the log's files (logs.Layout.Limited). Called with mu held.
func (w *logWriter) noteLimit(t time.Time) {
	text := fmt.Sprintf("log limit of %s reached; from here on only the newest lines are kept", logs.HumanSize(w.limit))
	_, _ = w.f.Write(logs.AppendLine(nil, t, logs.System, []byte(text)))
}

// pumpBufs are the pumps' read buffers, two per attempt, reused once its
// output closed: a shared supervisor would otherwise allocate (and its
// collector clear and sweep) 64KiB for every attempt it starts.
var pumpBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// pump copies r to the log as lines of stream until EOF. A final line
// without a newline is written at EOF; a line longer than maxLine is split
// (never inside a secret value). Secret values are redacted from every line,
// which is assembled whole first, so a value written in several pieces is
// still found. When last is non-nil it receives the last non-empty line,
// redacted.
func (w *logWriter) pump(r io.Reader, stream string, last *string) {
	w.pumpProgress(r, stream, last, nil)
}

// pumpProgress is pump that also hands every line, with its log time, to
// prog (nil: none), which picks out progress reports.
func (w *logWriter) pumpProgress(r io.Reader, stream string, last *string, prog *progressSink) {
	bp := pumpBufs.Get().(*[]byte)
	defer pumpBufs.Put(bp)
	buf := *bp
	var pending []byte
	var lines [][]byte
	for {
		n, err := r.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			lines = lines[:0]
			for {
				i := bytes.IndexByte(chunk, '\n')
				if i < 0 {
					break
				}
				if len(pending) > 0 {
					// A line completed across reads; copy it out of pending.
					lines = append(lines, append(append([]byte(nil), pending...), chunk[:i]...))
					pending = pending[:0]
				} else {
					lines = append(lines, chunk[:i])
				}
				chunk = chunk[i+1:]
			}
			pending = append(pending, chunk...)
			for len(pending) >= maxLine {
				cut := maxLine - w.redact.holdBack(pending[:maxLine])
				lines = append(lines, append([]byte(nil), pending[:cut]...))
				pending = append(pending[:0], pending[cut:]...)
			}
			for i := range lines {
				lines[i] = w.redact.line(lines[i])
			}
			if len(lines) > 0 {
				t := w.lines(stream, lines)
				setLast(last, lines)
				prog.lines(t, lines)
			}
		}
		if err != nil {
			break
		}
	}
	if len(pending) > 0 {
		pending = w.redact.line(pending)
		t := w.lines(stream, [][]byte{pending})
		setLast(last, [][]byte{pending})
		prog.lines(t, [][]byte{pending})
	}
}

func setLast(last *string, lines [][]byte) {
	if last == nil {
		return
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if len(bytes.TrimSpace(lines[i])) > 0 {
			*last = string(lines[i])
			return
		}
	}
}

func tvSeconds(tv syscall.Timeval) float64 {
	return float64(tv.Sec) + float64(tv.Usec)/1e6
}
