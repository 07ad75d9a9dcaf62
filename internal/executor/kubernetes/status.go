package kubernetes

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
)

// ReasonImagePullFailed: the job's image could not be pulled (a wrong
// name or tag, a private registry without pull secret).
const ReasonImagePullFailed domain.Reason = "ImagePullFailed"

// ReasonEvicted: the node evicted the attempt's pod (memory or disk
// pressure, a drain).
const ReasonEvicted domain.Reason = "Evicted"

// ReasonAgentSetupFailed: the init container that installs the in-job
// agent failed (a wrong agent image or path): the job never ran.
const ReasonAgentSetupFailed domain.Reason = "AgentSetupFailed"

// pullFailures are the waiting reasons of a container whose image will
// not come: the attempt ends rather than waits.
var pullFailures = map[string]bool{
	"ErrImagePull":      true,
	"ImagePullBackOff":  true,
	"InvalidImageName":  true,
	"ErrImageNeverPull": true,
}

// observed is what the Job and its pods say of an attempt.
type observed struct {
	started  bool      // a container of it has run
	at       time.Time // when its first container started
	ended    bool      // it will not run again: exit is its outcome
	exit     executor.Event
	pullFail bool   // a pod cannot pull its image (exit says which)
	waiting  string // why it is not running yet, in words (unschedulable…)
}

// observe reads an attempt's state from its Job (nil: none) and pods. It
// decides nothing about stops: the caller knows which it asked for.
func observe(job *batchv1.Job, pods []*corev1.Pod) observed {
	var o observed
	for _, p := range pods {
		for _, cs := range p.Status.InitContainerStatuses {
			if w := cs.State.Waiting; w != nil && pullFailures[w.Reason] {
				o.pullFail = true
				o.exit = executor.Event{State: domain.AttemptFailed, Reason: ReasonImagePullFailed,
					Message: fmt.Sprintf("the in-job agent's image %s cannot be pulled (%s): %s; check the executor's agent.image and its image pull secrets",
						cs.Image, w.Reason, strings.TrimSpace(w.Message))}
			}
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name != containerName {
				continue
			}
			switch {
			case cs.State.Running != nil:
				o.started = true
				o.at = earlier(o.at, cs.State.Running.StartedAt.Time)
			case cs.State.Terminated != nil:
				o.started = true
				o.at = earlier(o.at, cs.State.Terminated.StartedAt.Time)
			case cs.State.Waiting != nil && pullFailures[cs.State.Waiting.Reason]:
				o.pullFail = true
				o.exit = executor.Event{State: domain.AttemptFailed, Reason: ReasonImagePullFailed,
					Message: fmt.Sprintf("image %s cannot be pulled (%s): %s; check the image name and tag, and the pool's image pull secrets",
						cs.Image, cs.State.Waiting.Reason, strings.TrimSpace(cs.State.Waiting.Message))}
			}
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				o.waiting = "Kubernetes cannot place a pod: " + c.Message
			}
		}
	}
	if job == nil {
		return o
	}
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			zero := 0
			o.ended = true
			o.exit = executor.Event{State: domain.AttemptSucceeded, Reason: domain.ReasonCompleted, ExitCode: &zero,
				Message: "exited with code 0", At: c.LastTransitionTime.Time}
			return o
		case batchv1.JobFailed:
			o.ended = true
			o.exit = failure(c, pods)
			o.exit.At = c.LastTransitionTime.Time
			return o
		}
	}
	return o
}

