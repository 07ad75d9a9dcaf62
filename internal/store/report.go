package store

import (
	"time"

	"trainyard/internal/domain"
)

// ReportQuery selects ReportTotals: the jobs and attempts of Projects
// (or of every project when AllProjects) active in [Since, Until],
// grouped by By ("project" or "pool"). Under and Near are the fractions
// of the right-sizing lists, Limit bounds each; runs shorter than MinRun
// and requests under MinCPUs CPUs are not judged on CPUs.
type ReportQuery struct {
	SpendQuery
	Under, Near float64
	Limit       int
	MinRun      time.Duration
	MinCPUs     float64
	// Parts is how many parts of the job ids are read at once; 0: the
	// store decides (one per core for a history of some size).
	Parts int
}

// ReportTotals is what the database sums for a review report: one row
// per group, and the jobs whose request was far from what they used.
type ReportTotals struct {
	Rows []ReportRow
	// Spend is what SpendTotals returns for the same query without Splits
	// (the query's Splits are ignored), from the same read of the
	// attempts.
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

// SizedJob is one job's request against what its attempts that ended in
// the window used: Held is their wall time (clipped to the window), CPUUsed
// their CPU time, MaxRSS the highest peak of their memory.
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
