package diagnose

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"trainyard/internal/domain"
)

// Running is what is known about one running attempt.
type Running struct {
	JobID     int64
	Attempt   int
	Now       time.Time
	StartedAt time.Time // zero until the program runs
	// LastProgressAt is the latest progress report; zero when none.
	LastProgressAt time.Time
	FirstProgress  time.Duration // the spec's health.first_progress (0: none)
	Stall          time.Duration // the spec's health.stall (0: none)
	// Sample is the latest resource reading; nil when none was taken.
	Sample *domain.ResourceSample
	GPUs   int // GPUs requested per node
	// Rate is the attempt's recent training speed in steps per second, and
	// EarlierRate the best speed of the job's earlier attempts; 0: unknown.
	Rate        float64
	EarlierRate float64
}

// Flag is one thing worth a researcher's attention about a running attempt.
type Flag struct {
	Kind string // no-first-progress, stalled, idle-gpu, memory-near-limit, slow
	Text string
}

// Thresholds of RunningFlags.
const (
	// StaleProgress is how old the last progress report must be to be
	// flagged when the spec sets no stall check.
	StaleProgress = 10 * time.Minute
	// IdleGPU is the utilisation below which an assigned GPU counts as idle.
	IdleGPU = 0.05
	// MemoryNearLimit is the share of the memory limit flagged as near it.
	MemoryNearLimit = 0.9
	// SlowRatio flags an attempt running below this share of the speed of
	// the job's earlier attempts.
	SlowRatio = 0.5
)

// RunningFlags looks at a running attempt's progress, resources and speed
// and returns what looks wrong, most urgent first; none when all is well.
func RunningFlags(r Running) []Flag {
	if r.StartedAt.IsZero() {
		return nil
	}
	var flags []Flag
	round := func(d time.Duration) string { return domain.FormatDuration(d.Round(time.Second)) }
	ran := r.Now.Sub(r.StartedAt)
	switch {
	case r.LastProgressAt.IsZero():
		if r.FirstProgress > 0 && ran > r.FirstProgress/2 {
			flags = append(flags, Flag{"no-first-progress", fmt.Sprintf("no progress reported in %s of running; the health check fails it after %s (health.first_progress)",
				round(ran), round(r.FirstProgress))})
		}
	default:
		limit := StaleProgress
		if r.Stall > 0 {
			limit = r.Stall / 2
		}
		if age := r.Now.Sub(r.LastProgressAt); age > limit {
			text := fmt.Sprintf("stalled? last progress reported %s ago, at %s", round(age), r.LastProgressAt.UTC().Format("2006-01-02 15:04:05 UTC"))
			if r.Stall > 0 {
				text += fmt.Sprintf("; the stall check stops it after %s without progress (health.stall)", round(r.Stall))
			}
			flags = append(flags, Flag{"stalled", text})
		}
	}
	if s := r.Sample; s != nil && r.GPUs > 0 && len(s.GPUUtil) > 0 {
		var idle []string
		for _, g := range slices.Sorted(mapsKeys(s.GPUUtil)) {
			if s.GPUUtil[g] < IdleGPU {
				idle = append(idle, fmt.Sprintf("GPU %d at %.0f%%", g, s.GPUUtil[g]*100))
			}
		}
		if len(idle) > 0 {
			flags = append(flags, Flag{"idle-gpu", fmt.Sprintf("%d of %d assigned GPU(s) idle (%s, sampled %s ago): check the data loader, or that the program uses CUDA_VISIBLE_DEVICES",
				len(idle), len(s.GPUUtil), strings.Join(idle, ", "), round(r.Now.Sub(s.At)))})
		}
	}
	if s := r.Sample; s != nil && s.MemoryLimit > 0 && float64(s.RSSBytes) >= MemoryNearLimit*float64(s.MemoryLimit) {
		flags = append(flags, Flag{"memory-near-limit", fmt.Sprintf("memory at %s of its %s limit (%.0f%%): it is killed (OOMKilled) if it grows further; raise resources.memory",
			domain.ByteSize(s.RSSBytes), domain.ByteSize(s.MemoryLimit), 100*float64(s.RSSBytes)/float64(s.MemoryLimit))})
	}
	if r.Rate > 0 && r.EarlierRate > 0 && r.Rate < SlowRatio*r.EarlierRate {
		flags = append(flags, Flag{"slow", fmt.Sprintf("training at %s steps/s, %.0f%% of the %s steps/s earlier attempts reached: check the node (trainyard show %d) and the input pipeline",
			rate(r.Rate), 100*r.Rate/r.EarlierRate, rate(r.EarlierRate), r.JobID)})
	}
	return flags
}

func rate(x float64) string {
	switch {
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 1:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.3g", x)
	}
}

func mapsKeys(m map[int]float64) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// StepRate is the training speed, in steps per second, over the points of
// one series of one attempt ordered by step: the steps advanced between the
// first and the last point within window of the last one, divided by the
// time between them; 0 when fewer than two points or no time passed.
func StepRate(points []domain.MetricPoint, window time.Duration) float64 {
	if len(points) < 2 {
		return 0
	}
	last := points[len(points)-1]
	first := points[0]
	if window > 0 {
		for _, p := range points {
			if last.At.Sub(p.At) <= window {
				first = p
				break
			}
		}
	}
	dt := last.At.Sub(first.At).Seconds()
	if dt <= 0 || last.Step <= first.Step {
		return 0
	}
	return float64(last.Step-first.Step) / dt
}
