package sqlite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// Creates that share transactions read the repeats SameSpecJobs would
// have read just before each: the jobs of the same submitter and spec
// among the submitter's newest DuplicateScan, as the window moves past
// old jobs of a spec and other writes come between.
func TestCreateJobLookingSharedTransactions(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	input := func(submitter, spec string) store.NewJob {
		p := testNewJob(t, spec)
		p.Submitter, p.Actor = submitter, "user:"+submitter
		return p
	}
	rec := domain.AuditRecord{Actor: "user:test", Action: "job.submit", Target: "job:{id}", Result: domain.AuditOK}
	// alice's oldest jobs are of s2, which the window leaves behind.
	for i := range store.DuplicateScan - 5 {
		spec := "s0"
		if i < 20 {
			spec = "s2"
		}
		if _, _, err := s.CreateJob(ctx, input("alice", spec), rec); err != nil {
			t.Fatal(err)
		}
	}
	since := time.Unix(0, 0)
	var (
		mu      sync.Mutex
		results []lookResult
		wg      sync.WaitGroup
	)
	for g := range 24 {
		wg.Go(func() {
			for i := range 10 {
				if (g+i)%7 == 0 { // another write between creates
					if err := s.AppendAudit(ctx, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); err != nil {
						t.Error(err)
						return
					}
				}
				submitter := []string{"alice", "alice", "bob"}[(g+i)%3]
				spec := []string{"s0", "s1", "s2", "s0"}[(g*3+i)%4]
				j, created, rep, err := s.CreateJobLooking(ctx, input(submitter, spec), rec, since)
				if err != nil || !created || rep.Err != nil {
					t.Errorf("create: created=%v, %v, look: %v", created, err, rep.Err)
					return
				}
				mu.Lock()
				results = append(results, lookResult{j, rep})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	checkRepeats(t, s, results)
	if n := s.batched.Load() - s.batches.Load(); n == 0 {
		t.Log("no creates shared a transaction")
	}
}

// lookResult is what a CreateJobLooking returned.
type lookResult struct {
	job domain.Job
	rep store.Repeats
}

// checkRepeats checks each result against what SameSpecJobs would have
// read just before its job: the submitter's newest DuplicateScan earlier
// jobs, those of its spec, newest first.
func checkRepeats(t *testing.T, s *Store, results []lookResult) {
	t.Helper()
	ctx := context.Background()
	all, err := s.ListJobs(ctx, store.JobFilter{Limit: 10000, Ascending: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		var window []domain.Job
		for _, j := range slices.Backward(all) {
			if j.ID < r.job.ID && j.Submitter == r.job.Submitter && len(window) < store.DuplicateScan {
				window = append(window, j)
			}
		}
		var want []int64
		for _, j := range window {
			if j.SpecHash == r.job.SpecHash {
				want = append(want, j.ID)
			}
		}
		more := len(want) > store.DuplicateShown
		want = want[:min(len(want), store.DuplicateShown)]
		var got []int64
		for _, j := range r.rep.Jobs {
			got = append(got, j.ID)
		}
		if fmt.Sprint(got, r.rep.More) != fmt.Sprint(want, more) {
			t.Errorf("job %d (%s, %s) read repeats %v (more %v), want %v (more %v)",
				r.job.ID, r.job.Submitter, r.job.Name, got, r.rep.More, want, more)
		}
	}
}

// The creates of one transaction, in a known order, as the submitter's
// window moves over its oldest jobs of a spec: each reads what
// SameSpecJobs would have read just before it, also after another write
// came between. alice has fewer than DuplicateScan jobs when the writer
// first reads her window, or as many.
func TestCreateJobLookingOneTransaction(t *testing.T) {
	for name, seed := range map[string][]string{
		"fewer":  slices.Concat(slices.Repeat([]string{"s2"}, 4), slices.Repeat([]string{"s0"}, store.DuplicateScan-6)),
		"enough": slices.Concat([]string{"s0"}, slices.Repeat([]string{"s2"}, 3), slices.Repeat([]string{"s0"}, store.DuplicateScan-3)),
	} {
		t.Run(name, func(t *testing.T) { testLookingOneTransaction(t, seed) })
	}
}

// Creates of one transaction that read their repeats from the jobs the
// transaction created: the newest of a spec stop counting once the
// submitter created DuplicateScan jobs after them.
func TestCreateJobLookingRemembered(t *testing.T) {
	specs := slices.Concat(slices.Repeat([]string{"s1", "s0"}, store.DuplicateShown+2),
		slices.Repeat([]string{"s0"}, store.DuplicateScan-store.DuplicateShown-4),
		slices.Repeat([]string{"s1"}, store.DuplicateShown+2))
	testLookingOneTransaction(t, nil, specs...)
}

// testLookingOneTransaction creates alice's jobs of the seed specs, then
// creates more in one transaction and checks what each read: of specs,
// or by default 24 alternating between two specs with another write
// between.
func testLookingOneTransaction(t *testing.T, seed []string, specs ...string) {
	s := openTest(t)
	ctx := context.Background()
	input := func(spec string) store.NewJob {
		p := testNewJob(t, spec)
		p.Submitter, p.Actor = "alice", "user:alice"
		return p
	}
	rec := domain.AuditRecord{Actor: "user:test", Action: "job.submit", Target: "job:{id}", Result: domain.AuditOK}
	for _, spec := range seed {
		if _, _, err := s.CreateJob(ctx, input(spec), rec); err != nil {
			t.Fatal(err)
		}
	}
	// Hold the writer while the requests queue, in order.
	started, release := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- s.write(ctx, func(*writer) error { close(started); <-release; return nil })
	}()
	<-started
	batches := s.batches.Load()
	n, between := len(specs), -1
	if n == 0 {
		n, between = 24, 12
	}
	results := make([]lookResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		queued := len(s.reqs)
		wg.Go(func() {
			if i == between { // another write: nothing known stays
				errs[i] = s.AppendAudit(ctx, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK})
				return
			}
			spec := []string{"s2", "s1"}[i%2]
			if len(specs) > 0 {
				spec = specs[i]
			}
			j, created, rep, err := s.CreateJobLooking(ctx, input(spec), rec, time.Unix(0, 0))
			if err == nil && (!created || rep.Err != nil) {
				err = fmt.Errorf("created=%v, look: %v", created, rep.Err)
			}
			results[i], errs[i] = lookResult{j, rep}, err
		})
		for deadline := time.Now().Add(10 * time.Second); len(s.reqs) == queued; {
			if time.Now().After(deadline) {
				t.Fatal("request did not queue")
			}
			time.Sleep(time.Millisecond)
		}
	}
	close(release)
	wg.Wait()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got := s.batches.Load() - batches; got != 2 {
		t.Fatalf("%d transactions, want 2: the held one and the queued requests'", got)
	}
	if between >= 0 {
		results = slices.Delete(results, between, between+1)
	}
	checkRepeats(t, s, results)
}

// Creates in transactions of their own, and in one whose first run rolls
// back, read the repeats SameSpecJobs would have read just before each,
// from what the writer remembers of earlier transactions' creates, as
// the submitter's window moves past them.
func TestCreateJobLookingAcrossTransactions(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	rec := domain.AuditRecord{Actor: "user:test", Action: "job.submit", Target: "job:{id}", Result: domain.AuditOK}
	since := time.Unix(0, 0)
	var results []lookResult
	create := func(spec string) {
		t.Helper()
		p := testNewJob(t, spec)
		p.Submitter, p.Actor = "alice", "user:alice"
		j, created, rep, err := s.CreateJobLooking(ctx, p, rec, since)
		if err != nil || !created || rep.Err != nil {
			t.Fatalf("create: created=%v, %v, look: %v", created, err, rep.Err)
		}
		results = append(results, lookResult{j, rep})
	}
	for range store.DuplicateShown + 3 {
		create("s1")
	}
	// A batch whose first run rolls back: two of its creates want one
	// output directory.
	release := blockWriter(t, s)
	type result struct {
		r   lookResult
		err error
	}
	batch := make(chan result, 6)
	for i := range cap(batch) {
		go func() {
			p := testNewJob(t, "s1")
			p.Submitter, p.Actor = "alice", "user:alice"
			if i == 2 || i == 4 {
				p.OutputDir = func(int64) string { return "/artifacts/same" }
			}
			j, _, rep, err := s.CreateJobLooking(ctx, p, rec, since)
			batch <- result{lookResult{j, rep}, err}
		}()
		waitQueued(t, s, i+1)
	}
	release()
	failed := 0
	for range cap(batch) {
		r := <-batch
		if r.err != nil {
			failed++
			continue
		}
		results = append(results, r.r)
	}
	if failed != 1 {
		t.Fatalf("%d creates of the batch failed, want 1", failed)
	}
	for range 2 {
		create("s1")
	}
	// Then the window moves past the remembered jobs of s1: the last
	// looks read the oldest of them just as it leaves.
	for range store.DuplicateScan - store.DuplicateShown {
		create("s0")
	}
	for range store.DuplicateShown + 2 {
		create("s1")
	}
	checkRepeats(t, s, results)
}
