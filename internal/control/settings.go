package control

import (
	"context"
	"slices"
	"time"

	"trainyard/internal/domain"
)

// settings are the pools, quotas, projects and compute grants the loop
// schedules against, kept between cycles: a cycle reads the store's
// settings revision (Store.SettingsRev), one row, and reads them again
// only when it changed — a write by any replica, or by anything else on
// the database, changes it. Loop goroutine only.
//
// The slices are shared with the snapshots built from them and must not
// be modified: a cycle in which nothing changed hands the scheduler the
// same slices as the last, which needPass compares in constant time.
type settings struct {
	loaded   bool
	rev      int64
	pools    []domain.Pool
	quotas   []domain.Quota // without grants
	projects []domain.Project
	// grants are the approved requests whose Until is after grantsAt,
	// by id: what ActiveGrants(t) returns is those whose Until is after
	// t, for any t not before grantsAt, until the revision changes.
	grants   []domain.QuotaRequest
	grantsAt time.Time
	// effective are quotas with grants added (domain.EffectiveQuotas),
	// computed again when either changes.
	effective []domain.Quota
	// seen: the view's read brought the revision (seenRev) this cycle.
	seen    bool
	seenRev int64
}

// noteRev records the revision the view's read of the jobs brought, which
// this cycle's loadSettings uses instead of reading it.
func (s *settings) noteRev(rev int64) { s.seen, s.seenRev = true, rev }

// loadSettings brings c.settings up to date for a cycle at now: it reads
// the pools, quotas, projects and grants again when the revision changed
// (or time went back past the grants' read), and drops the grants that
// ended by now. On error the next cycle reads everything.
func (c *Controller) loadSettings(ctx context.Context, now time.Time) error {
	s := &c.settings
	rev := s.seenRev
	if !s.seen {
		var err error
		if rev, err = c.cfg.Store.SettingsRev(ctx); err != nil {
			s.loaded = false
			return err
		}
	}
	s.seen = false
	if !s.loaded || rev != s.rev || now.Before(s.grantsAt) {
		s.loaded = false
		// The revision is read first: a write after it changes it again,
		// and the next cycle reads what this one may have missed.
		pools, err := c.cfg.Store.ListPools(ctx)
		if err != nil {
			return err
		}
		quotas, err := c.cfg.Store.ListQuotas(ctx, "", "")
		if err != nil {
			return err
		}
		grants, err := c.cfg.Store.ActiveGrants(ctx, now)
		if err != nil {
			return err
		}
		projects, err := c.cfg.Store.ListProjects(ctx)
		if err != nil {
			return err
		}
		*s = settings{loaded: true, rev: rev, pools: pools, quotas: quotas, projects: projects, grants: grants, grantsAt: now,
			effective: domain.EffectiveQuotas(quotas, grants, now)}
		c.poolFacts = make(map[string]poolFacts, len(pools))
		for _, p := range pools {
			c.poolFacts[p.Name] = factsOf(p)
		}
		return nil
	}
	if slices.ContainsFunc(s.grants, func(g domain.QuotaRequest) bool { return !g.Until.After(now) }) {
		// A grant ended: the rest are what ActiveGrants(now) returns. A
		// new slice, as the grants' watch keeps the last one (grants.go).
		s.grants = slices.DeleteFunc(slices.Clone(s.grants), func(g domain.QuotaRequest) bool { return !g.Until.After(now) })
		s.effective = domain.EffectiveQuotas(s.quotas, s.grants, now)
	}
	s.grantsAt = now
	return nil
}
