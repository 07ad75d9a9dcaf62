package domain

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// PreemptionHold is the control loop's guard against preemption loops at
// work: a job preempted more than the guard allows within Window is never
// chosen as a victim again until Until.
type PreemptionHold struct {
	JobID int64
	// Count is how often the job was preempted within Window, the last
	// time at At, when the hold began.
	Count  int
	Window time.Duration
	At     time.Time
	Until  time.Time
	// For lists the jobs it was preempted for, ascending; 0 stands for
	// preemptions whose beneficiary is not known.
	For []int64
}

// String says what the hold is and why: "held from preemption until
// 2026-03-01 13:29:00 UTC (preempted 4 times in 30m, for jobs 7, 9)".
func (h PreemptionHold) String() string {
	return "held from preemption until " + h.Until.UTC().Format("2006-01-02 15:04:05 UTC") + " (" + h.Cause() + ")"
}

// Cause says why the job is held: "preempted 4 times in 30m, for jobs 7, 9".
func (h PreemptionHold) Cause() string {
	s := fmt.Sprintf("preempted %d times in %s", h.Count, FormatDuration(h.Window))
	var ids []string
	unknown := false
	for _, id := range h.For {
		if id == 0 {
			unknown = true
			continue
		}
		ids = append(ids, strconv.FormatInt(id, 10))
	}
	const shown = 5
	more := ""
	if len(ids) > shown {
		more = fmt.Sprintf(" and %d more", len(ids)-shown)
		ids = ids[:shown]
	}
	switch {
	case len(ids) == 1:
		s += ", for job " + ids[0] + more
	case len(ids) > 1:
		s += ", for jobs " + strings.Join(ids, ", ") + more
	}
	if unknown && len(ids) > 0 {
		s += " and others"
	}
	return s
}
