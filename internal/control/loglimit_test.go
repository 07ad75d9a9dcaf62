package control_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
)

// setPoolLogLimit changes pool "default"'s log limit.
func (r *rig) setPoolLogLimit(limit domain.ByteSize) {
	r.t.Helper()
	p, err := r.st.GetPool(context.Background(), "default")
	if err != nil {
		r.t.Fatal(err)
	}
	p.LogLimit = limit
	if _, _, err := r.svc.Pools.PutPool(context.Background(), admin, p); err != nil {
		r.t.Fatal(err)
	}
}

// launchOf returns the latest launch of the attempt, waiting for one.
func launchOf(t *testing.T, ex *executortest.Fake, ref executor.Ref, nth int) executor.Launch {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var seen []executor.Launch
		for _, l := range ex.Launches() {
			if l.Ref == ref {
				seen = append(seen, l)
			}
		}
		if len(seen) >= nth {
			return seen[nth-1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("attempt %v was launched %d times, want %d", ref, len(seen), nth)
		}
		time.Sleep(time.Millisecond)
	}
}

// The pool's log limit is the default and ceiling of its jobs' own; without
// one, the server's is.
func TestLaunchGetsThePoolsLogLimit(t *testing.T) {
	const server = 1 << 30
	r := newTunedRig(t, &executortest.Fake{}, func(c *control.Config) { c.LogLimit = server })
	settle := func() {
		// A cycle that began before a change may launch with the limit it
		// read then; two jobs run to the end put a whole cycle after it.
		for range 2 {
			r.wait(r.submit("name: settle\nentrypoint: [x]\n").ID, domain.JobSucceeded)
		}
	}
	r.setPoolLogLimit(8 << 20)
	settle()
	for _, tc := range []struct {
		policy string
		want   int64
	}{
		{"", 8 << 20},                             // the pool's default
		{"policy: {log_limit: 4MiB}\n", 4 << 20},  // below the pool's ceiling
		{"policy: {log_limit: 64MiB}\n", 8 << 20}, // capped by it
	} {
		j := r.submit("name: logs\nentrypoint: [x]\n" + tc.policy)
		r.wait(j.ID, domain.JobSucceeded)
		if got := launchOf(t, r.ex, executor.Ref{JobID: j.ID, Attempt: 1}, 1).LogLimit; got != tc.want {
			t.Errorf("%q: LogLimit = %d, want %d", tc.policy, got, tc.want)
		}
	}
	r.setPoolLogLimit(0)
	settle()
	j := r.submit("name: logs\nentrypoint: [x]\npolicy: {log_limit: 4GiB}\n")
	r.wait(j.ID, domain.JobSucceeded)
	if got := launchOf(t, r.ex, executor.Ref{JobID: j.ID, Attempt: 1}, 1).LogLimit; got != server {
		t.Errorf("pool without a limit: LogLimit = %d, want the server's %d", got, server)
	}
}

// A restarted controller reattaches with the pool's limit before its first
// snapshot.
func TestReattachGetsThePoolsLogLimit(t *testing.T) {
	ex := &executortest.Fake{Script: func(l executor.Launch) []executor.Event {
		return []executor.Event{{Kind: executor.Started, PID: 1}}
	}}
	r := newRig(t, ex)
	r.setPoolLogLimit(16 << 20)
	j := r.submit("name: survivor\nentrypoint: [x]\n")
	r.wait(j.ID, domain.JobRunning)
	r.restart()
	ref := executor.Ref{JobID: j.ID, Attempt: 1}
	if got := launchOf(t, ex, ref, 2).LogLimit; got != 16<<20 {
		t.Errorf("reattach: LogLimit = %d, want the pool's %d", got, 16<<20)
	}
	ex.Emit(executor.Event{Ref: ref, Kind: executor.Exited, State: domain.AttemptSucceeded, Reason: domain.ReasonCompleted})
	r.wait(j.ID, domain.JobSucceeded)
}

// limitObserver records what the loop says about logs that reached their
// limit.
type limitObserver struct {
	holdObserver
	mu  sync.Mutex
	got []string // "job/attempt limit state"
}

func (o *limitObserver) LogLimited(j domain.Job, attempt int, limit int64, _ time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, fmt.Sprintf("%d/%d %d %s", j.ID, attempt, limit, j.State))
}

func (o *limitObserver) seen() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.got)
}

// The executor's LogLimited event reaches the Observer for the job's
// current attempt, and not for one that already ended.
func TestLogLimitedReachesTheObserver(t *testing.T) {
	ex := &executortest.Fake{Script: func(l executor.Launch) []executor.Event {
		return []executor.Event{{Kind: executor.Started, PID: 1}, {Kind: executor.LogLimited, Limit: l.LogLimit}}
	}}
	obs := &limitObserver{}
	r := newTunedRig(t, ex, func(c *control.Config) { c.Observer = obs; c.LogLimit = 4 << 20 })
	a := r.submit("name: chatty\nentrypoint: [x]\n")
	r.wait(a.ID, domain.JobRunning)
	poll(t, "the first report", func() bool { return len(obs.seen()) == 1 })
	if got := obs.seen()[0]; got != fmt.Sprintf("%d/1 %d running", a.ID, 4<<20) && got != fmt.Sprintf("%d/1 %d starting", a.ID, 4<<20) {
		t.Fatalf("observer got %q", got)
	}
	refA := executor.Ref{JobID: a.ID, Attempt: 1}
	ex.Emit(executor.Event{Ref: refA, Kind: executor.Exited, State: domain.AttemptSucceeded, Reason: domain.ReasonCompleted})
	r.wait(a.ID, domain.JobSucceeded)
	ex.Emit(executor.Event{Ref: refA, Kind: executor.LogLimited, Limit: 4 << 20}) // late: the attempt ended
	b := r.submit("name: chatty\nentrypoint: [x]\n")
	poll(t, "the second job's report", func() bool { return len(obs.seen()) >= 2 })
	if got := obs.seen(); len(got) != 2 || !strings.HasPrefix(got[1], fmt.Sprintf("%d/1 ", b.ID)) {
		t.Fatalf("observer got %q; want job %d's report only after job %d's", got, b.ID, a.ID)
	}
}
