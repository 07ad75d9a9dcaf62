package apitypes

import (
	"encoding/json"
	"time"
)

// Comparison answers GET /api/v1/compare: the jobs side by side, in the
// order asked, and the fields of their specs that differ.
type Comparison struct {
	Jobs []ComparedJob `json:"jobs"`
	// Differences are the spec fields whose values are not the same in
	// every job: params.* first, then the rest, each group by path. Empty
	// when the specs are the same.
	Differences []SpecDifference `json:"differences"`
	// Currency is the currency of the jobs' costs ("" when none is priced).
	Currency string `json:"currency,omitempty"`
}

// ComparedJob is one job of a comparison.
type ComparedJob struct {
	ID        int64  `json:"id"`
	Name      string `json:"name"`
	Project   string `json:"project"`
	Pool      string `json:"pool"`
	Submitter string `json:"submitter"`
	State     string `json:"state"`
	Reason    string `json:"reason,omitempty"`
	// Env is the pinned environment the job ran in: "name@version".
	Env string `json:"env"`
	// Code is the code package the job ran from; absent: none.
	Code     *CodeRef   `json:"code,omitempty"`
	SpecHash string     `json:"spec_hash"`
	Attempts int        `json:"attempts"`
	Started  *time.Time `json:"started_at,omitempty"`
	Finished *time.Time `json:"finished_at,omitempty"`
	// RunSeconds is the time its attempts ran, summed: each from its start
	// to its end, or to now while it runs; waiting in the queue or between
	// attempts is not counted. Its cost is priced on this time.
	RunSeconds float64 `json:"run_seconds"`
	// Cost is what its attempts cost so far, in Comparison.Currency;
	// absent when its pool has no rates.
	Cost string `json:"cost,omitempty"`
	// Params are the job's run parameters.
	Params map[string]string `json:"params,omitempty"`
	// Metrics summarises each training metric the job reported, by key.
	Metrics []MetricSummary `json:"metrics"`
}

// MetricSummary is one metric series of a job in three numbers: its value
// at its highest step (the latest report of that step), and its lowest
// and highest value.
type MetricSummary struct {
	Key      string  `json:"key"`
	LastStep int64   `json:"last_step"`
	Last     float64 `json:"last"`
	Min      float64 `json:"min"`
	Max      float64 `json:"max"`
}

// SpecDifference is one spec field that differs: its dotted path
// ("params.lr", "resources.gpus") and each job's value as it is in the
// job's spec, in the order of Comparison.Jobs; null where the job's spec
// has no such field. A list ("entrypoint") is one value.
type SpecDifference struct {
	Path   string            `json:"path"`
	Values []json.RawMessage `json:"values"`
}
