package local

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"trainyard/internal/domain"
	"trainyard/internal/logs"
)

// maxCheckTime bounds an environment check (or the attempt's timeout, when
// shorter): a check is meant to be quick.
const maxCheckTime = 5 * time.Minute

// checkEnvironment runs the environment's check command, if the launch has
// one, before the entrypoint: in the check's own environment and directory
// (CheckEnv, CheckDir) when the launch gives them, otherwise the
// entrypoint's; in the attempt's log, in its own process group. A check
// the executor skipped leaves its note in the log instead. ok is false
// when the attempt must end instead:
// the check could not start or failed (EnvironmentCheckFailed), or a stop
// request came (CanceledByUser); reason and msg say so.
func (s *shim) checkEnvironment() (reason domain.Reason, msg string, ok bool) {
	rec := &s.rec
	if len(rec.Check) == 0 {
		if rec.CheckNote != "" {
			s.log.system("%s", rec.CheckNote)
		}
		return "", "", true
	}
	env, dir := rec.Env, rec.WorkDir
	if rec.CheckEnv != nil {
		env, dir = rec.CheckEnv, cmp.Or(rec.CheckDir, checkDir)
	}
	cmdText := "`" + strings.Join(rec.Check, " ") + "`"
	failed := func(format string, args ...any) (domain.Reason, string, bool) {
		return domain.ReasonEnvironmentCheckFailed, "environment check " + cmdText + " " + fmt.Sprintf(format, args...), false
	}
	path, err := resolve(rec.Check[0], env, dir)
	if err != nil {
		return failed("could not start: %s", strings.Replace(err.Error(), "entrypoint", "program", 1))
	}
	outR, outW, err1 := os.Pipe()
	errR, errW, err2 := os.Pipe()
	devNull, err3 := os.Open(os.DevNull)
	if err := errors.Join(err1, err2, err3); err != nil {
		return domain.ReasonLaunchFailed, fmt.Sprintf("cannot set up the environment check's output: %v", err), false
	}
	if env == nil {
		env = []string{}
	}
	proc, err := s.startProcess(path, rec.Check, &os.ProcAttr{
		Dir: dir, Env: env, Files: []*os.File{devNull, outW, errW},
		Sys: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: rec.credential()},
	})
	outW.Close()
	errW.Close()
	devNull.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		_, why := startError(rec.Check[0], path, err)
		return failed("could not start: %s", strings.Replace(why, "entrypoint", "program", 1))
	}
	pid := proc.Pid
	s.log.system("environment check %s started as pid %d", cmdText, pid)
	var wg sync.WaitGroup
	wg.Add(2)
	s.goSafe(func() { defer wg.Done(); s.log.pump(outR, logs.Stdout, nil) })
	s.goSafe(func() { defer wg.Done(); s.log.pump(errR, logs.Stderr, nil) })
	exitCh := make(chan *os.ProcessState, 1)
	go func() {
		st, _ := s.wait(proc)
		exitCh <- st
	}()
	limit := maxCheckTime
	if rec.Timeout > 0 && rec.Timeout < limit {
		limit = rec.Timeout
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	var st *os.ProcessState
	var stopped, timedOut bool
	select {
	case st = <-exitCh:
	case <-timer.C:
		timedOut = true
	case sig := <-s.sigs:
		stopped = true
		s.log.system("stop requested (%v) during the environment check; killing it", sig)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL) // nothing of the check outlives it
	if st == nil {
		st = <-exitCh
	}
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainWait):
		outR.Close()
		errR.Close()
		<-drained
	}
	outR.Close()
	errR.Close()
	switch {
	case stopped:
		req := s.stopRequest()
		return req.Reason, "stopped during the environment check " + cmdText + ": " + req.describe(), false
	case timedOut:
		return failed("did not finish within %s", domain.FormatDuration(limit))
	case st == nil:
		return failed("could not be waited for")
	}
	ws, _ := st.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled():
		return failed("was killed by %s", signalName(ws.Signal()))
	case ws.ExitStatus() != 0:
		return failed("exited with code %d", ws.ExitStatus())
	}
	s.log.system("environment check %s passed", cmdText)
	return "", "", true
}

// signalName is "SIGTERM", or "signal N" for one without a name.
func signalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return "signal " + strconv.Itoa(int(sig))
}
