package local

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// sharedSup is the executor's shared supervisor (supervisor.go).
type sharedSup struct {
	cmd  *exec.Cmd
	ctl  *os.File      // the executor's end of the socket pair
	dead chan struct{} // closed once the process ended
}

// startSharedSup starts a shared supervisor in a session of its own.
func (e *Executor) startSharedSup() (*sharedSup, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("create the supervisor's socket: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "supervisor"), os.NewFile(uintptr(fds[1]), "supervisor")
	cmd := &exec.Cmd{
		Path:        e.shimPath,
		Args:        append(append([]string(nil), e.shimArgs...), sharedFlag),
		Env:         sharedEnviron(),
		ExtraFiles:  []*os.File{theirs}, // fd 3 (ctlFD)
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		ours.Close()
		return nil, err
	}
	sup := &sharedSup{cmd: cmd, ctl: ours, dead: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(sup.dead)
	}()
	e.log.Debug("started the shared supervisor", "pid", cmd.Process.Pid)
	return sup, nil
}

// sharedEnviron is the environment the shared supervisor starts with: the
// server's, with the Go runtime held to at most sharedProcs processors.
// Unlike a shim of its own, it serves every attempt: with one processor,
// one attempt's slow file system call would hold up every other start
// until the runtime noticed.
func sharedEnviron() []string {
	return append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(min(runtime.NumCPU(), sharedProcs)))
}

// sharedProcs bounds the shared supervisor's processors.
const sharedProcs = 4

// sendShared hands an attempt's event pipe (write end) and launch pipe
// (read end) to the shared supervisor, started now when there is none or
// it died; the attempts of a dead one are not moved.
func (e *Executor) sendShared(events, launch *os.File) (*sharedSup, error) {
	e.sharedMu.Lock()
	defer e.sharedMu.Unlock()
	rights := unix.UnixRights(int(events.Fd()), int(launch.Fd()))
	var err error
	for range 2 {
		if e.shared != nil {
			select {
			case <-e.shared.dead:
				e.log.Warn("the shared supervisor died; starting another for new attempts", "pid", e.shared.cmd.Process.Pid, "status", e.shared.cmd.ProcessState.String())
				e.shared.ctl.Close()
				e.shared = nil
			default:
			}
		}
		if e.shared == nil {
			if e.shared, err = e.startSharedSup(); err != nil {
				return nil, err
			}
		}
		err = unix.Sendmsg(int(e.shared.ctl.Fd()), []byte{0}, rights, nil, unix.MSG_NOSIGNAL)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err == nil {
			return e.shared, nil
		}
		e.shared.ctl.Close() // it took no attempt: a dead or broken supervisor
		e.shared = nil
	}
	return nil, fmt.Errorf("hand the attempt to the shared supervisor: %w", err)
}

// startShared hands attempt a to the shared supervisor with its launch
// record rec.
func (e *Executor) startShared(a *attempt, rec *launchRecord) error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("create event pipe: %w", err)
	}
	lr, lw, err := os.Pipe()
	if err != nil {
		r.Close()
		w.Close()
		return fmt.Errorf("create launch pipe: %w", err)
	}
	sup, err := e.sendShared(w, lr)
	w.Close()
	lr.Close()
	if err != nil {
		r.Close()
		lw.Close()
		return fmt.Errorf("start supervisor %s: %w", e.shimPath, err)
	}
	// The record holds the job's secrets: it goes through the pipe only.
	b, err := json.Marshal(rec)
	if err == nil {
		_, err = lw.Write(b)
	}
	lw.Close()
	if err != nil {
		e.log.Warn("send the launch record", "attempt", a.ref.String(), "err", err) // the supervisor records the failure
	}
	a.mu.Lock()
	a.proc, a.pipe = sup.cmd.Process, r
	a.mu.Unlock()
	if e.isClosed() {
		r.Close() // Close may have missed this pipe; the watcher must not block it
	}
	go e.watchShared(a, sup, r)
	return nil
}

// watchShared follows an attempt of the shared supervisor sup.
func (e *Executor) watchShared(a *attempt, sup *sharedSup, r *os.File) {
	defer e.wg.Done()
	br := bufio.NewReader(r)
	owned := false
	for {
		line, err := br.ReadString('\n')
		switch {
		case line == "exited\n" && !e.isClosed():
			e.finishFromRecord(a, "ended")
		case line == "owned\n":
			owned = true
		case strings.HasSuffix(line, "\n"):
			e.handleLine(a, strings.TrimSuffix(line, "\n"))
		}
		if err != nil {
			break
		}
	}
	r.Close()
	if e.isClosed() || a.isDone() {
		return
	}
	if owned {
		// Another shim got the attempt first; watch that one.
		e.reattach0(a)
		return
	}
	why := fmt.Sprintf("(the shared supervisor, pid %d) ended", sup.cmd.Process.Pid)
	select {
	case <-sup.dead:
		why = fmt.Sprintf("(the shared supervisor, pid %d) died (%s)", sup.cmd.Process.Pid, sup.cmd.ProcessState.String())
	default:
	}
	e.finishFromRecord(a, why)
}
