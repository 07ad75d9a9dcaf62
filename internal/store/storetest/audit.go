package storetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// auditTests are the subtests of the Audits contract; Exercise runs them with
// the others.
var auditTests = map[string]func(t *testing.T, s store.Store){
	"AuditAppendRoundTrip":           testAuditAppendRoundTrip,
	"AuditAppendRejectsBadRecords":   testAuditAppendRejects,
	"AuditWithCreateJob":             testAuditWithCreateJob,
	"AuditNotWrittenWhenChangeFails": testAuditNotWrittenWhenChangeFails,
	"AuditWithApply":                 testAuditWithApply,
	"AuditWithPoolsAndQuotas":        testAuditWithPools,
	"AuditBadRecordFailsTheChange":   testAuditBadRecordFailsChange,
	"AuditConcurrentNoGaps":          testAuditConcurrent,
	"AuditFilters":                   testAuditFilters,
}

// auditRec returns a record for tests; the store fills Seq, PrevHash, Hash.
func auditRec(n int, action, target string) domain.AuditRecord {
	return domain.AuditRecord{
		At: at(n), Actor: "user:alice", Action: action, Target: target,
		Before: `{"gpus":1}`, After: fmt.Sprintf(`{"gpus":%d}`, n), Result: domain.AuditOK,
		Detail: "", Client: "192.0.2.7",
	}
}

// auditLog returns the whole log.
func auditLog(t *testing.T, s store.Store) []domain.AuditRecord {
	t.Helper()
	recs, err := s.ListAudit(context.Background(), store.AuditFilter{})
	if err != nil {
		t.Fatalf("ListAudit: %v", err)
	}
	return recs
}

// ours drops the records of the test's own setup (setupAudit, e.g. from
// create), leaving those of the calls under test.
func ours(recs []domain.AuditRecord) []domain.AuditRecord {
	var out []domain.AuditRecord
	for _, r := range recs {
		if r.Action != setupAudit.Action {
			out = append(out, r)
		}
	}
	return out
}

// checkChain asserts the log is numbered 1..n without gaps and each record
// names its predecessor's hash. (Hash contents are checked by the audit
// package's tests against each backend.)
func checkChain(t *testing.T, recs []domain.AuditRecord) {
	t.Helper()
	prev := ""
	for i, r := range recs {
		if r.Seq != int64(i+1) {
			t.Fatalf("record at position %d has Seq %d, want %d (no gaps, from 1)", i, r.Seq, i+1)
		}
		if r.PrevHash != prev {
			t.Fatalf("record %d: PrevHash %q, want the previous record's hash %q", r.Seq, r.PrevHash, prev)
		}
		if !strings.HasPrefix(r.Hash, "sha256:") || len(r.Hash) != len("sha256:")+64 {
			t.Fatalf("record %d: Hash %q is not sha256:<64 hex digits>", r.Seq, r.Hash)
		}
		prev = r.Hash
	}
}

func testAuditAppendRoundTrip(t *testing.T, s store.Store) {
	ctx := context.Background()
	if recs := auditLog(t, s); len(recs) != 0 {
		t.Fatalf("a new store has %d audit records, want 0", len(recs))
	}
	in := []domain.AuditRecord{auditRec(1, "quota.write", "quota/p/standard"), auditRec(2, "job.cancel", "job/7")}
	in[1].Result, in[1].Detail, in[1].Before = domain.AuditDenied, "member may not cancel other users' jobs", ""
	in[1].At = at(2).In(time.FixedZone("CET", 3600))
	if err := s.AppendAudit(ctx, in...); err != nil {
		t.Fatalf("AppendAudit: %v", err)
	}
	if err := s.AppendAudit(ctx, auditRec(3, "pool.write", "pool/gpu")); err != nil {
		t.Fatalf("AppendAudit: %v", err)
	}
	got := auditLog(t, s)
	checkChain(t, got)
	if len(got) != 3 {
		t.Fatalf("ListAudit returned %d records, want 3", len(got))
	}
	for i, want := range append(in, auditRec(3, "pool.write", "pool/gpu")) {
		want.Seq, want.At, want.PrevHash, want.Hash = int64(i+1), want.At.UTC(), got[i].PrevHash, got[i].Hash
		if d := diff(want, got[i]); d != "" {
			t.Errorf("record %d does not read back as appended:%s", i+1, d)
		}
	}
	if err := s.AppendAudit(ctx); err != nil {
		t.Errorf("AppendAudit with no records: %v, want nil", err)
	}
}

