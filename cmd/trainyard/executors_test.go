package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
)

type fakeJobs map[int64]domain.Job

func (f fakeJobs) GetJob(ctx context.Context, id int64) (domain.Job, error) {
	if j, ok := f[id]; ok {
		return j, nil
	}
	return domain.Job{}, fmt.Errorf("job %d: %w", id, domain.ErrNotFound)
}

type fakeStrayer struct {
	mu       sync.Mutex
	strays   []executor.Ref
	released []executor.Ref
	done     chan struct{}
}

func (f *fakeStrayer) Strays(minAge time.Duration) []executor.Ref {
	if minAge < time.Minute {
		panic("strays younger than a minute may be another replica's launches")
	}
	return f.strays
}

func (f *fakeStrayer) Release(ctx context.Context, ref executor.Ref) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, ref)
	return nil
}

// TestReapStrays: a cluster Job whose attempt ended, whose job is gone, or
// that is an older attempt of a job now running again is removed; the
// Job of an active attempt is left for the control loop to adopt.
func TestReapStrays(t *testing.T) {
	jobs := fakeJobs{
		1: {ID: 1, State: domain.JobSucceeded, Attempts: 1},
		2: {ID: 2, State: domain.JobRunning, Attempts: 1},
		3: {ID: 3, State: domain.JobRunning, Attempts: 2},
		4: {ID: 4, State: domain.JobStarting, Attempts: 1},
	}
	ex := &fakeStrayer{strays: []executor.Ref{{JobID: 1, Attempt: 1}, {JobID: 2, Attempt: 1}, {JobID: 3, Attempt: 1}, {JobID: 4, Attempt: 1}, {JobID: 9, Attempt: 1}}}
	ctx, cancel := context.WithCancel(context.Background())
	ticks := make(chan time.Time)
	done := make(chan struct{})
	go func() { reapStrays(ctx, jobs, "gpu-cluster", ex, slog.New(slog.DiscardHandler), ticks); close(done) }()
	ticks <- time.Now()
	ticks <- time.Now() // the first pass has ended once the second tick is taken
	cancel()
	<-done
	want := []executor.Ref{{JobID: 1, Attempt: 1}, {JobID: 3, Attempt: 1}, {JobID: 9, Attempt: 1}}
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if got := ex.released[:len(want)]; !slices.Equal(got, want) {
		t.Errorf("released %v, want %v (each pass)", ex.released, want)
	}
}
