package control

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/metrics/sample"
)

// fixedSamples is a GPUSampler whose latest samples the test sets.
type fixedSamples []sample.Sample

func (f *fixedSamples) Latest() []sample.Sample { return *f }

// markStore records the idle stops the loop marks; every other method is
// the nil Store's (unused here).
type markStore struct {
	Store
	marked []int64
}

func (m *markStore) MarkHealthFailed(_ context.Context, jobID int64, _ int, reason domain.Reason, _ string) error {
	if reason != domain.ReasonIdle {
		return fmt.Errorf("marked %s, want Idle", reason)
	}
	m.marked = append(m.marked, jobID)
	return nil
}

func idleRig(samples *fixedSamples) (*Controller, *markStore) {
	st := &markStore{}
	c := New(Config{Store: st, Executor: &executortest.Fake{}, GPUSamples: samples})
	return c, st
}

func gpuSample(job int64, at time.Time, utils ...float64) sample.Sample {
	s := sample.Sample{Target: sample.Target{JobID: job, Attempt: 1, Pool: "gpu"}, At: at}
	for i, u := range utils {
		s.Target.GPUs = append(s.Target.GPUs, i)
		if !math.IsInf(u, -1) { // -Inf: the GPU was not read
			s.GPUs = append(s.GPUs, sample.GPUStat{Index: i, Utilization: u})
		}
	}
	return s
}

// The window must be covered by readings in which every GPU of the job
// reads idle: a busy GPU, one not read, a NaN reading or a gap of more
// than a third of the window starts it again.
func TestIdleWindowNeedsUnbrokenReadings(t *testing.T) {
	pools := []domain.Pool{{Name: "gpu", IdleStop: domain.IdleStop{Below: 0.05, For: domain.Duration(30 * time.Minute)}}}
	for name, tc := range map[string]struct {
		steps []float64 // utilisation of GPU 1 at each 5-minute reading; GPU 0 reads 1%
		gapAt int       // a reading index taken 11m after the one before (0: none)
		stop  bool
	}{
		"idle throughout":       {steps: []float64{1, 1, 1, 1, 1, 1, 1}, stop: true},
		"one GPU busy":          {steps: []float64{1, 1, 1, 50, 1, 1, 1}},
		"one GPU not read":      {steps: []float64{1, 1, math.Inf(-1), 1, 1, 1, 1}},
		"a NaN reading":         {steps: []float64{1, 1, 1, math.NaN(), 1, 1, 1}},
		"a gap in the readings": {steps: []float64{1, 1, 1, 1, 1, 1, 1}, gapAt: 3},
		"busy at the threshold": {steps: []float64{1, 1, 1, 1, 1, 1, 5}},
	} {
		t.Run(name, func(t *testing.T) {
			var samples fixedSamples
			c, st := idleRig(&samples)
			byID := map[int64]domain.Job{7: {ID: 7, Pool: "gpu", State: domain.JobRunning, Attempts: 1}}
			at := t0
			for i, u := range tc.steps {
				if i > 0 {
					at = at.Add(5 * time.Minute)
				}
				if i == tc.gapAt && i > 0 {
					at = at.Add(6 * time.Minute)
				}
				samples = fixedSamples{gpuSample(7, at, 1, u)}
				c.checkIdle(context.Background(), pools, byID)
			}
			if got := len(st.marked) == 1; got != tc.stop {
				t.Fatalf("stopped = %v (marked %v), want %v", got, st.marked, tc.stop)
			}
			if tc.stop && !c.stopping[executor.Ref{JobID: 7, Attempt: 1}] {
				t.Error("the job was marked but not stopped")
			}
		})
	}
}

// checkIdle's cost follows the running GPU jobs: the queue is not read.
// Compare ns/op across queue sizes at one running count.
func BenchmarkCheckIdle(b *testing.B) {
	pools := []domain.Pool{{Name: "gpu", IdleStop: domain.IdleStop{Below: 0.05, For: domain.Duration(30 * time.Minute)}}}
	for _, running := range []int{100, 1000} {
		for _, queued := range []int{0, 100_000} {
			b.Run(fmt.Sprintf("running=%d/queued=%d", running, queued), func(b *testing.B) {
				byID := make(map[int64]domain.Job, running+queued)
				samples := make(fixedSamples, 0, running)
				for i := range running {
					id := int64(i + 1)
					byID[id] = domain.Job{ID: id, Pool: "gpu", State: domain.JobRunning, Attempts: 1}
					samples = append(samples, gpuSample(id, t0, 1, 90)) // one GPU busy: judged, never stopped
				}
				for i := range queued {
					id := int64(running + i + 1)
					byID[id] = domain.Job{ID: id, Pool: "gpu", State: domain.JobQueued}
				}
				c, _ := idleRig(&samples)
				ctx := context.Background()
				b.ResetTimer()
				for n := range b.N {
					at := t0.Add(time.Duration(n+1) * time.Second)
					for i := range samples {
						samples[i].At = at
					}
					c.checkIdle(ctx, pools, byID)
				}
			})
		}
	}
}
