package service

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"trainyard/internal/authz"
	"trainyard/internal/cost"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// Storage accrual: once a UTC day is over, what every job kept on each
// tier during it (its outputs as its manifests list them, its checkpoints
// by the tiers their records say held them when) is written as
// byte-seconds, one row per day, job and tier (store.RecordStorageDays).
// A day is written once and never changed: accruing it again after a
// restart writes nothing new, so nothing is counted twice, and the same
// history always gives the same rows.

// storageState is what the accrual remembers between passes.
type storageState struct {
	mu   sync.Mutex
	next time.Time // the first day not accrued yet; zero: ask the store
}

// storageHoldings lists what every job held on each tier, and when, from
// since on (zero: ever).
func (s *ArtifactService) storageHoldings(ctx context.Context, since time.Time) ([]cost.Holding, error) {
	cks, err := s.st.ListCheckpointsHeld(ctx, since)
	if err != nil {
		return nil, err
	}
	ms, err := s.st.ManifestSizes(ctx)
	if err != nil {
		return nil, err
	}
	jobs := map[int64]domain.Job{}
	jobOf := func(id int64) (domain.Job, error) {
		if j, ok := jobs[id]; ok {
			return j, nil
		}
		j, err := s.st.GetJob(ctx, id)
		if err != nil {
			return j, fmt.Errorf("accrue storage of job %d: %w", id, err)
		}
		jobs[id] = j
		return j, nil
	}
	var out []cost.Holding
	hold := func(j domain.Job, tier string, bytes int64, from, to time.Time) {
		out = append(out, cost.Holding{JobID: j.ID, JobName: j.Name, Project: j.Project, Pool: j.Pool, Submitter: j.Submitter,
			Tier: tier, Bytes: bytes, From: from, To: to})
	}
	for _, c := range cks {
		j, err := jobOf(c.JobID)
		if err != nil {
			return nil, err
		}
		end := c.LocalGone
		if end.IsZero() || !c.Deleted.IsZero() && c.Deleted.Before(end) {
			end = c.Deleted
		}
		hold(j, domain.TierLocal, c.Size, c.At, end)
		if c.OnObject() {
			hold(j, domain.TierObject, c.Size, c.Object, c.Deleted)
		}
	}
	// A job's outputs are what its latest manifest lists, from that
	// manifest until the next one (ManifestSizes is by job, then attempt).
	for i, m := range ms {
		j, err := jobOf(m.JobID)
		if err != nil {
			return nil, err
		}
		var to time.Time
		if i+1 < len(ms) && ms[i+1].JobID == m.JobID {
			to = ms[i+1].At
		}
		hold(j, domain.TierLocal, m.Bytes, m.At, to)
	}
	return out, nil
}

// AccrueStorage writes every whole UTC day not accrued yet, up to the
// one before today, and returns how many days it wrote.
func (s *ArtifactService) AccrueStorage(ctx context.Context) (int, error) {
	s.storage.mu.Lock()
	defer s.storage.mu.Unlock()
	today := cost.Day(s.cfg.Clock.Now())
	next := s.storage.next
	if next.IsZero() {
		latest, err := s.st.LatestStorageDay(ctx)
		if err != nil {
			return 0, err
		}
		if !latest.IsZero() {
			next = latest.AddDate(0, 0, 1)
		}
	}
	if !next.IsZero() && !next.Before(today) {
		return 0, nil
	}
	hs, err := s.storageHoldings(ctx, next)
	if err != nil {
		return 0, err
	}
	if next.IsZero() { // nothing accrued yet: from the first day anything was held
		for _, h := range hs {
			if d := cost.Day(h.From); next.IsZero() || d.Before(next) {
				next = d
			}
		}
		if next.IsZero() {
			return 0, nil
		}
		s.storage.next = next
	}
	n := 0
	for d := next; d.Before(today); d = d.AddDate(0, 0, 1) {
		if err := s.st.RecordStorageDays(ctx, cost.AccrueDay(hs, d)); err != nil {
			return n, err
		}
		s.storage.next = d.AddDate(0, 0, 1)
		n++
	}
	return n, nil
}

// RunStorageAccrual accrues storage once now and again on every tick
// until ctx ends (the server ticks hourly, so a day is accrued within an
// hour of its end). Failures are logged and retried at the next tick;
// done, if set, is called after each pass (tests wait on it).
func (s *ArtifactService) RunStorageAccrual(ctx context.Context, ticks <-chan time.Time, done func(days int)) {
	for {
		n, err := s.AccrueStorage(ctx)
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("storage accrual failed; retrying at the next pass", "err", err)
		}
		if done != nil {
			done(n)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
	}
}

// StorageReport is what stored outputs and checkpoints cost (see
// cost.StorageReport).
type StorageReport = cost.StorageSummary

// StorageLine is one group's storage (see cost.StorageLine).
type StorageLine = cost.StorageLine

// StorageReport prices the accrued storage of the projects p may read
// (or of q.Project) over the whole UTC days from q's start to the last
// day accrued, grouped as q asks, at each pool's storage rates.
func (s *CostService) StorageReport(ctx context.Context, p Principal, q CostQuery) (StorageReport, error) {
	now := s.cfg.Clock.Now()
	since := q.Since
	switch {
	case since.IsZero() && q.Window > 0:
		since = now.Add(-q.Window)
	case since.IsZero():
		since = now.Add(-DefaultCostWindow)
	}
	if q.By == "" {
		q.By = "project"
	}
	if err := cost.CheckBy(q.By); err != nil {
		return StorageReport{}, domain.FieldErrors{{Path: "by", Message: err.Error()}}
	}
	if err := s.authorize(ctx, p, authz.CostRead, authz.Resource{Kind: "cost", Project: q.Project}); err != nil {
		return StorageReport{}, err
	}
	return s.storage(ctx, authz.VisibleCost(p), q.Project, since, now, q.By)
}

// storage prices the accrued storage of the projects vis sees (or of
// project) over the whole UTC days from since's to until's, grouped by by.
func (s *CostService) storage(ctx context.Context, vis authz.Visible, project string, since, until time.Time, by string) (StorageReport, error) {
	from, to := cost.Day(since), cost.Day(until)
	days, err := s.st.ListStorageDays(ctx, from, to)
	if err != nil {
		return StorageReport{}, err
	}
	days = slices.DeleteFunc(days, func(d domain.StorageDay) bool {
		return project != "" && d.Project != project || !vis.Sees(d.Project, "")
	})
	ledger, err := store.Ledger(ctx, s.st)
	if err != nil {
		return StorageReport{}, err
	}
	return cost.StorageReport(days, ledger, from, to, by), nil
}