// failure is the outcome of a failed Job: the first pod that failed
// names it (OOM, its exit code, an eviction), else the Job's condition
// (its deadline, which is the attempt's timeout).
func failure(c batchv1.JobCondition, pods []*corev1.Pod) executor.Event {
	if c.Reason == batchv1.JobReasonDeadlineExceeded {
		return executor.Event{State: domain.AttemptTimedOut, Reason: domain.ReasonTimeout,
			Message: "timed out: " + c.Message}
	}
	for _, p := range pods {
		if p.Status.Phase != corev1.PodFailed {
			continue
		}
		if p.Status.Reason == "Evicted" {
			return executor.Event{State: domain.AttemptFailed, Reason: ReasonEvicted,
				Message: "pod " + p.Name + " was evicted: " + p.Status.Message}
		}
		for _, cs := range p.Status.InitContainerStatuses {
			if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
				return executor.Event{State: domain.AttemptFailed, Reason: ReasonAgentSetupFailed,
					Message: fmt.Sprintf("the in-job agent could not be installed in pod %s (init container %s exited with code %d%s); the job did not run: check the executor's agent.image and agent.path",
						p.Name, cs.Name, t.ExitCode, oneLineSuffix(t.Message))}
			}
		}
		for _, cs := range p.Status.ContainerStatuses {
			t := cs.State.Terminated
			if cs.Name != containerName || t == nil || t.ExitCode == 0 {
				continue
			}
			code := int(t.ExitCode)
			if t.Reason == "OOMKilled" {
				return executor.Event{State: domain.AttemptFailed, Reason: domain.ReasonOOMKilled, ExitCode: &code,
					Message: fmt.Sprintf("killed for exceeding its memory limit (pod %s, exit code %d)", p.Name, code)}
			}
			if notFound(t) {
				// The shell's "command not found" (127), or the runtime could
				// not start the command at all.
				msg := "the entrypoint was not found"
				if t.Reason != "" && t.Reason != "Error" {
					msg += " (" + t.Reason + ")"
				}
				msg += ": exited with code " + strconv.Itoa(code)
				if len(pods) > 1 {
					msg += " (pod " + p.Name + ")"
				}
				if t.Message != "" {
					msg += ": " + lastLine(t.Message)
				}
				return executor.Event{State: domain.AttemptFailed, Reason: domain.ReasonEntrypointNotFound, ExitCode: &code, Message: msg}
			}
			msg := "exited with code " + strconv.Itoa(code)
			if sig := signalName(code); sig != "" {
				// A runtime reports a process killed by signal N as 128+N.
				msg += " (" + sig + ")"
			}
			if len(pods) > 1 {
				msg += " (pod " + p.Name + ")"
			}
			if t.Message != "" {
				msg += ": " + lastLine(t.Message)
			}
			return executor.Event{State: domain.AttemptFailed, Reason: domain.ReasonExitCode, ExitCode: &code, Message: msg}
		}
	}
	msg := "the Kubernetes Job failed"
	if c.Reason != "" {
		msg += " (" + c.Reason + ")"
	}
	if c.Message != "" {
		msg += ": " + c.Message
	}
	return executor.Event{State: domain.AttemptFailed, Reason: domain.ReasonNodeLost, Message: msg}
}

// lastLine is the last line of a terminated state's message, which holds
// the tail of the container's log under FallbackToLogsOnError: one line,
// so that the outcome's message is one line of the attempt's log.
func lastLine(msg string) string {
	lines := strings.Split(strings.TrimSpace(msg), "\n")
	l := strings.TrimSpace(lines[len(lines)-1])
	if len(l) > 512 {
		l = "…" + strings.ToValidUTF8(l[len(l)-512:], "")
	}
	return l
}

// notFound reports a container whose command was not found: the
// shell's exit code 127 (command not found), or a runtime that could not
// start it (StartError, ContainerCannotRun) because the file is missing.
func notFound(t *corev1.ContainerStateTerminated) bool {
	if t.ExitCode == 127 {
		return true
	}
	if t.Reason != "StartError" && t.Reason != "ContainerCannotRun" {
		return false
	}
	m := strings.ToLower(t.Message)
	return strings.Contains(m, "not found") || strings.Contains(m, "no such file")
}

// signalName names the signal of an exit code a runtime gives a process
// killed by one (128+N), e.g. "SIGKILL"; "" for other codes.
func signalName(code int) string {
	if code <= 128 || code > 128+31 {
		return ""
	}
	if name := unix.SignalName(syscall.Signal(code - 128)); name != "" {
		return name
	}
	return ""
}

// earlier is the earlier of a and b, ignoring a zero time.
func earlier(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// oneLineSuffix is ": " and the last line of msg, or "" for none.
func oneLineSuffix(msg string) string {
	msg = strings.TrimSpace(msg)
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = msg[i+1:]
	}
	if msg == "" {
		return ""
	}
	return ": " + msg
}