func testAuditAppendRejects(t *testing.T, s store.Store) {
	ctx := context.Background()
	tests := map[string]func(r *domain.AuditRecord){
		"no actor":   func(r *domain.AuditRecord) { r.Actor = "" },
		"no action":  func(r *domain.AuditRecord) { r.Action = "" },
		"no result":  func(r *domain.AuditRecord) { r.Result = "" },
		"bad result": func(r *domain.AuditRecord) { r.Result = "maybe" },
	}
	for name, edit := range tests {
		r := auditRec(1, "quota.write", "quota/p/standard")
		edit(&r)
		err := s.AppendAudit(ctx, auditRec(1, "pool.write", "pool/a"), r)
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: AppendAudit = %v, want ErrInvalid", name, err)
		}
	}
	if recs := auditLog(t, s); len(recs) != 0 {
		t.Errorf("rejected appends left %d records, want 0 (all or nothing)", len(recs))
	}
}

func testAuditWithCreateJob(t *testing.T, s store.Store) {
	ctx := context.Background()
	create(t, s, newJob(t, testSpec("first", "p"), "alice", at(1))) // its record is the setup's
	rec := auditRec(2, "job.submit", "job/{id}")
	p := newJob(t, testSpec("second", "p"), "alice", at(2))
	p.IdempotencyKey = "k1"
	j, created, err := s.CreateJob(ctx, p, rec)
	if err != nil || !created {
		t.Fatalf("CreateJob with an audit record: created=%v, %v", created, err)
	}
	recs := auditLog(t, s)
	checkChain(t, recs)
	if recs = ours(recs); len(recs) != 1 {
		t.Fatalf("log has %d records, want 1", len(recs))
	}
	if want := "job/" + strconv.FormatInt(j.ID, 10); recs[0].Target != want {
		t.Errorf("Target = %q, want %q (the {id} placeholder filled with the new id)", recs[0].Target, want)
	}
	// An idempotent replay changes nothing and records nothing.
	if _, created, err := s.CreateJob(ctx, p, rec); err != nil || created {
		t.Fatalf("replay: created=%v, %v", created, err)
	}
	if recs := ours(auditLog(t, s)); len(recs) != 1 {
		t.Errorf("after an idempotent replay the log has %d records, want 1", len(recs))
	}
}

func testAuditNotWrittenWhenChangeFails(t *testing.T, s store.Store) {
	ctx := context.Background()
	first := create(t, s, newJob(t, testSpec("a", "p"), "alice", at(1)))
	submit := auditRec(2, "job.submit", "job/{id}")

	// CreateJob fails on an output directory clash: no job, no record.
	clash := newJob(t, testSpec("b", "p"), "alice", at(2))
	clash.OutputDir = func(int64) string { return first.OutputDir }
	if _, _, err := s.CreateJob(ctx, clash, submit); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("CreateJob with a used output dir = %v, want ErrConflict", err)
	}
	// DeleteQuota of a quota that does not exist.
	if err := s.DeleteQuota(ctx, "x", "y", auditRec(3, "quota.write", "quota/x/y")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteQuota of a missing quota = %v, want ErrNotFound", err)
	}
	// PutQuota in a pool that does not exist.
	q := domain.Quota{Project: "x", Pool: "missing", Guaranteed: domain.Limits{GPUs: 1}}
	if err := s.PutQuota(ctx, q, auditRec(4, "quota.write", "quota/x/missing")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("PutQuota in a missing pool = %v, want ErrNotFound", err)
	}
	// A canceled context: the write never runs.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := s.CreateJob(cctx, newJob(t, testSpec("c", "p"), "alice", at(5)), submit); err == nil {
		t.Fatal("CreateJob with a canceled context succeeded")
	}
	if recs := ours(auditLog(t, s)); len(recs) != 0 {
		t.Errorf("failed changes left %d audit records, want 0: %+v", len(recs), recs)
	}
	// The next successful change is record 1: failures leave no gap.
	if err := s.AppendAudit(ctx, auditRec(6, "pool.write", "pool/a")); err != nil {
		t.Fatal(err)
	}
	checkChain(t, auditLog(t, s))
}

