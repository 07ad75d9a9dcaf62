package main

import (
	"math"

	"trainyard/internal/alerting"
	"trainyard/internal/alerts"
	"trainyard/internal/domain"
	"trainyard/internal/metrics/sample"
)

// alertSamples turns the sampler's latest readings into the alerter's.
func alertSamples(latest []sample.Sample) []alerting.Sample {
	out := make([]alerting.Sample, 0, len(latest))
	for _, s := range latest {
		if !s.OK {
			continue
		}
		as := alerting.Sample{JobID: s.JobID, Attempt: s.Attempt,
			Sample: alerts.Sample{At: s.At, RSS: s.RSSBytes, MemoryLimit: s.MemoryLimit}}
		for _, g := range s.GPUs {
			u := g.Utilization / 100 // nvidia-smi reports percent
			if math.IsNaN(g.Utilization) {
				u = math.NaN()
			}
			as.GPUs = append(as.GPUs, alerts.GPUSample{Index: g.Index, Utilization: u})
		}
		out = append(out, as)
	}
	return out
}

// latestSample returns one running attempt's latest reading, for why.
func latestSample(s *sample.Sampler) func(int64, int) (domain.ResourceSample, bool) {
	return func(job int64, attempt int) (domain.ResourceSample, bool) {
		for _, x := range s.Latest() {
			if x.JobID != job || x.Attempt != attempt || !x.OK {
				continue
			}
			rs := domain.ResourceSample{At: x.At, CPUSeconds: x.CPUSeconds, RSSBytes: x.RSSBytes, MemoryLimit: x.MemoryLimit}
			for _, g := range x.GPUs {
				if math.IsNaN(g.Utilization) {
					continue
				}
				if rs.GPUUtil == nil {
					rs.GPUUtil = map[int]float64{}
				}
				rs.GPUUtil[g.Index] = g.Utilization / 100
			}
			return rs, true
		}
		return domain.ResourceSample{}, false
	}
}
