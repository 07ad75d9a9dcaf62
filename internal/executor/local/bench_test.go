package local

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"trainyard/internal/executor"
)

var benchJob atomic.Int64

func benchLaunch(root string, argv []string) executor.Launch {
	id := benchJob.Add(1)
	dir := filepath.Join(root, strconv.FormatInt(id, 10))
	return executor.Launch{
		Ref:     executor.Ref{JobID: id, Attempt: 1},
		Argv:    argv,
		Env:     []string{"PATH=/usr/bin:/bin"},
		Dir:     dir,
		WorkDir: filepath.Join(dir, "work"),
		LogPath: filepath.Join(dir, "output.log"),
	}
}

// BenchmarkLaunchTrue launches b.N attempts of `true` without waiting between
// them and waits for every Exited event: end-to-end executor throughput.
func BenchmarkLaunchTrue(b *testing.B) {
	e := newExec(b)
	root := b.TempDir()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := e.Launch(context.Background(), benchLaunch(root, []string{"true"})); err != nil {
			b.Fatal(err)
		}
	}
	for done := 0; done < b.N; {
		ev := <-e.Events()
		switch ev.Kind {
		case executor.Exited:
			if ev.State != "succeeded" {
				b.Fatalf("attempt %s: %s %s", ev.Ref, ev.State, ev.Message)
			}
			done++
		case executor.Lost:
			b.Fatalf("attempt %s lost: %s", ev.Ref, ev.Message)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
}

// BenchmarkStartLatency measures Launch → Started, one attempt at a time.
func BenchmarkStartLatency(b *testing.B) {
	e := newExec(b)
	root := b.TempDir()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l := benchLaunch(root, []string{"true"})
		t0 := time.Now()
		if err := e.Launch(context.Background(), l); err != nil {
			b.Fatal(err)
		}
		for started := false; !started; {
			ev := <-e.Events()
			if ev.Ref == l.Ref && ev.Kind == executor.Started {
				lat = append(lat, time.Since(t0))
				started = true
			}
		}
		for ev := <-e.Events(); ev.Ref != l.Ref || ev.Kind != executor.Exited; ev = <-e.Events() {
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / 1e6 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.9), "p90-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}
