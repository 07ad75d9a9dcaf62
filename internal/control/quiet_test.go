package control_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/store"
)

// passCounter counts the scheduler's passes and keeps the last View.
type passCounter struct {
	*holdObserver
	passes atomic.Int64
	mu     sync.Mutex
	active []int64 // job ids of the last View's active attempts
	queued map[control.PoolProject]int
}

func (o *passCounter) Pass(time.Duration) { o.passes.Add(1) }

func (o *passCounter) View(v control.View) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.active = o.active[:0]
	for _, a := range v.Active {
		o.active = append(o.active, a.Job.ID)
	}
	o.queued = map[control.PoolProject]int{}
	for k, n := range v.Queued {
		o.queued[k] = n
	}
}

func (o *passCounter) last() (active []int64, queued map[control.PoolProject]int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]int64(nil), o.active...), o.queued
}

// cycleCounter counts the loop's cycles: each reads what changed.
type cycleCounter struct {
	control.Store
	reads atomic.Int64
}

func (s *cycleCounter) ChangedJobsWith(ctx context.Context, since store.JobCursor) (store.JobChanges, error) {
	s.reads.Add(1)
	return s.Store.ChangedJobsWith(ctx, since)
}

// waitCycles waits until the loop has run n more cycles.
func waitCycles(t *testing.T, s *cycleCounter, n int64) {
	t.Helper()
	want := s.reads.Load() + n
	deadline := time.Now().Add(10 * time.Second)
	for s.reads.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("the loop ran %d cycles in 10s, want %d", s.reads.Load()-want+n, n)
		}
		time.Sleep(time.Millisecond) // polling a counter
	}
}

// Cycles in which nothing changed make no scheduling pass, nor does an
// attempt's start or the end of one in a pool where nothing waits; the
// Observer is told the view all the same. A job that waits is scheduled
// again once an attempt ends in its pool.
func TestQuietCyclesMakeNoPass(t *testing.T) {
	ex := &executortest.Fake{Script: func(l executor.Launch) []executor.Event {
		return []executor.Event{{Kind: executor.Started, PID: 1}} // runs until told
	}}
	obs := &passCounter{holdObserver: &holdObserver{}}
	st := &cycleCounter{}
	r := newTunedRig(t, ex, func(c *control.Config) {
		st.Store = c.Store
		c.Store, c.Observer, c.Interval = st, obs, 5*time.Millisecond
	})
	ctx := context.Background()
	if _, _, err := r.svc.Pools.PutPool(ctx, admin, domain.Pool{Name: "side", Executor: "local",
		Nodes: []domain.Node{{Name: "s1", CPUs: 4, Memory: 8 << 30}}}); err != nil {
		t.Fatal(err)
	}
	// All of project default's GPUs in pool default held; a second GPU job
	// waits there.
	big := r.submit("name: big\nentrypoint: [train]\nresources: {gpus: 4}\n")
	r.wait(big.ID, domain.JobRunning)
	small := r.submit("name: small\nentrypoint: [train]\nresources: {gpus: 1}\n")
	deadline := time.Now().Add(10 * time.Second)
	for j, _ := r.st.GetJob(ctx, small.ID); j.Reason != domain.ReasonQuotaExceeded; j, _ = r.st.GetJob(ctx, small.ID) {
		if time.Now().After(deadline) {
			t.Fatalf("job %d waits for %s (%s), want %s", small.ID, j.Reason, j.Message, domain.ReasonQuotaExceeded)
		}
		time.Sleep(time.Millisecond) // polling the store
	}
	waitCycles(t, st, 3) // the reason written is read back
	passes := obs.passes.Load()
	waitCycles(t, st, 20)
	if n := obs.passes.Load() - passes; n != 0 {
		t.Fatalf("%d passes in 20 cycles in which nothing changed, want none", n)
	}

	// A job of pool side starts and ends: nothing waits there.
	side := r.submit("name: side\npool: side\nentrypoint: [train]\nresources: {cpus: 1}\n")
	r.wait(side.ID, domain.JobRunning)
	waitCycles(t, st, 3)
	passes = obs.passes.Load()
	if active, queued := obs.last(); len(active) != 2 || queued[control.PoolProject{Pool: "default", Project: "default"}] != 1 {
		t.Fatalf("view: active %v, queued %v; want jobs %d and %d active and one job queued in pool default", active, queued, big.ID, side.ID)
	}
	ex.Emit(executor.Event{Ref: executor.Ref{JobID: side.ID, Attempt: 1}, Kind: executor.Exited, At: time.Now().UTC(),
		State: domain.AttemptSucceeded, Reason: domain.ReasonCompleted})
	r.wait(side.ID, domain.JobSucceeded)
	waitCycles(t, st, 5)
	if n := obs.passes.Load() - passes; n != 0 {
		t.Fatalf("%d passes after the end of a job in a pool where nothing waits, want none", n)
	}
	if active, _ := obs.last(); len(active) != 1 || active[0] != big.ID {
		t.Fatalf("view: active %v, want only job %d", active, big.ID)
	}

	// The end of the big job makes room for the waiting one.
	ex.Emit(executor.Event{Ref: executor.Ref{JobID: big.ID, Attempt: 1}, Kind: executor.Exited, At: time.Now().UTC(),
		State: domain.AttemptSucceeded, Reason: domain.ReasonCompleted})
	r.wait(small.ID, domain.JobRunning)
}
