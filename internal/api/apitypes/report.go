package apitypes

import "time"

// Report is the body of GET /api/v1/report: what happened over a window,
// by project or pool. Amounts are exact decimals in the server's currency;
// durations are seconds.
type Report struct {
	By       string    `json:"by"` // project or pool
	Since    time.Time `json:"since"`
	Until    time.Time `json:"until"`
	Currency string    `json:"currency,omitempty"`
	// Lines are by group name; Total sums them (without queue times,
	// which do not add).
	Lines []ReportLine `json:"lines"`
	Total ReportLine   `json:"total"`
	// Oversized are the jobs that used under Under of the CPUs they held
	// (most idle CPU time first); NearMemory those whose memory peaked at
	// Near of their limit or more.
	Oversized  []ReportJob `json:"oversized"`
	NearMemory []ReportJob `json:"near_memory"`
	Under      float64     `json:"under"`
	Near       float64     `json:"near"`
}

// ReportLine is one group's figures over the window.
type ReportLine struct {
	Group     string `json:"group"`
	Submitted int    `json:"submitted"` // jobs submitted in the window
	// Queue is from submission to first start, of the jobs that first
	// started in the window.
	Queue QueueTimes `json:"queue"`
	// Started counts attempts that started in the window, Retries those of
	// them after their job's first; Ended those that ended in it, of them
	// Succeeded, Preempted and Failed (failed, timed out or lost).
	Started     int     `json:"started"`
	Retries     int     `json:"retries"`
	Ended       int     `json:"ended"`
	Succeeded   int     `json:"succeeded"`
	Preempted   int     `json:"preempted"`
	Failed      int     `json:"failed"`
	FailureRate float64 `json:"failure_rate"` // Failed / Ended
	// Failures are the ended attempts other than succeeded, by state and
	// reason, most first.
	Failures []ReasonCount `json:"failures"`
	// GPUHours and CPUHours are what attempts held in the window;
	// GPUHoursUsed (weighted by utilisation, from the GPU sampler) and
	// CPUHoursUsed what the attempts that ended in it used; Capacity* the
	// pool's capacity over the window (by pool only).
	GPUHours         float64 `json:"gpu_hours"`
	CPUHours         float64 `json:"cpu_hours"`
	GPUHoursUsed     float64 `json:"gpu_hours_used"`
	CPUHoursUsed     float64 `json:"cpu_hours_used"`
	CapacityGPUHours float64 `json:"capacity_gpu_hours,omitempty"`
	CapacityCPUHours float64 `json:"capacity_cpu_hours,omitempty"`
	Cost             string  `json:"cost"`
	Waste            string  `json:"waste"` // cost of preempted, failed, timed-out and lost attempts
	// Storage is what stored outputs and checkpoints cost over the
	// window's whole UTC days.
	Storage string `json:"storage"`
	// Budget is the project's budget in force and its current period's use
	// (by project only).
	Budget *ReportBudget `json:"budget,omitempty"`
}

// QueueTimes are nearest-rank percentiles of N queue times, in seconds.
type QueueTimes struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_seconds"`
	P90 float64 `json:"p90_seconds"`
	P99 float64 `json:"p99_seconds"`
	Max float64 `json:"max_seconds"`
}

// ReasonCount is how many attempts ended in State with Reason.
type ReasonCount struct {
	State  string `json:"state"`
	Reason string `json:"reason"`
	N      int    `json:"n"`
}

// ReportBudget is a budget's amount and its use in its current period.
type ReportBudget struct {
	Period      string    `json:"period"` // "2026-12", or "2026-12-01..2026-12-15"
	Amount      string    `json:"amount"`
	Spent       string    `json:"spent"`
	PeriodStart time.Time `json:"period_start"`
	PeriodEnd   time.Time `json:"period_end"`
}

// ReportJob is a job named by right-sizing.
type ReportJob struct {
	ID        int64   `json:"id"`
	Name      string  `json:"name"`
	Project   string  `json:"project"`
	Pool      string  `json:"pool"`
	User      string  `json:"user"`
	CPUs      float64 `json:"cpus"`
	Memory    int64   `json:"memory_bytes"`
	HeldHours float64 `json:"held_hours"` // wall time of its attempts that ended in the window
	UsedCPUs  float64 `json:"used_cpus"`  // CPU time used per second held
	MaxRSS    int64   `json:"max_rss_bytes"`
	IdleCost  string  `json:"idle_cost"` // what the CPUs it held and did not use cost
}
