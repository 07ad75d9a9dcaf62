package storetest

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// reportTests: ReportTotals over a hand-computed history.
var reportTests = map[string]func(*testing.T, store.Store){
	"ReportTotals": testReportTotals,
}

// ran is one attempt of a seeded job: it starts at Start and ends at End
// (-1: still running) in State with Reason, having used CPU seconds and GPU
// seconds and peaked at RSS.
type ran struct {
	Start, End int
	State      domain.AttemptState
	Reason     domain.Reason
	CPU        float64
	RSS        domain.ByteSize
	GPU        float64 // GPU-seconds used
}

// seedRun creates a job submitted at at(submitted) in project and pool
// with res, and plays its attempts: each but the last requeues the job,
// the last ends it as its state says (or leaves it running).
func seedRun(t *testing.T, s store.Store, name, project, pool string, submitted int, res domain.Resources, attempts ...ran) domain.Job {
	t.Helper()
	spec := testSpec(name, project)
	spec.Pool, spec.Resources = pool, res
	j := create(t, s, newJob(t, spec, "alice", at(submitted)))
	for i, a := range attempts {
		n := i + 1
		mustApply(t, s, store.Change{JobID: j.ID, Move: domain.MoveStart(), At: at(a.Start),
			Attempt: &store.AttemptChange{Number: n, Create: true, To: domain.AttemptStarting}},
			store.Change{JobID: j.ID, Move: domain.MoveRun(), At: at(a.Start),
				Attempt: &store.AttemptChange{Number: n, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}})
		if a.End < 0 {
			continue
		}
		mv := domain.MoveRequeue()
		switch {
		case i < len(attempts)-1:
		case a.State == domain.AttemptSucceeded:
			mv = domain.MoveSucceed()
		default:
			mv = domain.MoveFail()
		}
		mustApply(t, s, store.Change{JobID: j.ID, Move: mv.Only(domain.JobRunning), At: at(a.End), Reason: a.Reason,
			Attempt: &store.AttemptChange{Number: n, From: []domain.AttemptState{domain.AttemptRunning}, To: a.State, Reason: a.Reason,
				Usage: &domain.Usage{CPUSeconds: a.CPU, MaxRSS: a.RSS, GPUSeconds: a.GPU}}})
	}
	return j
}

