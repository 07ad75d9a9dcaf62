package local

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"trainyard/internal/domain"
)

// The shared supervisor: one long-lived shim process ("trainyard-shim
// --shared") runs many attempts, so that an attempt's start costs no
// process start and a running attempt no runtime of its own.
//
// The executor starts it (in a session of its own) with one end of a
// socket pair on descriptor ctlFD. For each attempt, the executor sends
// one message carrying two descriptors (SCM_RIGHTS): the write end of the
// attempt's event pipe and the read end of its launch pipe, exactly what a
// shim of its own finds on eventsFD and launchFD. The supervisor runs the
// shim's per-attempt logic (shim.run) on them in a goroutine of its own;
// the launch record, the events and the attempt directory's files are
// those of a shim of its own, except that the claim says "shared".
//
// What a shim of its own does to its whole process is done per attempt:
//
//   - the job's processes are forked from a thread that lives as long as
//     they may (their Pdeathsig fires when it ends): the supervisor's
//     forkers, goroutines locked to their threads for the supervisor's
//     whole life, start those of every attempt but isolated ones; an isolated
//     attempt's goroutine locks itself to its thread for its whole life
//     (the thread ends with it), which alone gets the job's surroundings
//     (a mount namespace with the private /tmp, no_new_privs, the job's
//     umask: see isolateThread) and forks its processes. In v1
//     hierarchies the forking thread moves into the job's groups for each
//     fork (cgroup.Attempt.StartInJobThread);
//   - its diagnostics go to its shim.log, not to the process's stderr;
//   - SIGTERM means "look for your stop request": every attempt whose stop
//     file exists is told;
//   - the supervisor is the subreaper of every attempt's orphans; one
//     reaper collects the children no attempt waits for, and never one an
//     attempt started (registered under a lock that the reaper holds while
//     it reaps, so none is reaped between its fork and its registration);
//   - a panic in an attempt's goroutines ends and records that attempt
//     (failed, with the panic's text), never the others.
//
// The supervisor keeps the OOM score it was started with: a lower one
// would be inherited by every process a job forks before the supervisor
// could raise its score again, and an unprivileged job could keep it (and
// lower its score back to it) for good. Its small size keeps it last in
// the OOM killer's choice anyway.
// Once the executor's end of the socket closes (the server stopped, or
// restarted, upgraded), the supervisor takes no more attempts and exits
// after its last one ended. Its death closes every attempt's event pipe:
// the executor ends what is left of each attempt and reports it Lost,
// as for a shim of its own.
const (
	sharedFlag = "--shared"
	ctlFD      = 3
)

// shimTestHook, when set (by the package's tests only), runs in each
// attempt's supervision once its process started.
var shimTestHook func(s *shim)

// kids are the supervisor's children that an attempt started and waits
// for; the reaper leaves them alone.
var kids struct {
	start sync.RWMutex // read: a start and its registration; write: the reaper
	mu    sync.Mutex
	pids  map[int]bool
	kick  chan struct{} // an attempt reaped its child
}

// forget drops pid, which its attempt has reaped, and wakes the reaper,
// which may have stopped at it.
func forgetKid(pid int) {
	kids.mu.Lock()
	delete(kids.pids, pid)
	kids.mu.Unlock()
	select {
	case kids.kick <- struct{}{}:
	default:
	}
}

func isKid(pid int) bool {
	kids.mu.Lock()
	defer kids.mu.Unlock()
	return kids.pids[pid]
}

// supervisor is the state of a shared supervisor process.
type supervisor struct {
	self procID
	seq  atomic.Uint64 // names the attempts' cgroups

	forks chan func() // run on a forker's thread

	mu       sync.Mutex
	attempts map[*shim]string // running attempts → their directory ("" until known)
	active   int
	closed   bool          // the executor's socket closed
	done     chan struct{} // closed once closed and no attempt is left
}

