package apitypes

import "time"

// MetricsReport is the body of POST /api/v1/jobs/{id}/attempts/{n}/metrics.
type MetricsReport struct {
	Points []MetricsStep `json:"points"`
}

// MetricsStep is one reported training step and its metrics.
type MetricsStep struct {
	Step    int64              `json:"step"`
	Metrics map[string]float64 `json:"metrics"`
}

// MetricsReportResult answers a report: how many values were stored.
type MetricsReportResult struct {
	Stored int `json:"stored"`
}

// MetricSeries answers GET /api/v1/jobs/{id}/metrics: each metric's points
// by name, ordered by step.
type MetricSeries struct {
	Series map[string][]MetricPoint `json:"series"`
}

// MetricPoint is one value of a series.
type MetricPoint struct {
	Step    int64     `json:"step"`
	Value   float64   `json:"value"`
	At      time.Time `json:"at"`
	Attempt int       `json:"attempt"`
}
