package sqlite

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"trainyard/internal/store"
)

// The detail cache keeps the answers of JobDetail in memory, so that
// showing a job reads no SQLite pages (half a show's CPU, measured, is the
// driver stepping the detail statement). It can, because this process
// holds the database's only writer: every row any write changes passes
// the writer connection's pre-update hook (hookWrites), which notes the
// job it belongs to, and once the transaction has ended the writer drops
// those jobs' entries (forget) before it answers the writes' callers. A
// write that returned is therefore never followed by a stale show.
//
// A reader that misses reads the database and offers what it read (put).
// A write may commit between that read and the offer, and its forget may
// run before the offer; to keep such a stale read out, every shard counts
// the forgets that touched it, the reader notes the count before its read,
// and put takes the entry only when the count has not moved since.
//
// Entries are kept in pages of 64 consecutive job ids, so that a list of
// consecutive jobs (the usual page: newest first) finds its entries with
// a lookup per page rather than per job, and the shard of a page is its
// number's remainder. Entries are bounded by an estimate of the bytes
// they hold. A put over the bound drops pages of its shard at random
// (the map's iteration order) until it is under, which keeps put O(1)
// amortised without an LRU list to maintain on every hit. An entry holds the job without its
// parsed spec (never filled by a detail read), and shares what jobs have
// in common: the spec's text, counted once per distinct spec, and the
// pool's rate history.
type detailCache struct {
	shards     [detailShards]detailShard
	capBytes   int64        // 0 turns the cache off
	off        atomic.Bool  // turned off for good: another process wrote the file (noteOtherWriters)
	bytes      atomic.Int64 // held now: entries and distinct specs
	hits, mis  atomic.Int64
	belowPages atomic.Int64 // list pages answered without the database (listBelow)

	// Lock order: a shard's mu, then shared's.
	shared struct {
		sync.Mutex
		specs map[string]*specRef           // by spec hash
		rates map[string][]store.RateChange // by pool: the last history seen
	}
}

const detailShards = 64

type detailShard struct {
	mu    sync.Mutex
	gen   uint64                // forgets that touched this shard
	pages map[int64]*detailPage // by page number: id >> pageBits
	n     int                   // entries held
	_     [32]byte              // keep shards on their own cache lines
}

// pageBits sets the jobs a page holds: 1 << pageBits consecutive ids.
const pageBits = 6

// detailPage holds the cached details of 1 << pageBits consecutive job
// ids; a slot whose spec is nil is empty.
type detailPage struct {
	e [1 << pageBits]detailEntry
	n int // slots filled
}

// pageBytes is a page's own memory, with its map slot.
const pageBytes = int64(unsafe.Sizeof(detailPage{})) + 32

// slot returns id's slot in its page.
func slot(id int64) int { return int(id & (1<<pageBits - 1)) }

// lookup returns id's entry. Called with sh locked.
func (sh *detailShard) lookup(id int64) (detailEntry, bool) {
	if pg := sh.pages[id>>pageBits]; pg != nil {
		e := pg.e[slot(id)]
		return e, e.spec != nil
	}
	return detailEntry{}, false
}

// detailEntry is a cached detail.
type detailEntry struct {
	blob  detailBlob // the job, its attempts and its events
	rates []store.RateChange
	spec  *specRef
	bytes int64 // without the spec's
}

// specRef is the text of a spec some entries hold.
type specRef struct {
	json []byte
	hash string
	refs int
}

// DefaultDetailCacheBytes bounds the detail cache when Options leaves it
// unset: about 100,000 jobs of the usual size (two attempts, a few events).
const DefaultDetailCacheBytes = 256 << 20

func newDetailCache(capBytes int64) *detailCache {
	c := &detailCache{capBytes: max(capBytes, 0)}
	for i := range c.shards {
		c.shards[i].pages = map[int64]*detailPage{}
	}
	c.shared.specs = map[string]*specRef{}
	c.shared.rates = map[string][]store.RateChange{}
	return c
}

