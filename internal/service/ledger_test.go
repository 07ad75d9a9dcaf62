package service_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
)

// ledgerEnv is a service on a fresh store with pool gpu priced at 2.00
// per GPU-hour at costT0 through the service (audited, as `pool update`
// does), and a way to run one-GPU attempts of project vision.
type ledgerEnv struct {
	t     testing.TB
	svc   *service.Service
	raw   store.Store
	clk   *clock.Fake
	admin service.Principal
}

func newLedgerEnv(t testing.TB) *ledgerEnv {
	t.Helper()
	ctx := context.Background()
	raw, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	e := &ledgerEnv{t: t, raw: raw, clk: clock.NewFake(costT0), admin: service.Principal{Subject: "admin", Role: "admin"}}
	e.svc = service.New(service.Config{Store: raw, Clock: e.clk})
	e.price("2.00")
	return e
}

// price sets pool gpu's GPU-hour rate now.
func (e *ledgerEnv) price(gpuHour string) {
	e.t.Helper()
	p := domain.Pool{Name: "gpu", Nodes: []domain.Node{{Name: "g1", CPUs: 64, Memory: 512 << 30, GPUs: []int{0, 1, 2, 3}}},
		Rates: domain.Rates{GPUHour: mustMoney(e.t, gpuHour)}}
	if _, _, err := e.svc.Pools.PutPool(context.Background(), e.admin, p); err != nil {
		e.t.Fatal(err)
	}
}

// job creates a one-GPU job whose attempt 1 starts now.
func (e *ledgerEnv) job(name string) domain.Job {
	e.t.Helper()
	ctx := context.Background()
	spec := domain.Spec{Name: name, Project: "vision", Pool: "gpu", Entrypoint: []string{"true"}, Resources: domain.Resources{GPUs: 1, Nodes: 1}}
	b, _ := json.Marshal(spec)
	sum := sha256.Sum256(b)
	j, _, err := e.raw.CreateJob(ctx, store.NewJob{Spec: spec, SpecJSON: b, SpecHash: "sha256:" + hex.EncodeToString(sum[:]),
		Submitter: "alice", SubmittedAt: e.clk.Now(), Actor: "user:alice",
		OutputDir: func(id int64) string { return fmt.Sprintf("/out/%d", id) }},
		domain.AuditRecord{At: e.clk.Now(), Actor: "user:alice", Action: "job.submit", Target: "job/", Result: domain.AuditOK})
	if err != nil {
		e.t.Fatal(err)
	}
	e.apply(store.Change{JobID: j.ID, Move: domain.MoveStart(), At: e.clk.Now(),
		Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting, Node: "g1"}},
		store.Change{JobID: j.ID, Move: domain.MoveRun(), At: e.clk.Now(),
			Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}})
	return j
}

// finish ends j's attempt 1 now, succeeded.
func (e *ledgerEnv) finish(j domain.Job) {
	e.t.Helper()
	e.apply(store.Change{JobID: j.ID, Move: domain.MoveSucceed().Only(domain.JobRunning), At: e.clk.Now(),
		Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptSucceeded}})
}

