package apitypes

import (
	"encoding/json"
	"time"
)

// SweepRequest is the body of POST /api/v1/sweeps: a spec with a sweep:
// section, or any spec with Array set.
type SweepRequest struct {
	Spec json.RawMessage `json:"spec"`
	Set  []string        `json:"set,omitempty"`
	// Array makes a job array of the spec: "0-31", "1,3,5-9", with an
	// optional "%N" max_parallel ("0-31%4").
	Array string   `json:"array,omitempty"`
	Code  *CodeRef `json:"code,omitempty"`
}

// Sweep is a sweep (or job array) as the API shows it.
type Sweep struct {
	ID          int64          `json:"id"`
	Name        string         `json:"name"`
	Project     string         `json:"project"`
	Submitter   string         `json:"submitter"`
	CreatedAt   time.Time      `json:"created_at"`
	Method      string         `json:"method"`
	Members     int            `json:"members"`
	MaxParallel int            `json:"max_parallel,omitempty"`
	Objective   *Objective     `json:"objective,omitempty"`
	CanceledAt  *time.Time     `json:"canceled_at,omitempty"`
	CanceledBy  string         `json:"canceled_by,omitempty"`
	State       string         `json:"state,omitempty"`  // GET one: as its dependents see it
	Counts      map[string]int `json:"counts,omitempty"` // GET one: members by state
	Best        *SweepBest     `json:"best,omitempty"`   // GET one: the best member by the objective
	// Jobs are the members' ids, in index order (the submit's answer).
	Jobs []int64 `json:"jobs,omitempty"`
	// Created, in a submit's answer, is false when an Idempotency-Key
	// matched an earlier sweep.
	Created *bool `json:"created,omitempty"`
	// Definition is the sweep: section as stored.
	Definition json.RawMessage `json:"definition,omitempty"`
}

// Objective names the metric that ranks a sweep's members.
type Objective struct {
	Metric string `json:"metric"`
	Goal   string `json:"goal"`
}

// SweepBest is a sweep's best member: its best value of the objective's
// metric, at which step.
type SweepBest struct {
	Job    int64             `json:"job"`
	Index  int               `json:"index"`
	Params map[string]string `json:"params,omitempty"`
	Metric string            `json:"metric"`
	Value  float64           `json:"value"`
	Step   int64             `json:"step"`
}

// SweepList is GET /api/v1/sweeps.
type SweepList struct {
	Sweeps []Sweep `json:"sweeps"`
}