// on reports whether the cache answers and keeps details.
func (c *detailCache) on() bool { return c.capBytes > 0 && !c.off.Load() }

func (c *detailCache) shard(id int64) *detailShard {
	return &c.shards[uint64(id>>pageBits)%detailShards]
}

// lookupAll appends to buf the entries of ids, in their order, or returns
// false when one is not cached. The ids of a page that follow each other
// share one lock and one lookup of the page.
func (c *detailCache) lookupAll(ids []int64, buf []detailEntry) ([]detailEntry, bool) {
	var (
		sh   *detailShard
		pg   *detailPage
		page int64
	)
	for _, id := range ids {
		if sh == nil || id>>pageBits != page {
			if sh != nil {
				sh.mu.Unlock()
			}
			page, sh = id>>pageBits, c.shard(id)
			sh.mu.Lock()
			pg = sh.pages[page]
		}
		if pg == nil || pg.e[slot(id)].spec == nil {
			sh.mu.Unlock()
			return buf, false
		}
		buf = append(buf, pg.e[slot(id)])
	}
	if sh != nil {
		sh.mu.Unlock()
	}
	return buf, true
}

// get returns a copy of the cached detail of job id.
func (c *detailCache) get(id int64) (store.JobDetail, bool) {
	if !c.on() {
		return store.JobDetail{}, false
	}
	sh := c.shard(id)
	sh.mu.Lock()
	e, ok := sh.lookup(id)
	sh.mu.Unlock()
	if !ok {
		c.mis.Add(1)
		return store.JobDetail{}, false
	}
	c.hits.Add(1)
	d := store.JobDetail{Rates: slices.Clone(e.rates)}
	e.blob.job(&d.Job, true)
	d.Job.SpecJSON = e.spec.json
	d.Attempts, d.Events = e.blob.details()
	return d, true
}

// generation returns the count put compares with: note it before reading
// the database.
func (c *detailCache) generation(id int64) uint64 {
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.gen
}

// put caches d as job id's detail, read after generation returned gen,
// unless a forget has touched id's shard since. It keeps its own copy.
func (c *detailCache) put(id int64, gen uint64, d store.JobDetail) {
	if !c.on() {
		return
	}
	e := detailEntry{blob: encodeDetail(&d), rates: slices.Clone(d.Rates)}
	e.bytes = e.blob.bytes()
	if e.bytes+int64(len(d.Job.SpecJSON)) > min(c.capBytes/64, math.MaxInt32) {
		return // one huge job would push out many (and its offsets must fit an int32)
	}
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.gen != gen || c.off.Load() {
		return
	}
	c.share(&e, &d)
	pg := sh.pages[id>>pageBits]
	if pg == nil {
		pg = &detailPage{}
		sh.pages[id>>pageBits] = pg
		c.bytes.Add(pageBytes)
	}
	if old := &pg.e[slot(id)]; old.spec != nil {
		c.drop(old)
	} else {
		pg.n++
		sh.n++
	}
	pg.e[slot(id)] = e
	c.bytes.Add(e.bytes)
	for k, p := range sh.pages {
		if c.bytes.Load() <= c.capBytes {
			break
		}
		if k != id>>pageBits {
			c.dropPage(sh, k, p)
		}
	}
}

// dropPage drops page k of sh and every entry it holds. Called with sh
// locked.
func (c *detailCache) dropPage(sh *detailShard, k int64, pg *detailPage) {
	for i := range pg.e {
		if pg.e[i].spec != nil {
			c.drop(&pg.e[i])
		}
	}
	sh.n -= pg.n
	delete(sh.pages, k)
	c.bytes.Add(-pageBytes)
}