// sharedMain runs the shared supervisor; sigs receives SIGTERM and SIGINT.
func sharedMain(sigs chan os.Signal) int {
	self, err := selfProcID()
	if err != nil {
		fmt.Fprintf(os.Stderr, "shim: %v\n", err)
		return 1
	}
	if _, err := unix.FcntlInt(ctlFD, unix.F_GETFD, 0); err != nil {
		fmt.Fprintln(os.Stderr, "shim: the shared supervisor was started without its socket (descriptor 3)")
		return 2
	}
	syscall.CloseOnExec(ctlFD)
	if err := syscall.SetNonblock(ctlFD, true); err != nil {
		fmt.Fprintf(os.Stderr, "shim: %v\n", err)
		return 1
	}
	ctl := os.NewFile(ctlFD, "supervisor")
	// Orphaned descendants of every attempt are re-parented here, so that
	// none escapes its attempt's cleanup by leaving its process group.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	sv := &supervisor{self: self, attempts: map[*shim]string{}, done: make(chan struct{}), forks: make(chan func())}
	kids.pids = map[int]bool{}
	kids.kick = make(chan struct{}, 1)
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	for range runtime.GOMAXPROCS(0) { // starts in parallel, as many as run
		go sv.forker()
	}
	go sv.reap(chld)
	go sv.stops(sigs)
	go sv.serve(ctl)
	<-sv.done
	return 0
}

// serve takes attempts from the executor's socket until it closes.
func (sv *supervisor) serve(ctl *os.File) {
	rc, err := ctl.SyscallConn()
	if err == nil {
		buf := make([]byte, 1)
		oob := make([]byte, unix.CmsgSpace(2*4))
		for {
			var n, oobn int
			var rerr error
			err = rc.Read(func(fd uintptr) bool {
				n, oobn, _, _, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
				return rerr != unix.EAGAIN
			})
			if err == nil {
				err = rerr
			}
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || (n == 0 && oobn == 0) {
				break
			}
			fds := receivedFDs(oob[:oobn])
			if len(fds) != 2 {
				for _, fd := range fds {
					unix.Close(fd)
				}
				continue
			}
			sv.mu.Lock()
			sv.active++
			sv.mu.Unlock()
			go sv.runAttempt(os.NewFile(uintptr(fds[0]), "events"), os.NewFile(uintptr(fds[1]), "launch"))
		}
	}
	ctl.Close()
	sv.mu.Lock()
	sv.closed = true
	sv.maybeDone()
	sv.mu.Unlock()
}

