package sqlite

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlstore"
)

// A page of a job list reads only the jobs' ids from the database (a few
// integers from an index) and their rows from the detail cache, when
// every one of them is there and still matches the filter; otherwise it
// reads the rows as before. Pricing the page reads the attempts' times
// from the cache the same way. Reading a page's rows costs ten times
// what reading its ids does.
//
// A page after a cursor (BeforeID) may not need the database at all: it
// holds jobs whose ids are below the cursor, newest first, so when each id
// from the cursor down is a cached job until the page is full, the cache
// alone is the answer (listBelow). An id it does not hold, a job that was never
// read, one a write forgot, or no job at all, sends the page to the
// database as before; so does a filter most cached jobs fail.

// maxCachedPage is the largest page ListJobs answers from the cache.
const maxCachedPage = 1000

// ListJobs implements store.Jobs.
func (s *Store) ListJobs(ctx context.Context, f store.JobFilter) ([]domain.Job, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if f.Limit <= 0 || f.Limit > maxCachedPage || f.Ascending || f.Sweep != 0 || !s.details.on() {
		return s.Shared.ListJobs(ctx, f)
	}
	if jobs, ok := s.details.listBelow(&f); ok {
		return jobs, nil
	}
	q, args := sqlstore.ListJobIDsQuery(f)
	st, err := s.readStmt(ctx, q.SQL(sqlstore.SQLite))
	if err != nil {
		return nil, interpretError("list jobs", err)
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, interpretError("list jobs", err)
	}
	ids := make([]int64, 0, f.Limit)
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, interpretError("list jobs", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return nil, interpretError("list jobs", err)
	}
	rows.Close()
	if jobs, ok := s.details.listRows(ids, &f); ok {
		return jobs, nil
	}
	return s.Shared.ListJobs(ctx, f)
}

// listRows returns the list rows of jobs ids from the cache, or false
// when one is missing or no longer matches f (it changed since the ids
// were read: the database answers then, as of one moment).
func (c *detailCache) listRows(ids []int64, f *store.JobFilter) ([]domain.Job, bool) {
	es, ok := c.lookupAll(ids, make([]detailEntry, 0, len(ids)))
	if !ok {
		c.mis.Add(1)
		return nil, false
	}
	jobs := f.Rows(len(ids))[:len(ids)]
	for i := range es {
		es[i].blob.job(&jobs[i], false)
		if !matches(&jobs[i], f) {
			c.mis.Add(1)
			return nil, false
		}
	}
	c.hits.Add(int64(len(ids)))
	return jobs, true
}

// listBelow returns the page of f below its cursor from the cache alone,
// or false when that would take an id the cache does not hold, or more
// than belowScan ids per row wanted. It reads every id below the cursor
// in turn, so no job the database would put on the page is skipped.
func (c *detailCache) listBelow(f *store.JobFilter) ([]domain.Job, bool) {
	if f.BeforeID <= 1 {
		return nil, false // the first page: its newest jobs are seldom cached yet
	}
	jobs := f.Rows(f.Limit)
	scan := belowScan * f.Limit
	ids := make([]int64, 0, f.Limit)
	es := make([]detailEntry, 0, f.Limit)
	// Read the ids below the cursor a page's worth at a time: as many as
	// rows are still wanted, which is all of them when every job matches.
	for id := f.BeforeID - 1; id > 0 && len(jobs) < f.Limit; {
		n := min(int64(f.Limit-len(jobs)), int64(scan), id)
		if n == 0 {
			return nil, false
		}
		ids = ids[:0]
		for k := range n {
			ids = append(ids, id-k)
		}
		var ok bool
		if es, ok = c.lookupAll(ids, es[:0]); !ok {
			return nil, false
		}
		scan -= int(n)
		id -= n
		for i := range es {
			j := &jobs[:len(jobs)+1][len(jobs)] // decoding sets every field a row has
			es[i].blob.job(j, false)
			if matches(j, f) {
				jobs = jobs[:len(jobs)+1]
			}
		}
	}
	c.belowPages.Add(1)
	c.hits.Add(int64(len(jobs)))
	return jobs, true
}