// share points e at the cache's copy of d's spec text and of its pool's
// rate history, when they are the same. Called with e's shard locked.
func (c *detailCache) share(e *detailEntry, d *store.JobDetail) {
	c.shared.Lock()
	defer c.shared.Unlock()
	ref := c.shared.specs[d.Job.SpecHash]
	if ref == nil || !bytes.Equal(ref.json, d.Job.SpecJSON) {
		ref = &specRef{json: d.Job.SpecJSON, hash: d.Job.SpecHash}
		if d.Job.SpecHash != "" {
			c.shared.specs[d.Job.SpecHash] = ref
		}
		c.bytes.Add(specBytes(ref))
	}
	ref.refs++
	e.spec = ref
	pool := d.Job.Pool
	if seen, ok := c.shared.rates[pool]; ok && slices.EqualFunc(seen, e.rates, sameRate) {
		e.rates = seen
	} else {
		c.shared.rates[pool] = e.rates
	}
}

func sameRate(a, b store.RateChange) bool {
	return a.Pool == b.Pool && a.From.Equal(b.From) && a.Rates == b.Rates
}

// drop releases what e holds. Called with e's shard locked.
func (c *detailCache) drop(e *detailEntry) {
	c.bytes.Add(-e.bytes)
	c.shared.Lock()
	defer c.shared.Unlock()
	if e.spec.refs--; e.spec.refs == 0 {
		c.bytes.Add(-specBytes(e.spec))
		if c.shared.specs[e.spec.hash] == e.spec {
			delete(c.shared.specs, e.spec.hash)
		}
	}
}

func specBytes(r *specRef) int64 { return int64(len(r.json)) + 96 } // with its map slot and header

// forget drops the entries of jobs ids (all of them when all is set) and
// counts a forget on every shard it touched.
func (c *detailCache) forget(ids map[int64]struct{}, all bool) {
	if all {
		for i := range c.shards {
			sh := &c.shards[i]
			sh.mu.Lock()
			sh.gen++
			for k, pg := range sh.pages {
				c.dropPage(sh, k, pg)
			}
			sh.mu.Unlock()
		}
		return
	}
	for id := range ids {
		sh := c.shard(id)
		sh.mu.Lock()
		sh.gen++
		if pg := sh.pages[id>>pageBits]; pg != nil && pg.e[slot(id)].spec != nil {
			c.drop(&pg.e[slot(id)])
			pg.e[slot(id)] = detailEntry{}
			pg.n--
			sh.n--
			if pg.n == 0 {
				c.dropPage(sh, id>>pageBits, pg)
			}
		}
		sh.mu.Unlock()
	}
}

// bytes is the memory an entry of x holds, its spec's text, the rate
// history it shares and its page's slot aside: the blob.
func (x detailBlob) bytes() int64 { return int64(len(x.b)) + 24 }

// JobDetail implements store.Jobs: from the detail cache, or read and
// cached.
func (s *Store) JobDetail(ctx context.Context, id int64) (store.JobDetail, error) {
	if err := s.checkOpen(); err != nil {
		return store.JobDetail{}, err
	}
	if d, ok := s.details.get(id); ok {
		return d, nil
	}
	gen := s.details.generation(id)
	d, err := s.Shared.JobDetail(ctx, id)
	if err != nil {
		return d, err
	}
	s.details.put(id, gen, d)
	return d, nil
}

// DetailCacheStats is what the detail cache did and holds.
type DetailCacheStats struct {
	Hits, Misses int64 // reads answered from memory, and from the database
	// CursorPages counts list pages after a cursor answered from memory
	// alone, without reading their ids from the database.
	CursorPages int64
	Entries     int   // jobs cached now
	Bytes       int64 // their estimated size
	// OtherWriter says another process wrote the database file, which
	// turned the cache off for good (noteOtherWriters).
	OtherWriter bool
}

// DetailCacheStats returns the detail cache's counts.
func (s *Store) DetailCacheStats() DetailCacheStats {
	c := s.details
	st := DetailCacheStats{Hits: c.hits.Load(), Misses: c.mis.Load(), CursorPages: c.belowPages.Load(), Bytes: c.bytes.Load(), OtherWriter: c.off.Load()}
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		st.Entries += sh.n
		sh.mu.Unlock()
	}
	return st
}

