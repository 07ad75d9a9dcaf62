package service_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"trainyard/internal/artifacts"
	"trainyard/internal/domain"
)

// BenchmarkLifecyclePass: 1,000 jobs with 10 kept checkpoints each, none
// due. A full pass reads them all; a pass ten minutes later reads only
// what was registered or came of age since.
func BenchmarkLifecyclePass(b *testing.B) {
	e := newTierEnv(b, artifacts.LifecyclePolicy{DeleteAfter: domain.Duration(90 * 24 * time.Hour)})
	ctx := context.Background()
	for j := range 1000 {
		job := e.submit(b)
		for c := range 10 {
			at := e.clk.Now().Add(-time.Duration(j*10+c) * time.Minute)
			if _, err := e.st.RecordCheckpoint(ctx, domain.CheckpointRecord{JobID: job.ID, Attempt: 1, Name: fmt.Sprintf("step-%d", c), Size: 1, Files: 1, At: at}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("full", func(b *testing.B) {
		for b.Loop() {
			e.clk.Advance(25 * time.Hour)
			if _, err := e.svc.Artifacts.LifecyclePass(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("incremental", func(b *testing.B) {
		for b.Loop() {
			e.clk.Advance(10 * time.Minute)
			if _, err := e.svc.Artifacts.LifecyclePass(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
