package simulate

import (
	"testing"
	"time"
)

// BenchmarkFairShare simulates testdata/fairshare.yaml (a week, three
// projects, a one-minute tick) and reports virtual days per wall second.
func BenchmarkFairShare(b *testing.B) {
	w := load(b, "fairshare.yaml")
	days := w.Duration.D().Hours() / 24
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		run(b, w)
	}
	b.ReportMetric(days*float64(b.N)/time.Since(start).Seconds(), "virtual-days/s")
}
