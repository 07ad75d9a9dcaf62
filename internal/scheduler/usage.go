package scheduler

import (
	"cmp"
	"math"
	"slices"
	"time"

	"trainyard/internal/domain"
)

// UsageRecord is one stretch of consumption by a project in a pool, used to
// compute decayed Usage.
type UsageRecord struct {
	Project, Pool string
	Rate          float64   // dominant-share cost per hour while it ran (see Usage)
	Start, End    time.Time // End zero = still running (counts until now)
}

// DecayUsage turns finished and running usage records into decayed Usage per
// (project, pool) at now: each moment of use at time t weighs
// 2^(-(now-t)/halfLife), so the value is the integral of Rate times that
// weight over [Start, End] in hours. Time after now is ignored. halfLife ≤ 0
// means DefaultFairShareHalfLife. The result is sorted by project, then pool,
// and holds no zero or negative values.
func DecayUsage(records []UsageRecord, now time.Time, halfLife time.Duration) []Usage {
	if halfLife <= 0 {
		halfLife = DefaultFairShareHalfLife
	}
	rs := slices.Clone(records)
	slices.SortFunc(rs, func(a, b UsageRecord) int {
		return cmp.Or(cmp.Compare(a.Project, b.Project), cmp.Compare(a.Pool, b.Pool),
			a.Start.Compare(b.Start), a.End.Compare(b.End), cmp.Compare(a.Rate, b.Rate))
	})
	lambda := math.Ln2 / halfLife.Hours() // per hour
	var out []Usage
	for _, r := range rs {
		end := r.End
		if end.IsZero() || end.After(now) {
			end = now
		}
		if r.Rate <= 0 || math.IsNaN(r.Rate) || math.IsInf(r.Rate, 0) || !r.Start.Before(end) {
			continue
		}
		ageEnd := now.Sub(end).Hours()
		ageStart := now.Sub(r.Start).Hours()
		// ∫ rate·e^(-λ·age) over the stretch = rate/λ·(e^(-λ·ageEnd) - e^(-λ·ageStart)).
		v := r.Rate / lambda * (math.Exp(-lambda*ageEnd) - math.Exp(-lambda*ageStart))
		if v <= 0 {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Project == r.Project && out[n-1].Pool == r.Pool {
			out[n-1].Value += v
			continue
		}
		out = append(out, Usage{Project: r.Project, Pool: r.Pool, Value: v})
	}
	return out
}

// CostRate is a job's dominant-share rate in a pool (for UsageRecord.Rate):
// the largest of its whole gang's GPUs, CPUs and memory as a fraction of the
// pool's capacity. Dimensions the pool lacks are ignored; a pool with no
// capacity costs 0.
func CostRate(pool domain.Pool, r domain.Resources) float64 {
	return costRate(pool.Capacity(), r)
}

func costRate(c domain.Limits, r domain.Resources) float64 {
	n := float64(max(r.Nodes, 1))
	rate := 0.0
	if c.GPUs > 0 && r.GPUs > 0 {
		rate = max(rate, float64(r.GPUs)*n/float64(c.GPUs))
	}
	if c.CPUs > 0 && r.CPUs > 0 {
		rate = max(rate, r.CPUs*n/c.CPUs)
	}
	if c.Memory > 0 && r.Memory > 0 {
		rate = max(rate, float64(r.Memory)*n/float64(c.Memory))
	}
	return rate
}
