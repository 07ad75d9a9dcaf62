package control

import (
	"strings"
	"testing"

	"trainyard/internal/domain"
)

func curve(id int64, vals ...float64) []domain.MetricPoint {
	pts := make([]domain.MetricPoint, len(vals))
	for i, v := range vals {
		pts[i] = domain.MetricPoint{JobID: id, Step: int64(i+1) * 10, Key: "val_loss", Value: v}
	}
	return pts
}

func TestMedianVerdict(t *testing.T) {
	minimize := domain.Objective{Metric: "val_loss", Goal: "minimize"}
	maximize := domain.Objective{Metric: "val_loss", Goal: "maximize"}
	rule := domain.EarlyStop{Rule: "median", MinMembers: 3}
	// Members 2-4 ran to step 50; their means up to step 30 are 0.8, 0.6
	// and 0.4 (median 0.6).
	others := map[int64][]domain.MetricPoint{
		2: curve(2, 1.0, 0.8, 0.6, 0.5, 0.4),
		3: curve(3, 0.8, 0.6, 0.4, 0.3, 0.2),
		4: curve(4, 0.6, 0.4, 0.2, 0.1, 0.1),
	}
	with := func(own []domain.MetricPoint, more map[int64][]domain.MetricPoint) map[int64][]domain.MetricPoint {
		s := map[int64][]domain.MetricPoint{1: own}
		for k, v := range more {
			s[k] = v
		}
		return s
	}
	for _, c := range []struct {
		name   string
		series map[int64][]domain.MetricPoint
		obj    domain.Objective
		rule   domain.EarlyStop
		stop   bool
	}{
		{"worse than the median stops", with(curve(1, 0.9, 0.8, 0.7), others), minimize, rule, true},
		{"better than the median goes on", with(curve(1, 0.9, 0.7, 0.5), others), minimize, rule, false},
		{"equal to the median goes on", with(curve(1, 0.9, 0.6, 0.7), others), minimize, rule, false},
		{"its best counts, not its last", with(curve(1, 0.5, 0.9, 0.9), others), minimize, rule, false},
		{"too few others go on", with(curve(1, 0.9, 0.8, 0.7), map[int64][]domain.MetricPoint{2: others[2], 3: others[3]}), minimize, rule, false},
		{"others not that far do not count", with(curve(1, 0.9, 0.8, 0.7),
			map[int64][]domain.MetricPoint{2: others[2], 3: others[3], 5: curve(5, 0.1, 0.1)}), minimize, rule, false},
		{"before min_steps goes on", with(curve(1, 0.9, 0.8, 0.7), others), minimize, domain.EarlyStop{Rule: "median", MinMembers: 3, MinSteps: 40}, false},
		{"maximize: worse is lower", with(curve(1, 0.1, 0.2, 0.3), others), maximize, rule, true},
		{"maximize: higher goes on", with(curve(1, 0.1, 0.2, 0.9), others), maximize, rule, false},
		{"no points goes on", with(nil, others), minimize, rule, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			why := medianVerdict(1, c.series, c.obj, c.rule)
			if (why != "") != c.stop {
				t.Fatalf("verdict %q, want stop=%v", why, c.stop)
			}
			if c.stop && !strings.Contains(why, "median of 3 other members") {
				t.Errorf("verdict %q does not give the numbers", why)
			}
		})
	}
}