func testAuditWithApply(t *testing.T, s store.Store) {
	ctx := context.Background()
	j := create(t, s, newJob(t, testSpec("a", "p"), "alice", at(1)))
	rec := auditRec(2, "job.cancel", "job/"+strconv.FormatInt(j.ID, 10))
	rec.Before, rec.After = `{"state":"queued"}`, `{"state":"canceled"}`
	cancelTo := func(from domain.JobState) store.Change {
		return store.Change{JobID: j.ID, Move: domain.MoveCancel().Only(from), Reason: domain.ReasonCanceledByUser,
			Actor: "user:alice", At: at(2), Audit: &rec}
	}

	// A guard that does not hold changes nothing: no record.
	errs, err := s.Apply(ctx, []store.Change{cancelTo(domain.JobRunning)})
	if err != nil || !errors.Is(errs[0], store.ErrConflict) {
		t.Fatalf("Apply with a failing guard = %v, %v; want ErrConflict in the slot", errs, err)
	}
	if recs := ours(auditLog(t, s)); len(recs) != 0 {
		t.Fatalf("an Apply that changed nothing wrote %d records", len(recs))
	}
	mustApply(t, s) // no changes: no-op
	errs, err = s.Apply(ctx, []store.Change{cancelTo(domain.JobQueued)})
	if err != nil || errs[0] != nil {
		t.Fatalf("Apply = %v, %v", errs, err)
	}
	recs := auditLog(t, s)
	checkChain(t, recs)
	if recs = ours(recs); len(recs) != 1 || recs[0].After != `{"state":"canceled"}` {
		t.Fatalf("log = %+v, want the cancel record", recs)
	}
}

func testAuditWithPools(t *testing.T, s store.Store) {
	ctx := context.Background()
	with := auditRec
	if _, err := s.PutPool(ctx, testPool("standard"), with(1, "pool.write", "pool/standard")); err != nil {
		t.Fatal(err)
	}
	if err := s.PutQuota(ctx, testQuota("p", "standard"), with(2, "quota.write", "quota/p/standard")); err != nil {
		t.Fatal(err)
	}
	if err := s.PutProject(ctx, domain.Project{Name: "p", Shares: 2, CreatedAt: at(3)}, with(3, "project.write", "project/p")); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteQuota(ctx, "p", "standard", with(4, "quota.write", "quota/p/standard")); err != nil {
		t.Fatal(err)
	}
	recs := auditLog(t, s)
	checkChain(t, recs)
	var targets []string
	for _, r := range recs {
		targets = append(targets, r.Target)
	}
	if got, want := strings.Join(targets, " "), "pool/standard quota/p/standard project/p quota/p/standard"; got != want {
		t.Errorf("targets = %s, want %s", got, want)
	}
}

func testAuditBadRecordFailsChange(t *testing.T, s store.Store) {
	bad := auditRec(1, "job.submit", "job/{id}")
	bad.Actor = ""
	_, _, err := s.CreateJob(context.Background(), newJob(t, testSpec("a", "p"), "alice", at(1)), bad)
	if !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("CreateJob with an invalid audit record = %v, want ErrInvalid", err)
	}
	jobs, err := s.ListJobs(context.Background(), store.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 0 || len(auditLog(t, s)) != 0 {
		t.Errorf("a change whose audit record was rejected left %d jobs and %d records; want neither", len(jobs), len(auditLog(t, s)))
	}
}