// receivedFDs returns the descriptors of a message's SCM_RIGHTS.
func receivedFDs(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if f, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

// maybeDone ends the supervisor once it takes no more attempts and none
// runs. Called with mu held.
func (sv *supervisor) maybeDone() {
	if sv.closed && sv.active == 0 {
		select {
		case <-sv.done:
		default:
			close(sv.done)
		}
	}
}

// forker starts processes for attempts that are not isolated, from a
// thread that never ends.
func (sv *supervisor) forker() {
	runtime.LockOSThread()
	for f := range sv.forks {
		f()
	}
}

// runAttempt supervises one attempt.
func (sv *supervisor) runAttempt(events, launch *os.File) {
	s := &shim{sigs: make(chan os.Signal, 4), events: events, launch: launch, sv: sv}
	sv.mu.Lock()
	sv.attempts[s] = ""
	sv.mu.Unlock()
	defer sv.release(s)
	defer func() {
		if r := recover(); r != nil {
			s.recovered(r)
		}
	}()
	if s.run() == exitOwned {
		s.notify("owned") // the executor watches the shim that owns it
	}
}

// release forgets a finished attempt.
func (sv *supervisor) release(s *shim) {
	s.events.Close()
	if l, ok := s.errOut.(*shimLog); ok {
		l.Close()
	}
	sv.mu.Lock()
	delete(sv.attempts, s)
	sv.active--
	sv.maybeDone()
	sv.mu.Unlock()
}

// adopted gives the attempt its directory and its shim.log.
func (sv *supervisor) adopted(s *shim) {
	s.errOut = &shimLog{path: filepath.Join(s.dir, shimLogFile)}
	sv.mu.Lock()
	sv.attempts[s] = s.dir
	sv.mu.Unlock()
}

// shimLog is an attempt's shim.log under a shared supervisor: created by
// its first write (most attempts have nothing to say there, and a file
// less to create is a start's largest saving after the exec).
type shimLog struct {
	path string
	mu   sync.Mutex
	f    *os.File
	err  error
}

func (l *shimLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil && l.err == nil {
		l.f, l.err = os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	}
	if l.err != nil {
		return 0, l.err
	}
	return l.f.Write(p)
}

// Close closes the file, if it was created; a later write reopens it.
func (l *shimLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f, l.err = nil, nil
	return err
}

// stops tells every attempt with a stop request of each SIGTERM.
func (sv *supervisor) stops(sigs chan os.Signal) {
	for sig := range sigs {
		sv.mu.Lock()
		for s, dir := range sv.attempts {
			if dir != "" && exists(filepath.Join(dir, stopFile)) {
				select {
				case s.sigs <- sig:
				default:
				}
			}
		}
		sv.mu.Unlock()
	}
}

// reap collects the children that no attempt waits for: orphans of any
// attempt, re-parented to the supervisor, once they exit.
func (sv *supervisor) reap(chld chan os.Signal) {
	for {
		kids.start.Lock()
		for {
			var info unix.Siginfo
			err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			pid := siginfoPID(&info)
			if err != nil || pid <= 0 || isKid(pid) {
				break // none exited, or the first is an attempt's: it reaps it, and kicks
			}
			var ws unix.WaitStatus
			if _, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); err != nil && !errors.Is(err, unix.EINTR) {
				break
			}
		}
		kids.start.Unlock()
		select {
		case <-chld:
		case <-kids.kick:
		}
	}
}

// siginfoPID is si_pid of a siginfo filled by waitid: the first field of
// the union after si_signo, si_errno and si_code, aligned as a pointer.
func siginfoPID(info *unix.Siginfo) int {
	off := uintptr(16)
	if unsafe.Sizeof(uintptr(0)) == 4 {
		off = 12
	}
	return int(*(*int32)(unsafe.Add(unsafe.Pointer(info), off)))
}

// startProcess starts a process of attempt s from its thread: in its
// cgroups when it has them, registered so that the reaper leaves it to s.
func (sv *supervisor) startProcess(s *shim, path string, argv []string, attr *os.ProcAttr) (proc *os.Process, err error) {
	if !s.ownThread {
		done := make(chan struct{})
		sv.forks <- func() {
			defer close(done)
			proc, err = sv.startHere(s, path, argv, attr)
		}
		<-done
		return proc, err
	}
	return sv.startHere(s, path, argv, attr)
}

// startHere is startProcess on the calling thread.
func (sv *supervisor) startHere(s *shim, path string, argv []string, attr *os.ProcAttr) (*os.Process, error) {
	kids.start.RLock()
	defer kids.start.RUnlock()
	var proc *os.Process
	start := func(cgroupFD int) (int, error) {
		a := *attr
		if cgroupFD >= 0 && attr.Sys != nil {
			sys := *attr.Sys
			sys.UseCgroupFD, sys.CgroupFD = true, cgroupFD
			a.Sys = &sys
		}
		p, err := os.StartProcess(path, argv, &a)
		if err != nil {
			return 0, err
		}
		kids.mu.Lock()
		kids.pids[p.Pid] = true
		kids.mu.Unlock()
		proc = p
		return p.Pid, nil
	}
	var err error
	if s.cg == nil {
		_, err = start(-1)
	} else if err = s.cg.StartInJobThread(start); err != nil && proc != nil {
		// Started, but not (or not wholly) in the job's groups: the job
		// runs, and its cleanup falls to its process group and the rest.
		if s.log != nil {
			s.log.system("%v", err)
		}
		err = nil
	}
	return proc, err
}

