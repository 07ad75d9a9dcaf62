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

// ResourceSample is one resource reading of a running attempt: the
// latest (why) or one of its recent ones (the job page's charts).
type ResourceSample struct {
	At          time.Time
	CPUSeconds  float64
	RSSBytes    int64
	MemoryLimit int64 // 0: none
	// GPUUtil holds each assigned GPU's utilisation (0–1), by GPU index.
	GPUUtil map[int]float64
}