// belowScan bounds the ids listBelow reads per row of the page: a filter
// few jobs pass is the database's to answer, from its indexes.
const belowScan = 4

// matches reports whether j passes f's conditions (not its paging).
func matches(j *domain.Job, f *store.JobFilter) bool {
	if len(f.States) > 0 && !slices.Contains(f.States, j.State) {
		return false
	}
	if f.Project != "" && j.Project != f.Project {
		return false
	}
	if f.Restrict && !slices.Contains(f.Projects, j.Project) && (f.Submitter == "" || j.Submitter != f.Submitter) {
		return false
	}
	if f.Owner != "" && j.Submitter != f.Owner {
		return false
	}
	if f.Pool != "" && j.Pool != f.Pool {
		return false
	}
	if f.NameContains != "" && !containsFoldASCII(j.Name, f.NameContains) {
		return false
	}
	return true
}

// containsFoldASCII reports whether s holds sub, with ASCII letters of
// either case equal: what SQLite's LIKE matches (it folds no other
// letters, so neither does this; strings.ToLower and strings.EqualFold
// would fold Unicode letters and answer otherwise than the database).
func containsFoldASCII(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if equalFoldASCII(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

// equalFoldASCII reports whether a and b, of equal length, are equal
// with ASCII letters of either case equal.
func equalFoldASCII(a, b string) bool {
	for i := range len(a) {
		if lowerASCII(a[i]) != lowerASCII(b[i]) {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// AttemptTimes implements store.Jobs: from the detail cache when it holds
// every job of jobIDs.
func (s *Store) AttemptTimes(ctx context.Context, jobIDs []int64) ([]store.AttemptTime, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if times, ok := s.details.attemptTimes(jobIDs); ok {
		return times, nil
	}
	return s.Shared.AttemptTimes(ctx, jobIDs)
}

// attemptTimes returns the times of the attempts of jobs ids that started,
// by job and number, or false when a job is not cached.
func (c *detailCache) attemptTimes(ids []int64) ([]store.AttemptTime, bool) {
	if !c.on() || len(ids) == 0 {
		return nil, false
	}
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	es, ok := c.lookupAll(sorted, make([]detailEntry, 0, len(sorted)))
	if !ok {
		c.mis.Add(1)
		return nil, false
	}
	times := make([]store.AttemptTime, 0, 2*len(sorted))
	for i, id := range sorted {
		times = es[i].blob.appendAttemptTimes(times, id)
	}
	if len(times) == 0 {
		return nil, true // as the database answers
	}
	return times, true
}

// rateCache holds every pool's rate history (a row per pool and change of
// its rates: few), read once and again after a write to it, which the
// writer's hook notes as it notes jobs (noteRow).
type rateCache struct {
	off atomic.Bool // another process wrote the file: noteOtherWriters
	mu  sync.Mutex
	gen uint64 // writes to the history so far
	all []store.RateChange
	ok  bool
}

// RateHistory implements store.Pools: from memory once read.
func (s *Store) RateHistory(ctx context.Context, pools ...string) ([]store.RateChange, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	c := &s.rates
	if c.off.Load() {
		return s.Shared.RateHistory(ctx, pools...)
	}
	c.mu.Lock()
	all, ok, gen := c.all, c.ok, c.gen
	c.mu.Unlock()
	if !ok {
		var err error
		if all, err = s.Shared.RateHistory(ctx); err != nil {
			return nil, err
		}
		c.mu.Lock()
		if c.gen == gen && !c.off.Load() {
			c.all, c.ok = all, true
		}
		c.mu.Unlock()
	}
	// all is ordered by pool, then From, as the database orders one
	// pool's or several; the filter keeps that order.
	var out []store.RateChange
	for _, rc := range all {
		if len(pools) == 0 || slices.Contains(pools, rc.Pool) {
			out = append(out, rc)
		}
	}
	return out, nil
}

// forget drops the history: a write changed it.
func (c *rateCache) forget() {
	c.mu.Lock()
	c.gen++
	c.all, c.ok = nil, false
	c.mu.Unlock()
}
