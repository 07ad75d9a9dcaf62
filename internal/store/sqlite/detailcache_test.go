package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/storetest"
)

// The conformance suite, on stores whose detail cache is filled with the
// detail of every job (up to checkedJobs of the newest) after every write
// batch, and checked against a fresh read of each after the next one:
// whatever a write changes, no cached detail may outlive it.
func TestConformanceWithFullDetailCache(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) store.Store {
		s := openTest(t)
		s.afterBatch = func() { checkCachedDetails(t, s) }
		return s
	})
}

const checkedJobs = 40

// checkCachedDetails compares the cached detail of each of the newest jobs
// with a fresh read, and leaves every one of them cached.
func checkCachedDetails(t *testing.T, s *Store) {
	ctx := context.Background()
	rows, err := s.readDB.QueryContext(ctx, `SELECT id FROM jobs ORDER BY id DESC LIMIT ?`, checkedJobs)
	if err != nil {
		t.Errorf("list job ids: %v", err)
		return
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Errorf("scan job id: %v", err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		cached, cerr := s.JobDetail(ctx, id)
		fresh, ferr := s.Shared.JobDetail(ctx, id)
		if errors.Is(cerr, store.ErrNotFound) && errors.Is(ferr, store.ErrNotFound) {
			continue
		}
		if cerr != nil || ferr != nil {
			t.Errorf("job %d: cached read: %v, fresh read: %v", id, cerr, ferr)
			continue
		}
		if !reflect.DeepEqual(cached, fresh) {
			t.Errorf("job %d: the cached detail outlived a write:\ncached %+v\nfresh  %+v", id, cached, fresh)
		}
	}
	// Lists and attempt times answered from the cache (every job of them
	// is cached now) are what the database answers.
	if len(ids) == 0 {
		return
	}
	for _, f := range []store.JobFilter{
		{Limit: 50}, {Limit: 3, BeforeID: ids[0]}, {Limit: 10, States: []domain.JobState{domain.JobQueued, domain.JobRunning}},
		{Limit: 10, States: []domain.JobState{domain.JobSucceeded}}, {Limit: 20, Project: "p"},
		{Limit: 20, Restrict: true, Projects: []string{"vision"}, Submitter: "alice"}, {Limit: 20, Restrict: true},
		// After a cursor: from the cache alone while every id below it is
		// cached, from the database past the newest checkedJobs.
		{Limit: 5, BeforeID: ids[len(ids)/2]}, {Limit: 50, BeforeID: ids[0] + 1},
		{Limit: 4, BeforeID: ids[0], States: []domain.JobState{domain.JobQueued}},
		{Limit: 4, BeforeID: ids[0], Restrict: true, Projects: []string{"p"}, Submitter: "alice"},
		{Limit: 10, Owner: "alice"}, {Limit: 10, Pool: "standard"}, {Limit: 10, NameContains: "JOB-"},
		{Limit: 4, BeforeID: ids[0], Owner: "alice", Pool: "standard", NameContains: "1"},
	} {
		cached, cerr := s.ListJobs(ctx, f)
		fresh, ferr := s.Shared.ListJobs(ctx, f)
		if cerr != nil || ferr != nil || !reflect.DeepEqual(cached, fresh) {
			t.Errorf("ListJobs(%+v): from the cache %+v, %v;\nfrom the database %+v, %v", f, cached, cerr, fresh, ferr)
		}
	}
	for _, pools := range [][]string{nil, {"standard"}, {"standard", "gpu", "none"}} {
		cached, cerr := s.RateHistory(ctx, pools...)
		fresh, ferr := s.Shared.RateHistory(ctx, pools...)
		if cerr != nil || ferr != nil || !reflect.DeepEqual(cached, fresh) {
			t.Errorf("RateHistory(%q): from memory %+v, %v;\nfrom the database %+v, %v", pools, cached, cerr, fresh, ferr)
		}
	}
	cached, cerr := s.AttemptTimes(ctx, ids)
	fresh, ferr := s.Shared.AttemptTimes(ctx, ids)
	if cerr != nil || ferr != nil || !reflect.DeepEqual(cached, fresh) {
		t.Errorf("AttemptTimes: from the cache %+v, %v;\nfrom the database %+v, %v", cached, cerr, fresh, ferr)
	}
}

// Readers that fill the cache race writers that change the same jobs: a
// write that returned is always seen by the next read of its writer, and
// a read that began before it never leaves its stale answer behind.
func TestDetailCacheReadsYourWrites(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	const jobs, writes = 4, 150
	ids := createJobs(t, s, "race", jobs)
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for r := range 3 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for n := r; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.JobDetail(ctx, ids[n%jobs]); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	var writers sync.WaitGroup
	for _, id := range ids {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for n := range writes {
				msg := fmt.Sprintf("note %d", n)
				errs, err := s.Apply(ctx, []store.Change{{JobID: id, In: []domain.JobState{domain.JobQueued},
					SetReason: true, Reason: domain.ReasonQuotaExceeded, Message: msg, Actor: "test", At: t0}})
				if err == nil {
					err = errs[0]
				}
				if err != nil {
					t.Error(err)
					return
				}
				d, err := s.JobDetail(ctx, id)
				if err != nil || d.Job.Message != msg {
					t.Errorf("job %d after writing %q: read %q, %v", id, msg, d.Job.Message, err)
					return
				}
			}
		}()
	}
	writers.Wait()
	close(stop)
	readers.Wait()
	// What the cache holds at the end is what the database holds.
	for _, id := range ids {
		cached, _ := s.JobDetail(ctx, id)
		fresh, err := s.Shared.JobDetail(ctx, id)
		if err != nil || !reflect.DeepEqual(cached, fresh) {
			t.Errorf("job %d: cached %q, stored %q (%v)", id, cached.Job.Message, fresh.Job.Message, err)
		}
	}
	if s.DetailCacheStats().Hits == 0 {
		t.Error("no read was answered from the cache: the test exercised nothing")
	}
}

