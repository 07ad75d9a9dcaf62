package simulate

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"trainyard/internal/domain"
)

// Event kinds.
const (
	EventStart   = "start"   // an attempt starts
	EventPreempt = "preempt" // the scheduler preempts a running job
	EventRequeue = "requeue" // a preempted job has stopped and is queued again
	EventEnd     = "end"     // an attempt ends on its own: succeeded or failed-timeout
)

// Event is one thing that happened to a job (sim --events). Fields that do
// not apply to the kind are empty.
type Event struct {
	At       domain.Duration `json:"at"`    // virtual time
	Kind     string          `json:"event"` // start, preempt, requeue, end
	Job      int64           `json:"job"`
	Stream   string          `json:"stream"`
	Project  string          `json:"project"`
	Pool     string          `json:"pool"`
	Priority domain.Priority `json:"priority"`
	Attempt  int             `json:"attempt"`

	// start: the nodes ("gpu-3:0,1"), whether it borrows, how long it
	// was queued this time and the last reason the scheduler gave.
	Nodes     []string        `json:"nodes,omitempty"`
	Borrowed  bool            `json:"borrowed,omitempty"`
	Queued    domain.Duration `json:"queued,omitempty"`
	WaitedFor domain.Reason   `json:"waited_for,omitempty"`
	// preempt: the job it makes room for, and the scheduler's message.
	For        int64  `json:"for,omitempty"`
	ForProject string `json:"for_project,omitempty"`
	Message    string `json:"message,omitempty"`
	// requeue: how long the attempt ran and the work it lost (since its
	// last checkpoint).
	Ran  domain.Duration `json:"ran,omitempty"`
	Lost domain.Duration `json:"lost,omitempty"`
	// end: succeeded or failed-timeout.
	Outcome string `json:"outcome,omitempty"`
}

// String is the event as one line of text.
func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-9s %-7s job %d %s (%s, %s) attempt %d", e.At, e.Kind, e.Job, e.Stream, e.Project, e.Priority, e.Attempt)
	switch e.Kind {
	case EventStart:
		fmt.Fprintf(&b, " on %s", strings.Join(e.Nodes, " "))
		if e.Borrowed {
			b.WriteString(", borrowed")
		}
		fmt.Fprintf(&b, "; queued %s", e.Queued)
		if e.WaitedFor != "" {
			fmt.Fprintf(&b, " (%s)", e.WaitedFor)
		}
	case EventPreempt:
		fmt.Fprintf(&b, " for job %d (%s): %s", e.For, e.ForProject, e.Message)
	case EventRequeue:
		fmt.Fprintf(&b, ": stopped after %s, lost %s since its last checkpoint", e.Ran, e.Lost)
	case EventEnd:
		fmt.Fprintf(&b, ": %s", e.Outcome)
	}
	return b.String()
}

// event returns j's event of kind now, with the common fields set.
func (s *sim) event(kind string, j *job) Event {
	spec := s.spec(j)
	return Event{At: s.at(), Kind: kind, Job: j.id, Stream: spec.Name,
		Project: spec.Project, Pool: spec.Pool, Priority: spec.Priority, Attempt: j.attempt}
}

func (s *sim) emitStart(j *job, waitedFor domain.Reason) {
	e := s.event(EventStart, j)
	for _, na := range j.nodes {
		gpus := make([]string, len(na.GPUs))
		for k, g := range na.GPUs {
			gpus[k] = strconv.Itoa(g)
		}
		e.Nodes = append(e.Nodes, na.Node+":"+strings.Join(gpus, ","))
	}
	e.Borrowed = j.borrowed
	e.Queued = seconds(s.now.Sub(j.queuedAt))
	e.WaitedFor = waitedFor
	s.opt.Events(e)
}

func (s *sim) emitPreempt(j *job, forID int64, msg string) {
	e := s.event(EventPreempt, j)
	e.For, e.Message = forID, msg
	if b := s.job(forID); b != nil {
		e.ForProject = s.spec(b).Project
	}
	s.opt.Events(e)
}

func (s *sim) emitRequeue(j *job, ran, saved time.Duration) {
	e := s.event(EventRequeue, j)
	e.Ran, e.Lost = seconds(ran), seconds(ran-saved)
	s.opt.Events(e)
}

func (s *sim) emitEnd(j *job) {
	e := s.event(EventEnd, j)
	e.Outcome = "succeeded"
	if j.state == stateFailed {
		e.Outcome = "failed-timeout"
	}
	s.opt.Events(e)
}

// at is the virtual time now, to the second, as events and violations give
// it.
func (s *sim) at() domain.Duration { return seconds(s.now.Sub(Epoch)) }

func seconds(d time.Duration) domain.Duration { return domain.Duration(d.Round(time.Second)) }
