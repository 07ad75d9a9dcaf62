package domain

import "time"

// MetricPoint is one training-metric value an attempt reported: Key (e.g.
// "loss") had Value at training step Step, reported at At.
type MetricPoint struct {
	JobID   int64
	Attempt int
	Step    int64
	Key     string
	Value   float64
	At      time.Time
}
