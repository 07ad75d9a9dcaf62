package control_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
)

// rowCounter counts the cycles (as cycleCounter) and the rows of pools,
// quotas, projects, grants and active attempts the loop reads.
type rowCounter struct {
	cycleCounter
	rows atomic.Int64
}

func (s *rowCounter) ListPools(ctx context.Context) ([]domain.Pool, error) {
	out, err := s.Store.ListPools(ctx)
	s.rows.Add(int64(len(out)))
	return out, err
}

func (s *rowCounter) ListQuotas(ctx context.Context, project, pool string) ([]domain.Quota, error) {
	out, err := s.Store.ListQuotas(ctx, project, pool)
	s.rows.Add(int64(len(out)))
	return out, err
}

func (s *rowCounter) ListProjects(ctx context.Context) ([]domain.Project, error) {
	out, err := s.Store.ListProjects(ctx)
	s.rows.Add(int64(len(out)))
	return out, err
}

func (s *rowCounter) ActiveGrants(ctx context.Context, now time.Time) ([]domain.QuotaRequest, error) {
	out, err := s.Store.ActiveGrants(ctx, now)
	s.rows.Add(int64(len(out)))
	return out, err
}

func (s *rowCounter) ActiveAttempts(ctx context.Context) ([]domain.Attempt, error) {
	out, err := s.Store.ActiveAttempts(ctx)
	s.rows.Add(int64(len(out)))
	return out, err
}

func (s *rowCounter) ChangedJobsWith(ctx context.Context, since store.JobCursor) (store.JobChanges, error) {
	ch, err := s.cycleCounter.ChangedJobsWith(ctx, since)
	s.rows.Add(int64(len(ch.Attempts)))
	return ch, err
}

// A cycle in which nothing changed reads no pool, quota, project, grant
// or attempt row; one after a job changed reads that job's active
// attempts only, and the view shows the attempts as they are.
func TestQuietCyclesReadNoSettingsNorAttempts(t *testing.T) {
	ex := &executortest.Fake{Script: running}
	obs := &passCounter{holdObserver: &holdObserver{}}
	st := &rowCounter{}
	r := newTunedRig(t, ex, func(c *control.Config) {
		st.Store = c.Store
		c.Store, c.Observer, c.Interval = st, obs, 5*time.Millisecond
	})
	ctx := context.Background()
	if err := r.st.PutProject(ctx, domain.Project{Name: "default", Shares: 2}, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); err != nil {
		t.Fatal(err)
	}
	var jobs []domain.Job
	for range 3 {
		j := r.submit("name: a\nentrypoint: [train]\nresources: {cpus: 1}\n")
		jobs = append(jobs, j)
	}
	for _, j := range jobs {
		r.wait(j.ID, domain.JobRunning)
	}
	waitCycles(t, &st.cycleCounter, 3)
	rows := st.rows.Load()
	waitCycles(t, &st.cycleCounter, 20)
	if n := st.rows.Load() - rows; n != 0 {
		t.Fatalf("20 cycles in which nothing changed read %d rows of settings and attempts, want none", n)
	}

	// One job ends: the cycles after read its attempts, none of them
	// active now, and nothing else.
	ex.Emit(executor.Event{Ref: executor.Ref{JobID: jobs[1].ID, Attempt: 1}, Kind: executor.Exited, At: time.Now().UTC(),
		State: domain.AttemptSucceeded, Reason: domain.ReasonCompleted})
	r.wait(jobs[1].ID, domain.JobSucceeded)
	waitCycles(t, &st.cycleCounter, 5)
	if n := st.rows.Load() - rows; n != 0 {
		t.Fatalf("cycles after a job ended read %d rows of settings and attempts, want none", n)
	}
	if active, _ := obs.last(); len(active) != 2 || active[0] != jobs[0].ID || active[1] != jobs[2].ID {
		t.Fatalf("view: active %v, want jobs %d and %d", active, jobs[0].ID, jobs[2].ID)
	}

	// Another starts: the cycles read its attempt as it starts and as it
	// runs, no other.
	last := r.submit("name: b\nentrypoint: [train]\nresources: {cpus: 1}\n")
	r.wait(last.ID, domain.JobRunning)
	waitCycles(t, &st.cycleCounter, 5)
	if n := st.rows.Load() - rows; n < 1 || n > 2 {
		t.Fatalf("cycles after a job started read %d rows of settings and attempts, want its attempt's (1 or 2)", n)
	}
	if active, _ := obs.last(); len(active) != 3 || active[2] != last.ID {
		t.Fatalf("view: active %v, want jobs %d, %d and %d", active, jobs[0].ID, jobs[2].ID, last.ID)
	}
}

// A quota written by another replica (here a second store on the same
// database) reaches the scheduler by the next cycles without a wake-up:
// a job its old quota held back starts.
func TestSettingsWrittenElsewhereReachTheScheduler(t *testing.T) {
	ex := &executortest.Fake{Script: running}
	r := newTunedRig(t, ex, func(c *control.Config) { c.Interval = 5 * time.Millisecond })
	ctx := context.Background()
	other, err := sqlite.Open(ctx, filepath.Join(r.dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	audit := domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}
	setGPUs := func(s store.Store, gpus int) {
		t.Helper()
		if err := s.PutQuota(ctx, domain.Quota{Project: "default", Pool: "default", Guaranteed: domain.Limits{GPUs: gpus},
			MaxPriority: domain.PriorityUrgent}, audit); err != nil {
			t.Fatal(err)
		}
		// A second project's quota keeps the pool from being open to all.
		if err := s.PutQuota(ctx, domain.Quota{Project: "other", Pool: "default", Guaranteed: domain.Limits{GPUs: 1}}, audit); err != nil {
			t.Fatal(err)
		}
	}
	setGPUs(r.st, 1)
	first := r.submit("name: first\nentrypoint: [train]\nresources: {gpus: 1}\n")
	r.wait(first.ID, domain.JobRunning)
	second := r.submit("name: second\nentrypoint: [train]\nresources: {gpus: 1}\n")
	poll(t, "the second job to wait for the quota", func() bool {
		j, err := r.st.GetJob(ctx, second.ID)
		return err == nil && j.Reason == domain.ReasonQuotaExceeded
	})
	setGPUs(other, 2)
	r.wait(second.ID, domain.JobRunning)
}