// wait waits for a process the attempt started.
func (s *shim) wait(p *os.Process) (*os.ProcessState, error) {
	st, err := p.Wait()
	if s.sv != nil {
		forgetKid(p.Pid)
	}
	return st, err
}

// isolateThread prepares the attempt's thread, from which the job's
// processes are forked, for an isolated job: its own filesystem
// attributes (the job's umask), its own mount namespace with the private
// /tmp where the launch asks for one, and no_new_privs.
func (s *shim) isolateThread() error {
	// Locked for good: the thread ends with the attempt, and with it the
	// surroundings given to it.
	runtime.LockOSThread()
	s.ownThread = true
	flags := unix.CLONE_FS
	if s.rec.PrivateTmp {
		flags |= unix.CLONE_NEWNS
	}
	err := unix.Unshare(flags)
	if err != nil && s.rec.PrivateTmp && (errors.Is(err, unix.EPERM) || errors.Is(err, unix.EINVAL)) {
		s.log.system("the job shares /tmp: cannot create a mount namespace for a private /tmp (TMPDIR still points to its own): %v", err)
		s.rec.PrivateTmp = false
		err = unix.Unshare(unix.CLONE_FS)
	}
	if err != nil {
		return fmt.Errorf("cannot give the job's processes their own surroundings: %w", err)
	}
	if s.rec.PrivateTmp {
		// As a process started in a new mount namespace: nothing mounted
		// here reaches the host.
		if err := unix.Mount("none", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("cannot give the job a private /tmp: %w", err)
		}
		if err := privateTmp(s.rec.TmpDir); err != nil {
			return fmt.Errorf("cannot give the job a private /tmp: %w", err)
		}
	}
	return dropPrivileges()
}

// endTracked ends what is left of an attempt without cgroups once its
// main process (child) exited: its process group, the processes the
// tracker recorded, and their descendants.
func (sv *supervisor) endTracked(s *shim, child int) {
	deadline := time.Now().Add(reapWait)
	for {
		pids := sharedAttemptProcs(procTable(), sv.self, child, readProcs(filepath.Join(s.dir, procsFile)))
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(time.Millisecond)
	}
}

// goSafe runs f in a goroutine of the attempt. Under a shared supervisor,
// a panic there ends the attempt (its processes are killed) and is
// recorded as its failure, and the supervisor's other attempts go on.
func (s *shim) goSafe(f func()) {
	if s.sv == nil {
		go f()
		return
	}
	pid := s.pid
	go func() {
		defer func() {
			if r := recover(); r != nil {
				s.noteFailure(r)
				if pid > 0 {
					_ = syscall.Kill(-pid, syscall.SIGKILL)
				}
			}
		}()
		f()
	}()
}

// noteFailure records a panic of the attempt's supervision: on shim.log
// with its stack, and as the failure the exit record reports.
func (s *shim) noteFailure(r any) {
	msg := fmt.Sprintf("the supervisor failed: %v", r)
	fmt.Fprintf(s.stderr(), "shim: panic: %v\n%s", r, debug.Stack())
	s.failure.CompareAndSwap(nil, &msg)
}

// recovered ends an attempt whose supervising goroutine panicked: its
// processes are killed and its failure recorded, when it was claimed.
func (s *shim) recovered(r any) {
	s.noteFailure(r)
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(s.stderr(), "shim: panic while recording a failure: %v\n", r)
		}
	}()
	if s.pid > 0 {
		_ = syscall.Kill(-s.pid, syscall.SIGKILL)
	}
	if s.proc != nil && !s.waiting {
		go func() { _, _ = s.wait(s.proc) }()
	}
	if s.cg != nil {
		_ = s.cg.KillJob(reapWait)
		s.leaveGroup()
	}
	if !s.claimed || exists(filepath.Join(s.dir, exitFile)) {
		return
	}
	msg := *s.failure.Load()
	r2 := &exitRecord{State: domain.AttemptFailed, Reason: domain.ReasonLaunchFailed, Message: msg, PID: s.pid, FinishedAt: time.Now().UTC()}
	s.finish(r2)
}