// testReportTotals: one history, its figures computed by hand below. The
// window is [at(100), at(1000)); at(n) is n s + n ns after t0.
//
//	job    project/pool  submitted  request          attempts (start–end state, CPU s, peak)
//	train  p/standard    90         4 CPU, 8 GiB     110–410 succeeded, 200, 1 GiB
//	tune   p/standard    120        2 CPU, 4 GiB     130–200 failed ExitCode, 100, 3.75 GiB; 210–500 succeeded, 500, 1 GiB
//	eval   q/gpu         50         1 GPU 2 CPU      60–300 preempted Preempted, 0, 90 GPU-s; 320– running
//	sweep  q/gpu         200        1 GPU            never started
//	old    p/standard    10         2 CPU            20–80 failed (before the window)
//	late   p/standard    150        2 CPU            900–1200 timed_out Timeout (ends after it)
//	flaky  p/standard    300        2 CPU, 4 GiB     310–320 lost NodeLost, 5, 1 GiB
//
// Project p: submitted tune, late, flaky (train was submitted before the
// window) = 3. Queue times of the jobs first started in the window:
// tune 10s10ns, flaky 10s10ns, train 20s20ns, late 750s750ns; n = 4, so
// p50 is the 2nd (ceil(0.5·4)), p90, p99 and max the 4th. Attempts
// started: train, tune ×2, late, flaky = 5, one a retry. Ended in the
// window: train, tune ×2, flaky = 4, 2 succeeded; failures failed/ExitCode
// 1 and lost/NodeLost 1. CPU used: 200 + 100 + 500 + 5 = 805 s.
//
// Project q: submitted sweep = 1; no job first started in the window
// (eval started at 60). Started: eval's second attempt, a retry. Ended:
// eval's first, preempted. CPU used 0, GPU used 90 s.
//
// Oversized (under 25% of held CPUs, runs of a minute or more, requests of
// 2 CPUs or more): train held 4 CPUs for 300 s and used 200 CPU-s (17%),
// 1,000 idle CPU-s; eval's first attempt held 2 CPUs for 200 s inside the
// window and used none, 400 idle. tune used 600 of 720; flaky ran 10 s.
// Near memory (90% of the limit or more): tune peaked at 3.75 of 4 GiB.
func testReportTotals(t *testing.T, s store.Store) {
	ctx := context.Background()
	cpu := func(n float64, mem domain.ByteSize) domain.Resources {
		return domain.Resources{CPUs: n, Memory: mem, Nodes: 1}
	}
	gpu := domain.Resources{GPUs: 1, CPUs: 2, Memory: 16 << 30, Nodes: 1}
	train := seedRun(t, s, "train", "p", "standard", 90, cpu(4, 8<<30),
		ran{110, 410, domain.AttemptSucceeded, domain.ReasonCompleted, 200, 1 << 30, 0})
	tune := seedRun(t, s, "tune", "p", "standard", 120, cpu(2, 4<<30),
		ran{130, 200, domain.AttemptFailed, domain.ReasonExitCode, 100, 3 << 30 * 5 / 4, 0},
		ran{210, 500, domain.AttemptSucceeded, domain.ReasonCompleted, 500, 1 << 30, 0})
	eval := seedRun(t, s, "eval", "q", "gpu", 50, gpu,
		ran{60, 300, domain.AttemptPreempted, domain.ReasonPreempted, 0, 0, 90},
		ran{320, -1, domain.AttemptRunning, "", 0, 0, 0})
	create(t, s, func() store.NewJob {
		spec := testSpec("sweep", "q")
		spec.Pool, spec.Resources = "gpu", gpu
		return newJob(t, spec, "alice", at(200))
	}())
	seedRun(t, s, "old", "p", "standard", 10, cpu(2, 0), ran{20, 80, domain.AttemptFailed, domain.ReasonExitCode, 1, 0, 0})
	seedRun(t, s, "late", "p", "standard", 150, cpu(2, 0), ran{900, 1200, domain.AttemptTimedOut, domain.ReasonTimeout, 1, 0, 0})
	seedRun(t, s, "flaky", "p", "standard", 300, cpu(2, 4<<30), ran{310, 320, domain.AttemptLost, domain.ReasonNodeLost, 5, 1 << 30, 0})

	secs := func(n int) time.Duration { return at(n).Sub(t0) }
	p := store.ReportRow{Group: "p", Submitted: 3,
		Queue:   store.QueueTimes{N: 4, P50: secs(10), P90: secs(750), P99: secs(750), Max: secs(750)},
		Started: 5, Retries: 1, Ended: 4, Succeeded: 2,
		Failures: []store.ReasonCount{{State: domain.AttemptFailed, Reason: domain.ReasonExitCode, N: 1},
			{State: domain.AttemptLost, Reason: domain.ReasonNodeLost, N: 1}},
		CPUUsed: 805 * time.Second}
	q := store.ReportRow{Group: "q", Submitted: 1, Started: 1, Retries: 1, Ended: 1, Preempted: 1, GPUUsed: 90 * time.Second,
		Failures: []store.ReasonCount{{State: domain.AttemptPreempted, Reason: domain.ReasonPreempted, N: 1}}}
	query := func(by string, projects ...string) store.ReportQuery {
		return store.ReportQuery{SpendQuery: store.SpendQuery{Since: at(100), Until: at(1000), By: by,
			AllProjects: len(projects) == 0, Projects: projects}, Under: 0.25, Near: 0.9, Limit: 10, MinRun: time.Minute, MinCPUs: 2}
	}
	got, err := s.ReportTotals(ctx, query("project"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []store.ReportRow{p, q}; !reflect.DeepEqual(got.Rows, want) {
		t.Errorf("rows by project:\n got %+v\nwant %+v", got.Rows, want)
	}
	sized := func(js []store.SizedJob) string {
		var out string
		for _, j := range js {
			out += fmt.Sprintf("%d held %s used %s peak %s; ", j.JobID, j.Held, j.CPUUsed, j.MaxRSS)
		}
		return out
	}
	// Held is clipped to the window and counted in whole microseconds.
	if got, want := sized(got.Oversized), fmt.Sprintf("%d held 5m0s used 3m20s peak 1GiB; %d held 3m20s used 0s peak 0; ", train.ID, eval.ID); got != want {
		t.Errorf("oversized:\n got %s\nwant %s", got, want)
	}
	if got, want := sized(got.NearMemory), fmt.Sprintf("%d held 6m0s used 10m0s peak 3840MiB; ", tune.ID); got != want {
		t.Errorf("near memory:\n got %s\nwant %s", got, want)
	}
	if len(got.Oversized) > 0 && (got.Oversized[0].Name != "train" || got.Oversized[0].Resources.CPUs != 4 || got.Oversized[0].Project != "p") {
		t.Errorf("oversized job = %+v", got.Oversized[0])
	}

	// The spend sums are SpendTotals', from the same read.
	spendRows := func(rows []store.SpendRow) []string {
		var out []string
		for _, r := range rows {
			out = append(out, fmt.Sprintf("%+v", r))
		}
		slices.Sort(out)
		return out
	}
	for _, by := range []string{"project", "pool"} {
		rep, err := s.ReportTotals(ctx, query(by))
		if err != nil {
			t.Fatal(err)
		}
		want, err := s.SpendTotals(ctx, query(by).SpendQuery)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := spendRows(rep.Spend), spendRows(want); !slices.Equal(got, want) || len(got) == 0 {
			t.Errorf("spend by %s:\n got %q\nwant %q (SpendTotals)", by, got, want)
		}
	}

	// Read in parts of the job ids at once, the same.
	for _, parts := range []int{2, 3, 7} {
		for _, by := range []string{"project", "pool"} {
			one, err := s.ReportTotals(ctx, query(by))
			if err != nil {
				t.Fatal(err)
			}
			q := query(by)
			q.Parts = parts
			split, err := s.ReportTotals(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(spendRows(one.Spend), spendRows(split.Spend)) || !reflect.DeepEqual(one.Rows, split.Rows) ||
				!reflect.DeepEqual(one.Oversized, split.Oversized) || !reflect.DeepEqual(one.NearMemory, split.NearMemory) {
				t.Errorf("by %s in %d parts:\n got %+v\nwant %+v", by, parts, split, one)
			}
		}
	}

	byPool, err := s.ReportTotals(ctx, query("pool"))
	if err != nil {
		t.Fatal(err)
	}
	p.Group, q.Group = "standard", "gpu"
	if want := []store.ReportRow{q, p}; !reflect.DeepEqual(byPool.Rows, want) {
		t.Errorf("rows by pool:\n got %+v\nwant %+v", byPool.Rows, want)
	}
	onlyQ, err := s.ReportTotals(ctx, query("project", "q"))
	if err != nil {
		t.Fatal(err)
	}
	q.Group = "q"
	if want := []store.ReportRow{q}; !reflect.DeepEqual(onlyQ.Rows, want) || len(onlyQ.Oversized) != 1 || onlyQ.Oversized[0].JobID != eval.ID {
		t.Errorf("project q only: %+v", onlyQ)
	}
	if none, err := s.ReportTotals(ctx, store.ReportQuery{SpendQuery: store.SpendQuery{By: "project", Until: at(1000)}}); err != nil || len(none.Rows) != 0 {
		t.Errorf("of no project = %+v, %v", none, err)
	}
	if _, err := s.ReportTotals(ctx, query("user")); err == nil {
		t.Error("ReportTotals by user: no error")
	}
}
