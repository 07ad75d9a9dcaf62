package control_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/store"
)

// resyncStore leaves the jobs named hidden out of ChangedJobsWith (and
// their attempts), as if the
// loop had missed their writes, and counts the loop's reads of every job.
type resyncStore struct {
	control.Store
	full   atomic.Int64 // LiveJobs calls
	checks atomic.Int64 // LiveJobRevs calls
	mu     sync.Mutex
	reread []int64 // the ids JobsByID was asked for
}

const hiddenName = "hidden"

func (s *resyncStore) ChangedJobsWith(ctx context.Context, since store.JobCursor) (store.JobChanges, error) {
	ch, err := s.Store.ChangedJobsWith(ctx, since)
	var hidden []int64
	ch.Jobs = slices.DeleteFunc(ch.Jobs, func(j domain.Job) bool {
		if j.Name == hiddenName {
			hidden = append(hidden, j.ID)
		}
		return j.Name == hiddenName
	})
	ch.Attempts = slices.DeleteFunc(ch.Attempts, func(a domain.Attempt) bool { return slices.Contains(hidden, a.JobID) })
	return ch, err
}

func (s *resyncStore) LiveJobs(ctx context.Context) ([]domain.Job, store.JobCursor, error) {
	s.full.Add(1)
	return s.Store.LiveJobs(ctx)
}

func (s *resyncStore) LiveJobRevs(ctx context.Context) ([]store.JobRev, store.JobCursor, error) {
	defer s.checks.Add(1) // counted once the check's reads are done
	return s.Store.LiveJobRevs(ctx)
}

func (s *resyncStore) JobsByID(ctx context.Context, ids []int64) ([]domain.Job, error) {
	s.mu.Lock()
	s.reread = append(s.reread, ids...)
	s.mu.Unlock()
	return s.Store.JobsByID(ctx, ids)
}

func (s *resyncStore) rereads() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reread)
}

// waitChecks waits until the loop has checked the live jobs' revisions n
// more times, each check begun after the call.
func waitChecks(t *testing.T, s *resyncStore, n int64) {
	t.Helper()
	want := s.checks.Load() + n + 1 // one may be under way
	deadline := time.Now().Add(10 * time.Second)
	for s.checks.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("the loop checked the live jobs %d times in 10s, want %d", s.checks.Load()-want+n+1, n)
		}
		time.Sleep(time.Millisecond) // polling a counter
	}
}

func newResyncRig(t *testing.T) (*rig, *resyncStore, *passCounter) {
	t.Helper()
	st := &resyncStore{}
	obs := &passCounter{holdObserver: &holdObserver{}}
	r := newTunedRig(t, &executortest.Fake{Script: runForever}, func(c *control.Config) {
		st.Store = c.Store
		c.Store, c.Observer, c.Interval, c.Resync = st, obs, 5*time.Millisecond, 20*time.Millisecond
	})
	return r, st, obs
}

// waitQueued waits until the loop tells n jobs queued in pool default and
// job active running.
func waitQueued(t *testing.T, obs *passCounter, n int, active int64) {
	t.Helper()
	key := control.PoolProject{Pool: "default", Project: "default"}
	deadline := time.Now().Add(10 * time.Second)
	for {
		act, queued := obs.last()
		if queued[key] == n && slices.Equal(act, []int64{active}) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the loop tells %v active and %v queued, want job %d active and %d queued in pool default", act, queued, active, n)
		}
		time.Sleep(time.Millisecond) // polling the observer
	}
}

// The periodic check of the live jobs' revisions finds the writes the
// loop's looks at what changed missed: a new job, and a job that left the
// queue, without reading every job again.
func TestResyncFindsMissedChanges(t *testing.T) {
	r, st, obs := newResyncRig(t)
	// All of project default's GPUs held: a second GPU job waits.
	big := r.submit("name: big\nentrypoint: [train]\nresources: {gpus: 4}\n")
	r.wait(big.ID, domain.JobRunning)

	waitQueued(t, obs, 0, big.ID)

	// Only the check sees the hidden job: the loop tells it waits.
	hidden := r.submit("name: " + hiddenName + "\nentrypoint: [train]\nresources: {gpus: 1}\n")
	waitQueued(t, obs, 1, big.ID)
	if got := st.rereads(); !slices.Contains(got, hidden.ID) {
		t.Fatalf("the check re-read jobs %v, want job %d among them", got, hidden.ID)
	}

	// Its cancel, hidden too, takes it out of the queue.
	if _, err := r.svc.Jobs.Cancel(context.Background(), admin, hidden.ID, ""); err != nil {
		t.Fatal(err)
	}
	r.wait(hidden.ID, domain.JobCanceled)
	waitQueued(t, obs, 0, big.ID)
	if n := st.full.Load(); n != 1 {
		t.Fatalf("the loop read every live job %d times, want once (at its start)", n)
	}
}

// A check that finds nothing written since the loop's last looks reads
// no job's row.
func TestQuietResyncReadsNoRows(t *testing.T) {
	r, st, _ := newResyncRig(t)
	big := r.submit("name: big\nentrypoint: [train]\nresources: {gpus: 4}\n")
	r.wait(big.ID, domain.JobRunning)
	small := r.submit("name: small\nentrypoint: [train]\nresources: {gpus: 1}\n")
	deadline := time.Now().Add(10 * time.Second)
	for j := r.wait(small.ID, domain.JobQueued); j.Reason != domain.ReasonQuotaExceeded; j = r.wait(small.ID, domain.JobQueued) {
		if time.Now().After(deadline) {
			t.Fatalf("job %d waits for %s (%s), want %s", small.ID, j.Reason, j.Message, domain.ReasonQuotaExceeded)
		}
		time.Sleep(time.Millisecond) // polling the store
	}
	waitChecks(t, st, 2) // the writes so far are all read
	before := st.rereads()
	waitChecks(t, st, 5)
	if got := st.rereads(); len(got) != len(before) {
		t.Fatalf("5 checks with nothing written re-read jobs %v, want none", got[len(before):])
	}
	if n := st.full.Load(); n != 1 {
		t.Fatalf("the loop read every live job %d times, want once (at its start)", n)
	}
}
