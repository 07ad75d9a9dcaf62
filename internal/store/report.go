package store

import (
	"time"

	"trainyard/internal/domain"
)

// ReportQuery selects ReportTotals: the jobs and attempts of Projects
// (or of every project when AllProjects) active in [ReportSince(Since),
// Until], grouped by By ("project" or "pool"). The history is read by
// the hour, so Until should be now or a whole hour (ReportHoursEnd).
// Under and Near are the fractions of the right-sizing lists, Limit
// bounds each; runs shorter than MinRun and requests under MinCPUs CPUs
// are not judged on CPUs.
type ReportQuery struct {
	SpendQuery
	Under, Near float64
	Limit       int
	MinRun      time.Duration
	MinCPUs     float64
}

// ReportSince is where a review report starting at t starts: the hour t
// falls in (UTC). Reports read the history by whole hours.
func ReportSince(t time.Time) time.Time { return t.Truncate(time.Hour) }

// ReportHoursEnd is the end of the last hour a report until t reads: t
// itself when it is a whole hour, else the next one.
func ReportHoursEnd(t time.Time) time.Time {
	h := t.Truncate(time.Hour)
	if h.Before(t) {
		h = h.Add(time.Hour)
	}
	return h
}

// ReportTotals is what the database sums for a review report: one row
// per group, and the jobs whose request was far from what they used.
type ReportTotals struct {
	Rows []ReportRow
	// Spend is what SpendTotals returns for the same window (from
	// ReportSince(Since)) without Splits: the query's Splits are ignored.
	Spend      []SpendRow
	Oversized  []SizedJob // used under Under of the CPUs they held, most idle CPU time first
	NearMemory []SizedJob // peaked at or above Near of their memory limit, closest first
}

// ReportRow is one group's activity in the window.
type ReportRow struct {
	Group     string
	Submitted int // jobs submitted in the window
	// Queue is the time from submission to first start of the jobs that
	// first started in the window.
	Queue QueueTimes
	// Started counts attempts that started in the window; Retries those
	// of them that were not their job's first.
	Started, Retries int
	// Ended counts attempts that ended in the window, Succeeded and
	// Preempted those that ended so; Failures the rest, by state and
	// reason.
	Ended, Succeeded, Preempted int
	Failures                    []ReasonCount
	// CPUUsed is the CPU time the attempts that ended in the window used,
	// GPUUsed the GPU time (utilisation-weighted, domain.Usage.GPUSeconds).
	CPUUsed, GPUUsed time.Duration
}

// QueueTimes are nearest-rank percentiles of N queue times.
type QueueTimes struct {
	N                  int
	P50, P90, P99, Max time.Duration
}

// ReasonCount is how many attempts ended in State with Reason.
type ReasonCount struct {
	State  domain.AttemptState
	Reason domain.Reason
	N      int
}

// SizedJob is one job's request against what its attempts used, for a
// job whose latest attempt ended in the window: Held is the wall time of
// its ended attempts, CPUUsed their CPU time, MaxRSS the highest peak of
// their memory.
type SizedJob struct {
	JobID     int64
	Name      string
	Project   string
	Pool      string
	Submitter string
	Resources domain.Resources
	Held      time.Duration
	CPUUsed   time.Duration
	MaxRSS    domain.ByteSize
}
