package apitypes

import "time"

// CostReport is the body of GET /api/v1/cost: spend over a window, by
// group. Amounts are exact decimals in the server's currency ("23.46",
// "0.0025"); each attempt is priced once and rounded to a millionth.
type CostReport struct {
	By    string    `json:"by"` // project, pool, user, job or day
	Since time.Time `json:"since"`
	Until time.Time `json:"until"` // the server's now: running attempts count up to it
	// Currency is the server's currency code; empty when none is configured.
	Currency string     `json:"currency,omitempty"`
	Lines    []CostLine `json:"lines"` // highest cost first (by day: in date order)
	Total    CostLine   `json:"total"`
	// Storage is what the groups' stored outputs and checkpoints cost,
	// apart from the compute above.
	Storage StorageCost `json:"storage"`
}

// StorageCost is storage spend over whole UTC days: each day a job kept
// bytes on a tier, priced at its pool's local_gib_month or
// object_gib_month (a month is 30 days). Days are counted once they are
// over, from the day the window starts.
type StorageCost struct {
	Since time.Time     `json:"since"` // the first day counted (00:00 UTC)
	Until time.Time     `json:"until"` // the end of the last day counted (00:00 UTC today)
	Lines []StorageLine `json:"lines"` // highest cost first (by day: in date order)
	Total StorageLine   `json:"total"`
}

// StorageLine is one group's storage, per tier.
type StorageLine struct {
	Group         string  `json:"group"`
	LocalGiBDays  float64 `json:"local_gib_days"`
	ObjectGiBDays float64 `json:"object_gib_days"`
	LocalCost     string  `json:"local_cost"`
	ObjectCost    string  `json:"object_cost"`
	Cost          string  `json:"cost"`
}

// CostLine is the spend of one group.
type CostLine struct {
	Group    string  `json:"group"`
	GPUHours float64 `json:"gpu_hours"`
	CPUHours float64 `json:"cpu_hours"`
	Cost     string  `json:"cost"`
	// Waste is the part of Cost spent on attempts that were preempted,
	// failed, timed out or lost.
	Waste    string `json:"waste"`
	Attempts int    `json:"attempts"`
	// RunningPerHour is what the group's running attempts cost per hour.
	RunningPerHour string `json:"running_per_hour"`
}