// testAuditConcurrent mixes audited creates that succeed, audited creates
// that fail, and standalone appends from many goroutines: the log must be
// numbered without gaps and hold exactly the successful ones.
func testAuditConcurrent(t *testing.T, s store.Store) {
	ctx := context.Background()
	blocker := create(t, s, newJob(t, testSpec("blocker", "p"), "alice", at(0)))
	const workers, each = 8, 15
	var wg sync.WaitGroup
	var mu sync.Mutex
	want := map[string]bool{}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				name := fmt.Sprintf("w%d-%d", w, i)
				rec := auditRec(i, "job.submit", "job/{id}")
				rec.Detail = name
				p := newJob(t, testSpec(name, "p"), "alice", at(i))
				switch i % 3 {
				case 0: // fails: output directory already used
					p.OutputDir = func(int64) string { return blocker.OutputDir }
					if _, _, err := s.CreateJob(ctx, p, rec); !errors.Is(err, store.ErrConflict) {
						t.Errorf("CreateJob %s = %v, want ErrConflict", name, err)
					}
				case 1:
					if _, _, err := s.CreateJob(ctx, p, rec); err != nil {
						t.Errorf("CreateJob %s: %v", name, err)
					}
					mu.Lock()
					want[name] = true
					mu.Unlock()
				case 2:
					rec.Action, rec.Result, rec.Target = "job.submit", domain.AuditDenied, ""
					if err := s.AppendAudit(ctx, rec); err != nil {
						t.Errorf("AppendAudit %s: %v", name, err)
					}
					mu.Lock()
					want[name] = true
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	recs := auditLog(t, s)
	checkChain(t, recs)
	recs = ours(recs)
	got := map[string]bool{}
	for _, r := range recs {
		got[r.Detail] = true
	}
	if len(recs) != len(want) || len(got) != len(want) {
		t.Fatalf("log has %d records (%d distinct), want %d", len(recs), len(got), len(want))
	}
	for name := range want {
		if !got[name] {
			t.Errorf("no record for %s", name)
		}
	}
}

func testAuditFilters(t *testing.T, s store.Store) {
	ctx := context.Background()
	recs := []domain.AuditRecord{
		auditRec(1, "job.submit", "job/1"),
		auditRec(2, "job.cancel", "job/1"),
		auditRec(3, "quota.write", "quota/vision/standard"),
		auditRec(4, "job.submit", "job/12"),
		auditRec(5, "job.submit", "jobs"),
		auditRec(6, "pool.write", "pool/gpu"),
	}
	recs[2].Actor, recs[5].Actor = "user:bob", "user:bob"
	if err := s.AppendAudit(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		f    store.AuditFilter
		want []int64
	}{
		"all":                   {store.AuditFilter{}, []int64{1, 2, 3, 4, 5, 6}},
		"actor":                 {store.AuditFilter{Actor: "user:bob"}, []int64{3, 6}},
		"action":                {store.AuditFilter{Action: "job.submit"}, []int64{1, 4, 5}},
		"target exact":          {store.AuditFilter{Target: "job/1"}, []int64{1, 2}},
		"target prefix":         {store.AuditFilter{Target: "job/"}, []int64{1, 2, 4}},
		"since":                 {store.AuditFilter{Since: at(4)}, []int64{4, 5, 6}},
		"since in another zone": {store.AuditFilter{Since: at(4).In(time.FixedZone("X", -7200))}, []int64{4, 5, 6}},
		"after seq":             {store.AuditFilter{AfterSeq: 4}, []int64{5, 6}},
		"limit":                 {store.AuditFilter{Limit: 2}, []int64{1, 2}},
		"page":                  {store.AuditFilter{AfterSeq: 2, Limit: 2}, []int64{3, 4}},
		"combined":              {store.AuditFilter{Action: "job.submit", Target: "job/", AfterSeq: 1}, []int64{4}},
		"nothing":               {store.AuditFilter{Actor: "user:nobody"}, nil},
	}
	for name, tc := range tests {
		got, err := s.ListAudit(ctx, tc.f)
		if err != nil {
			t.Errorf("%s: ListAudit: %v", name, err)
			continue
		}
		var seqs []int64
		for _, r := range got {
			seqs = append(seqs, r.Seq)
		}
		if fmt.Sprint(seqs) != fmt.Sprint(tc.want) {
			t.Errorf("%s: ListAudit(%+v) = %v, want %v", name, tc.f, seqs, tc.want)
		}
	}
	if _, err := s.ListAudit(ctx, store.AuditFilter{Limit: -1}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("ListAudit with a negative limit = %v, want ErrInvalid", err)
	}
}