// writeNotes is what the writer's pre-update hook noted in the running
// batch: the jobs whose detail its rows belong to, or that every detail
// may have changed.
type writeNotes struct {
	jobs  map[int64]struct{}
	all   bool
	rates bool // the pools' rate history changed (rateCache)
}

// manyJobs is where noting stops and the batch forgets every detail
// instead (a rebuild that rewrites every job row, say).
const manyJobs = 4096

func (n *writeNotes) job(id int64) {
	if n.all {
		return
	}
	if len(n.jobs) >= manyJobs {
		n.all = true
		return
	}
	if n.jobs == nil {
		n.jobs = map[int64]struct{}{}
	}
	n.jobs[id] = struct{}{}
}

// The tables a job's detail reads, and the column of each that holds the
// job's id (-1: the row id). snapshots is not among them: a snapshot is
// stored once under its content's hash and never changes.
var detailTables = map[string]int{
	"jobs":       -1,
	"job_code":   -1,
	"attempts":   0,
	"events":     1,
	"pool_rates": -2, // any change may reprice every job of the pool: forget all
}

// hookWrites has the writer connection's pre-update hook note, for every
// row a statement is about to change, the job whose detail it belongs to.
func (w *writer) hookWrites(ctx context.Context) error {
	return w.conn.Raw(func(dc any) error {
		h, ok := dc.(interface {
			RegisterPreUpdateHook(msqlite.PreUpdateHookFn)
		})
		if !ok {
			return fmt.Errorf("the sqlite driver's connection (%T) has no pre-update hook", dc)
		}
		h.RegisterPreUpdateHook(w.noteRow)
		return nil
	})
}

// noteRow is the pre-update hook: it runs on the writer goroutine, inside
// the statement changing the row.
func (w *writer) noteRow(d msqlite.SQLitePreUpdateData) {
	col, ok := detailTables[d.TableName]
	if !ok || d.DatabaseName != "main" {
		return
	}
	n := &w.notes
	switch {
	case col == -2:
		n.all, n.rates = true, true
	case col == -1:
		if d.Op != sqlite3.SQLITE_INSERT {
			n.job(d.OldRowID)
		}
		if d.Op != sqlite3.SQLITE_DELETE {
			n.job(d.NewRowID)
		}
	default:
		vals := make([]any, col+1)
		note := func(read func(...any) error) {
			if err := read(vals...); err != nil {
				n.all = true // unknown job: forget them all
				return
			}
			if id, ok := vals[col].(int64); ok {
				n.job(id)
			} else {
				n.all = true
			}
		}
		if d.Op != sqlite3.SQLITE_INSERT {
			note(d.Old)
		}
		if d.Op != sqlite3.SQLITE_DELETE {
			note(d.New)
		}
	}
}

// forgetWritten drops the details of the jobs the batch that just ended
// wrote (committed or not: a rolled-back write only costs a miss).
func (s *Store) forgetWritten() {
	n := &s.w.notes
	if n.all {
		s.details.forget(nil, true)
	} else if len(n.jobs) > 0 {
		s.details.forget(n.jobs, false)
	}
	if n.rates {
		s.rates.forget()
	}
	n.all, n.rates = false, false
	clear(n.jobs)
}

// noteOtherWriters turns the caches off for good once another connection
// than this store's writer has committed to the database: the data
// version the writer connection reads moves only for others' commits.
// That breaks what they rest on (every write passes the hook), which the
// package's rule, one process per file, should have kept. It runs at the
// start of every write transaction, holding the write lock; what another
// process wrote since this store's last write may be missed until then.
func (s *Store) noteOtherWriters() error {
	var v int64
	if err := s.w.queryRow("PRAGMA data_version").Scan(&v); err != nil {
		return err
	}
	if v != s.w.dataVersion && !s.details.off.Load() {
		s.details.off.Store(true)
		s.details.forget(nil, true)
		s.rates.off.Store(true)
		s.rates.forget()
	}
	s.w.dataVersion = v
	return nil
}
