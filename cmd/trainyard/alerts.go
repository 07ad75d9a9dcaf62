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

// sampleHistory returns the readings the sampler keeps of one attempt,
// oldest first, for the job page's charts; nil without a sampler.
func sampleHistory(s *sample.Sampler) func(int64, int) []domain.ResourceSample {
	if s == nil {
		return nil
	}
	return func(job int64, attempt int) []domain.ResourceSample {
		rs := s.History(job, attempt)
		if len(rs) == 0 {
			return nil
		}
		out := make([]domain.ResourceSample, len(rs))
		for i, x := range rs {
			out[i] = domain.ResourceSample{At: x.At, CPUSeconds: x.CPUSeconds, RSSBytes: x.RSSBytes, MemoryLimit: x.MemoryLimit}
			for _, g := range x.GPUs {
				if math.IsNaN(g.Utilization) {
					continue
				}
				if out[i].GPUUtil == nil {
					out[i].GPUUtil = make(map[int]float64, len(x.GPUs))
				}
				out[i].GPUUtil[g.Index] = g.Utilization / 100 // nvidia-smi reports percent
			}
		}
		return out
	}
}