// A store opened with the cache off reads every detail from the database.
func TestDetailCacheOff(t *testing.T) {
	s, err := OpenWith(context.Background(), filepath.Join(t.TempDir(), "db"), Options{DetailCacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	j, _, err := s.CreateJob(ctx, testNewJob(t, "off"), testAudit)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s.JobDetail(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.DetailCacheStats(); st.Hits != 0 || st.Entries != 0 {
		t.Fatalf("with the cache off: %+v", st)
	}
}

// The cache stays within its bound, dropping entries as it fills, and
// counts a spec shared by many entries once.
func TestDetailCacheBound(t *testing.T) {
	c := newDetailCache(1 << 20)
	d := store.JobDetail{Job: domain.Job{Name: "x", SpecHash: "sha256:1", SpecJSON: make([]byte, 4096)}}
	per := encodeDetail(&d).bytes()
	for id := range int64(10_000) {
		c.put(id, c.generation(id), d)
	}
	n, pages := 0, 0
	for i := range c.shards {
		n += c.shards[i].n
		pages += len(c.shards[i].pages)
	}
	if got := c.bytes.Load(); got > c.capBytes {
		t.Errorf("the cache holds %d bytes, over its %d", got, c.capBytes)
	}
	if want := int64(n)*per + int64(pages)*pageBytes + specBytes(&specRef{json: d.Job.SpecJSON}); c.bytes.Load() != want {
		t.Errorf("the cache counts %d bytes for %d entries of %d, %d pages and one spec, want %d", c.bytes.Load(), n, per, pages, want)
	}
	if n == 0 || n == 10_000 {
		t.Errorf("%d of 10000 entries kept: want some, not all", n)
	}
	// Forgetting every entry releases the spec too.
	c.forget(nil, true)
	if got := c.bytes.Load(); got != 0 || len(c.shared.specs) != 0 {
		t.Errorf("after forgetting all: %d bytes, %d specs", got, len(c.shared.specs))
	}
	// A put that read before a forget is refused.
	gen := c.generation(1)
	c.forget(map[int64]struct{}{1: {}}, false)
	c.put(1, gen, d)
	if _, ok := c.get(1); ok {
		t.Error("a detail read before a forget was cached after it")
	}
}

// Entries live in pages of consecutive ids: forgetting one keeps its
// neighbours, and forgetting a page's last entry releases the page.
func TestDetailCachePages(t *testing.T) {
	c := newDetailCache(1 << 30)
	d := store.JobDetail{Job: domain.Job{Name: "x", SpecHash: "sha256:1", SpecJSON: []byte("{}")}}
	for id := int64(1); id <= 130; id++ { // pages 0, 1 and 2
		d.Job.ID = id
		c.put(id, c.generation(id), d)
	}
	c.forget(map[int64]struct{}{64: {}}, false)
	if _, ok := c.get(64); ok {
		t.Error("job 64 is still cached after its forget")
	}
	for _, id := range []int64{63, 65, 127, 128} {
		if got, ok := c.get(id); !ok || got.Job.ID != id {
			t.Errorf("job %d: cached %v with id %d after its neighbour's forget", id, ok, got.Job.ID)
		}
	}
	if es, ok := c.lookupAll([]int64{66, 65, 64, 63}, nil); ok {
		t.Errorf("lookupAll over a forgotten job answered %d entries", len(es))
	}
	if es, ok := c.lookupAll([]int64{66, 65, 63, 62}, nil); !ok || len(es) != 4 {
		t.Errorf("lookupAll of cached jobs across two pages: %d entries, %v", len(es), ok)
	}
	forget := map[int64]struct{}{}
	for id := int64(1); id <= 130; id++ {
		forget[id] = struct{}{}
	}
	c.forget(forget, false)
	pages := 0
	for i := range c.shards {
		pages += len(c.shards[i].pages)
	}
	if c.bytes.Load() != 0 || pages != 0 || len(c.shared.specs) != 0 {
		t.Errorf("after forgetting every job: %d bytes, %d pages, %d specs held", c.bytes.Load(), pages, len(c.shared.specs))
	}
}

// An entry gives back every field a detail read fills (all but the
// job's parsed spec), nil slices as nil and empty ones as empty.
func TestDetailBlobRoundTrip(t *testing.T) {
	n := 0
	// fill sets every field of v to a value of its own, with text that
	// needs the length's second byte now and then.
	var fill func(v reflect.Value)
	fill = func(v reflect.Value) {
		n++
		switch v.Kind() {
		case reflect.String:
			v.SetString("s" + strconv.Itoa(n) + strings.Repeat("é", n%3*40))
		case reflect.Int, reflect.Int64:
			v.SetInt(int64(n*n) * int64(1-2*(n%2))) // negative too
		case reflect.Uint8:
			v.SetUint(uint64(n))
		case reflect.Float64:
			v.SetFloat(float64(n) + 0.25)
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Slice:
			v.Set(reflect.MakeSlice(v.Type(), n%3+1, n%3+1))
			for i := range v.Len() {
				fill(v.Index(i))
			}
		case reflect.Pointer:
			v.Set(reflect.New(v.Type().Elem()))
			fill(v.Elem())
		case reflect.Struct:
			if x, ok := v.Addr().Interface().(*time.Time); ok {
				*x = time.Unix(0, int64(n)*1_000_000_007).UTC() // as a read makes it
				return
			}
			for i := range v.NumField() {
				if v.Type() == reflect.TypeFor[domain.Job]() && v.Type().Field(i).Name == "Spec" {
					continue
				}
				fill(v.Field(i))
			}
		default:
			t.Fatalf("%s: set a value of kind %s here", v.Type(), v.Kind())
		}
	}
	var full store.JobDetail
	fill(reflect.ValueOf(&full.Job).Elem())
	full.Attempts = make([]domain.Attempt, 2)
	full.Events = make([]domain.Event, 3)
	for i := range full.Attempts {
		fill(reflect.ValueOf(&full.Attempts[i]).Elem())
	}
	for i := range full.Events {
		fill(reflect.ValueOf(&full.Events[i]).Elem())
	}
	full.Attempts[1].GPUs = []int{}
	full.Attempts = append(full.Attempts, domain.Attempt{Number: 3, State: domain.AttemptStarting}) // not started
	for name, d := range map[string]store.JobDetail{
		"full":  full,
		"empty": {Attempts: []domain.Attempt{}, Events: []domain.Event{}},
		"nil":   {Job: domain.Job{ID: 1, State: domain.JobQueued}},
	} {
		blob := encodeDetail(&d)
		var got store.JobDetail
		got.Job.SpecJSON = d.Job.SpecJSON
		blob.job(&got.Job, true)
		got.Attempts, got.Events = blob.details()
		if !reflect.DeepEqual(got, d) {
			t.Fatalf("%s: a detail through the cache:\n got %+v\nwant %+v", name, got, d)
		}
		var row domain.Job
		blob.job(&row, false)
		want := d.Job
		want.Code, want.SpecJSON = nil, nil
		if !reflect.DeepEqual(row, want) {
			t.Fatalf("%s: a list row through the cache:\n got %+v\nwant %+v", name, row, want)
		}
		var started []store.AttemptTime // of the attempts that started
		for _, a := range d.Attempts {
			if !a.StartedAt.IsZero() {
				started = append(started, store.AttemptTime{JobID: 9, Attempt: a.Number, StartedAt: a.StartedAt, FinishedAt: a.FinishedAt})
			}
		}
		if got := blob.appendAttemptTimes(nil, 9); !reflect.DeepEqual(got, started) {
			t.Fatalf("%s: attempt times %+v, want %+v", name, got, started)
		}
	}
}

// createJobs creates n jobs named prefix-0… and returns their ids.
func createJobs(t *testing.T, s *Store, prefix string, n int) []int64 {
	t.Helper()
	ids := make([]int64, n)
	for i := range ids {
		j, _, err := s.CreateJob(context.Background(), testNewJob(t, fmt.Sprintf("%s-%d", prefix, i)), testAudit)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = j.ID
	}
	return ids
}

var testAudit = domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}

// Lists by state race jobs moving between states: every job a page
// returns is in a state the filter asked for, whether the page came from
// the cache or from the database.
func TestCachedListsKeepTheirFilter(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	const jobs, moves = 8, 60
	ids := createJobs(t, s, "flip", jobs)
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for _, st := range []domain.JobState{domain.JobQueued, domain.JobHeld} {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Fill the cache, so pages come from it.
				for _, id := range ids {
					if _, err := s.JobDetail(ctx, id); err != nil {
						t.Error(err)
						return
					}
				}
				page, err := s.ListJobs(ctx, store.JobFilter{States: []domain.JobState{st}, Limit: jobs})
				if err != nil {
					t.Error(err)
					return
				}
				for _, j := range page {
					if j.State != st {
						t.Errorf("a list of %s jobs returned job %d, %s", st, j.ID, j.State)
						return
					}
				}
			}
		}()
	}
	for n := range moves {
		var changes []store.Change
		for _, id := range ids {
			mv := domain.MoveHold()
			if n%2 == 1 {
				mv = domain.MoveRelease()
			}
			changes = append(changes, store.Change{JobID: id, Move: mv, Actor: "test", At: t0})
		}
		errs, err := s.Apply(ctx, changes)
		if err == nil {
			err = errors.Join(errs...)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	readers.Wait()
	if s.DetailCacheStats().Hits == 0 {
		t.Error("no read was answered from the cache: the test exercised nothing")
	}
}

// A second store on the file stands for another process writing it: the
// first store's next write notices, and its caches stay off from then on.
func TestOtherWriterTurnsTheCacheOff(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trainyard.db")
	a, b := openAt(t, path), openAt(t, path)
	ctx := context.Background()
	j, _, err := a.CreateJob(ctx, testNewJob(t, "shared"), testAudit)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.JobDetail(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	note := func(s *Store, msg string) {
		t.Helper()
		errs, err := s.Apply(ctx, []store.Change{{JobID: j.ID, In: []domain.JobState{domain.JobQueued},
			SetReason: true, Reason: domain.ReasonQuotaExceeded, Message: msg, Actor: "test", At: t0}})
		if err == nil {
			err = errors.Join(errs...)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	note(a, "from a")
	if st := a.DetailCacheStats(); st.OtherWriter {
		t.Fatalf("its own writes turned the cache off: %+v", st)
	}
	if _, err := a.JobDetail(ctx, j.ID); err != nil { // cached again
		t.Fatal(err)
	}
	note(b, "from b")
	if _, _, err := a.CreateJob(ctx, testNewJob(t, "next"), testAudit); err != nil {
		t.Fatal(err)
	}
	if st := a.DetailCacheStats(); !st.OtherWriter || st.Entries != 0 {
		t.Fatalf("after another store wrote: %+v", st)
	}
	d, err := a.JobDetail(ctx, j.ID)
	if err != nil || d.Job.Message != "from b" {
		t.Fatalf("after another store wrote: message %q, %v", d.Job.Message, err)
	}
}

// BenchmarkDetailBlobRow decodes a list row and its attempts' times from a
// cached detail shaped like a finished job's, as a list page does per job.
func BenchmarkDetailBlobRow(b *testing.B) {
	at := time.Date(2026, 12, 4, 10, 0, 0, 123456789, time.UTC)
	fin := at.Add(time.Hour)
	d := store.JobDetail{
		Job: domain.Job{ID: 123456, Name: "train-resnet50", Project: "vision", Pool: "default", State: domain.JobSucceeded,
			Priority: domain.Priority("normal"), Submitter: "alice", SubmittedAt: at, UpdatedAt: fin, StartedAt: at, FinishedAt: fin,
			Resources: domain.Resources{GPUs: 8, CPUs: 32, Memory: 256 << 30, Nodes: 1}, SpecHash: strings.Repeat("ab", 32),
			OutputDir: "/data/artifacts/vision/train-resnet50/123456", Attempts: 1, Timeout: domain.Duration(24 * time.Hour)},
		Attempts: []domain.Attempt{{JobID: 123456, Number: 1, State: domain.AttemptSucceeded, Node: "n1", CreatedAt: at, StartedAt: at, FinishedAt: fin}},
	}
	for i := range 5 {
		d.Events = append(d.Events, domain.Event{ID: int64(i + 1), JobID: 123456, Attempt: 1, At: at.Add(time.Duration(i) * time.Minute), From: domain.JobQueued, To: domain.JobRunning, Actor: "system:executor"})
	}
	blob := encodeDetail(&d)
	var j domain.Job
	times := make([]store.AttemptTime, 0, 4)
	for b.Loop() {
		blob.job(&j, false)
		times = blob.appendAttemptTimes(times[:0], j.ID)
	}
	if j.Name != d.Job.Name || len(times) != 1 {
		b.Fatalf("decoded %q with %d attempt times", j.Name, len(times))
	}
	b.ReportMetric(float64(len(blob.b)), "blob-bytes")
}

// A page after a cursor comes from the cache alone when every id below the
// cursor is cached down to a full page, and from the database otherwise:
// the same page either way, a changed job's new state included.
func TestCursorPagesFromTheCache(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	ids := createJobs(t, s, "page", 12)
	list := func(f store.JobFilter) []domain.Job {
		t.Helper()
		got, err := s.ListJobs(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		want, err := s.Shared.ListJobs(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("ListJobs(%+v):\n got %+v\nwant %+v", f, got, want)
		}
		return got
	}
	pages := func() int64 { return s.DetailCacheStats().CursorPages }
	below := store.JobFilter{Limit: 4, BeforeID: ids[10]} // ids[9] down to ids[6]
	list(below)
	if pages() != 0 {
		t.Fatal("a page of jobs never read came from the cache")
	}
	for _, id := range ids[5:10] {
		if _, err := s.JobDetail(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if got := list(below); len(got) != 4 || got[0].ID != ids[9] || pages() != 1 {
		t.Fatalf("a page of cached jobs: %d jobs from %d, %d pages from the cache; want 4 from %d, 1", len(got), got[0].ID, pages(), ids[9])
	}
	// The last page ends at the first job: every id below the cursor must
	// be cached for the cache to know that.
	last := store.JobFilter{Limit: 50, BeforeID: ids[10]}
	list(last)
	if pages() != 1 {
		t.Fatal("a page reaching jobs never read came from the cache")
	}
	for _, id := range ids[:5] {
		if _, err := s.JobDetail(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if got := list(last); len(got) != 10 || pages() != 2 {
		t.Fatalf("the last page: %d jobs, %d pages from the cache; want 10, 2", len(got), pages())
	}
	// A write forgets its job: the page goes to the database and shows
	// the change; read again, the job is cached and the page comes back.
	errs, err := s.Apply(ctx, []store.Change{{JobID: ids[7], Move: domain.MoveHold(), Actor: "test", At: t0}})
	if err == nil {
		err = errors.Join(errs...)
	}
	if err != nil {
		t.Fatal(err)
	}
	held := store.JobFilter{Limit: 3, BeforeID: ids[10], States: []domain.JobState{domain.JobHeld}}
	if got := list(held); len(got) != 1 || got[0].ID != ids[7] || pages() != 2 {
		t.Fatalf("held jobs after a hold: %+v, %d pages from the cache; want job %d from the database", got, pages(), ids[7])
	}
	if _, err := s.JobDetail(ctx, ids[7]); err != nil {
		t.Fatal(err)
	}
	if got := list(held); len(got) != 1 || got[0].ID != ids[7] || pages() != 3 {
		t.Fatalf("held jobs, all cached: %+v, %d pages from the cache; want job %d from the cache", got, pages(), ids[7])
	}
	// A filter most jobs fail is the database's: eleven ids to scan for a
	// page of two is past the bound (four a row).
	if got := list(store.JobFilter{Limit: 2, BeforeID: ids[11], States: []domain.JobState{domain.JobRunning}}); len(got) != 0 || pages() != 3 {
		t.Fatalf("running jobs: %+v, %d pages from the cache; want none, from the database", got, pages())
	}
}

// A page lent to ListJobs (JobFilter.Into) that holds another page's rows
// comes back holding exactly the rows a fresh page would: every field a
// list row carries is decoded over what the last rows left, from both
// cached paths (ids read from the database, and ids below a cursor).
func TestListIntoALentPage(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	ids := createJobs(t, s, "lent", 10)
	// Jobs of odd and even ids differ in every field a change can set, and
	// a row of one page lies over a row of the other parity.
	var changes []store.Change
	for _, id := range ids {
		if id%2 == 1 {
			changes = append(changes, store.Change{JobID: id, Move: domain.MoveHold(), SetReason: true,
				Reason: domain.ReasonQuotaExceeded, Message: "held for a test", Actor: "test", At: t0.Add(time.Minute)})
		}
	}
	if errs, err := s.Apply(ctx, changes); err != nil || errors.Join(errs...) != nil {
		t.Fatal(err, errs)
	}
	for _, id := range ids {
		if _, err := s.JobDetail(ctx, id); err != nil { // into the cache
			t.Fatal(err)
		}
	}
	hits := s.DetailCacheStats().Hits
	// Each page is listed into one lent holding rows of the other parity
	// at each index.
	for _, c := range []struct{ f, other store.JobFilter }{
		{store.JobFilter{Limit: 5}, store.JobFilter{Limit: 5, BeforeID: ids[5]}},                   // ids from the database
		{store.JobFilter{Limit: 5, BeforeID: ids[5]}, store.JobFilter{Limit: 5}},                   // below a cursor: the cache alone
		{store.JobFilter{Limit: 4, BeforeID: ids[9]}, store.JobFilter{Limit: 5, BeforeID: ids[8]}}, // another cursor
	} {
		f := c.f
		want, err := s.ListJobs(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		lent, err := s.ListJobs(ctx, c.other)
		if err != nil {
			t.Fatal(err)
		}
		if len(lent) != 5 || len(want) == 0 || want[0].ID%2 == lent[0].ID%2 {
			t.Fatalf("%+v: the lent page holds %d rows, from job %d: not the other parity", f, len(lent), lent[0].ID)
		}
		f.Into = lent[:0:5]
		got, err := s.ListJobs(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 || &got[0] != &lent[:1][0] {
			t.Fatalf("%+v: the page was not decoded into the lent one", f)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%+v: into a lent page:\n got %+v\nwant %+v", f, got, want)
		}
	}
	if s.DetailCacheStats().Hits == hits {
		t.Error("no list was answered from the cache: the test exercised nothing")
	}
}