func (e *ledgerEnv) apply(changes ...store.Change) {
	e.t.Helper()
	errs, err := e.raw.Apply(context.Background(), changes)
	if err == nil {
		err = errors.Join(errs...)
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

// spend is every view of the history's spend at once: the report by
// each grouping (total cost and running rate), the budget's spend and
// rate, and each job's cost and cost per hour as job show prices it.
func (e *ledgerEnv) spend(jobs ...domain.Job) string {
	e.t.Helper()
	ctx := context.Background()
	var out string
	for _, by := range service.CostGroupings() {
		rep, err := e.svc.Cost.Report(ctx, e.admin, service.CostQuery{Since: costT0, By: by})
		if err != nil {
			e.t.Fatalf("by %s: %v", by, err)
		}
		out += fmt.Sprintf("%s %s %s/h; ", by, rep.Total.Cost, rep.Total.RunningPerHour)
	}
	bs, err := e.svc.Cost.Budgets(ctx, e.admin, "vision")
	if err != nil || len(bs) != 1 {
		e.t.Fatalf("Budgets = %+v, %v", bs, err)
	}
	out += fmt.Sprintf("budget %s %s/h; ", bs[0].Use.Spent, bs[0].Use.Rate)
	rev, err := e.svc.Cost.Review(ctx, e.admin, service.ReviewQuery{Since: costT0})
	if err != nil {
		e.t.Fatalf("Review: %v", err)
	}
	out += fmt.Sprintf("review %s; ", rev.Total.Cost)
	for _, j := range jobs {
		d, err := e.svc.Jobs.Get(ctx, e.admin, j.ID)
		if err != nil || !d.Priced {
			e.t.Fatalf("Get(%d) = priced %v, %v", j.ID, d.Priced, err)
		}
		out += fmt.Sprintf("%s %s %s/h; ", j.Name, d.Cost, d.CostPerHour)
	}
	return out
}

// A rate change prices the time after it, never the time before: an
// attempt that ran 2 h at 2.00 per GPU-hour and 1 h after the rate went
// to 3.00 costs 7.00, in every report (the review's too), the budget and
// job show alike, and
// the same however often and whenever it is asked.
func TestRateChangePricesOnlyLaterTime(t *testing.T) {
	e := newLedgerEnv(t)
	ctx := context.Background()
	if _, err := e.svc.Cost.SetBudget(ctx, e.admin, domain.Budget{Project: "vision", Amount: mustMoney(t, "1000"),
		Period: domain.BudgetMonthly, Action: domain.BudgetNotify}); err != nil {
		t.Fatal(err)
	}
	done := e.job("done") // hours 0–3
	e.clk.Advance(time.Hour)
	live := e.job("live") // from hour 1, running
	e.clk.Advance(time.Hour)
	e.price("3.00") // at hour 2
	e.clk.Advance(time.Hour)
	e.finish(done)
	// At hour 3: done 2×2.00 + 1×3.00 = 7.00; live 1×2.00 + 1×3.00 = 5.00,
	// 3.00 an hour.
	row := "%[1]s %[2]s/h; "
	all := func(total, rate string) string {
		var s string
		for _, by := range service.CostGroupings() {
			s += by + " " + fmt.Sprintf(row, total, rate)
		}
		return s + "budget " + fmt.Sprintf(row, total, rate) + "review " + total + "; "
	}
	want := all("12.00", "3.00") + "done 7.00 0.00/h; live 5.00 3.00/h; "
	got := e.spend(done, live)
	if got != want {
		t.Errorf("at hour 3:\n got %s\nwant %s", got, want)
	}
	if again := e.spend(done, live); again != got {
		t.Errorf("asked again:\n got %s\nwant %s", again, got)
	}
	// Raising the rate now changes nothing already spent...
	e.price("10.00")
	if got := e.spend(done, live); got != all("12.00", "10.00")+"done 7.00 0.00/h; live 5.00 10.00/h; " {
		t.Errorf("after raising the rate to 10.00 at hour 3:\n got %s", got)
	}
	// ...and prices the hour after it: live 5.00 + 10.00.
	e.clk.Advance(time.Hour)
	if got := e.spend(done, live); got != all("22.00", "10.00")+"done 7.00 0.00/h; live 15.00 10.00/h; " {
		t.Errorf("at hour 4:\n got %s", got)
	}
	// Rewriting the pool with the same rates records no change.
	e.price("10.00")
	h, err := e.raw.RateHistory(ctx, "gpu")
	if err != nil || len(h) != 3 {
		t.Errorf("rate history = %+v, %v; want 2.00, 3.00 and 10.00", h, err)
	}
}

// BenchmarkJobCosts prices a page of 50 jobs of a priced pool, each with
// a finished attempt and a running one, as GET /api/v1/jobs does.
func BenchmarkJobCosts(b *testing.B) {
	e := newLedgerEnv(b)
	ctx := context.Background()
	var page []domain.Job
	for range 50 {
		j := e.job("j")
		e.clk.Advance(time.Minute)
		e.apply(store.Change{JobID: j.ID, Move: domain.MoveRequeue().Only(domain.JobRunning), At: e.clk.Now(),
			Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptPreempted}})
		e.apply(store.Change{JobID: j.ID, Move: domain.MoveStart(), At: e.clk.Now(),
			Attempt: &store.AttemptChange{Number: 2, Create: true, To: domain.AttemptStarting, Node: "g1"}},
			store.Change{JobID: j.ID, Move: domain.MoveRun(), At: e.clk.Now(),
				Attempt: &store.AttemptChange{Number: 2, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}})
		got, err := e.raw.GetJob(ctx, j.ID)
		if err != nil {
			b.Fatal(err)
		}
		page = append(page, got)
	}
	e.clk.Advance(time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		costs, err := e.svc.Jobs.Costs(ctx, page)
		if err != nil || len(costs) != 50 {
			b.Fatalf("Costs = %d, %v", len(costs), err)
		}
	}
}
