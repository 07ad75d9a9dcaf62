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

// h0 is the first whole hour after t0; am(n) is n minutes and n ns after
// it, so that the report's window can start and end on whole hours.
var h0 = t0.Truncate(time.Hour).Add(time.Hour)

func am(n int) time.Time { return h0.Add(time.Duration(n)*time.Minute + time.Duration(n)) }

// seedRun creates a job submitted at am(submitted) in project and pool
// with res, and plays its attempts: each but the last requeues the job,
// the last ends it as its state says (or leaves it running).
func seedRun(t *testing.T, s store.Store, name, project, pool string, submitted int, res domain.Resources, attempts ...ran) domain.Job {
	t.Helper()
	spec := testSpec(name, project)
	spec.Pool, spec.Resources = pool, res
	j := create(t, s, newJob(t, spec, "alice", am(submitted)))
	for i, a := range attempts {
		n := i + 1
		mustApply(t, s, store.Change{JobID: j.ID, Move: domain.MoveStart(), At: am(a.Start),
			Attempt: &store.AttemptChange{Number: n, Create: true, To: domain.AttemptStarting}},
			store.Change{JobID: j.ID, Move: domain.MoveRun(), At: am(a.Start),
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
		mustApply(t, s, store.Change{JobID: j.ID, Move: mv.Only(domain.JobRunning), At: am(a.End), Reason: a.Reason,
			Attempt: &store.AttemptChange{Number: n, From: []domain.AttemptState{domain.AttemptRunning}, To: a.State, Reason: a.Reason,
				Usage: &domain.Usage{CPUSeconds: a.CPU, MaxRSS: a.RSS, GPUSeconds: a.GPU}}})
	}
	return j
}

// testReportTotals: one history, its figures computed by hand below. The
// window is [am(120), am(1020)), whole hours (2 h to 17 h after h0);
// am(n) is n min + n ns after h0.
//
//	job    project/pool  submitted  request          attempts (start–end state, CPU s, peak)
//	train  p/standard    110        4 CPU, 8 GiB     130–430 succeeded, 12000, 1 GiB
//	tune   p/standard    140        2 CPU, 4 GiB     150–220 failed ExitCode, 6000, 3.75 GiB; 230–520 succeeded, 30000, 1 GiB
//	eval   q/gpu         70         1 GPU 2 CPU      80–320 preempted Preempted, 0, 5400 GPU-s; 340– running
//	sweep  q/gpu         220        1 GPU            never started
//	old    p/standard    30         2 CPU            40–100 failed (before the window)
//	late   p/standard    170        2 CPU            920–1220 timed_out Timeout (ends after it)
//	flaky  p/standard    320        2 CPU, 4 GiB     330–340 lost NodeLost, 300, 1 GiB
//
// Project p: submitted tune, late, flaky (train was submitted before the
// window) = 3. Queue times of the jobs first started in the window:
// tune 10m10ns, flaky 10m10ns, train 20m20ns, late 750m750ns; n = 4, so
// p50 is the 2nd (ceil(0.5·4)), p90, p99 and max the 4th. Attempts
// started: train, tune ×2, late, flaky = 5, one a retry. Ended in the
// window: train, tune ×2, flaky = 4, 2 succeeded; failures failed/ExitCode
// 1 and lost/NodeLost 1. CPU used: 12000 + 6000 + 30000 + 300 = 48300 s.
//
// Project q: submitted sweep = 1; no job first started in the window
// (eval started at 80). Started: eval's second attempt, a retry. Ended:
// eval's first, preempted. CPU used 0, GPU used 5400 s.
//
// Right-sizing judges the jobs whose latest attempt ended in the window,
// by all their ended attempts. Oversized (under 25% of held CPUs, runs of
// 15 minutes or more, requests of 2 CPUs or more): train held 4 CPUs for
// 300 min and used 12000 CPU-s (17%), 60,000 idle CPU-s; eval's first
// attempt held 2 CPUs for 240 min and used none, 28,800 idle. tune used
// 36000 of 43200; flaky ran 10 min. Near memory (90% of the limit or
// more): tune peaked at 3.75 of 4 GiB.
func testReportTotals(t *testing.T, s store.Store) {
	ctx := context.Background()
	cpu := func(n float64, mem domain.ByteSize) domain.Resources {
		return domain.Resources{CPUs: n, Memory: mem, Nodes: 1}
	}
	gpu := domain.Resources{GPUs: 1, CPUs: 2, Memory: 16 << 30, Nodes: 1}
	train := seedRun(t, s, "train", "p", "standard", 110, cpu(4, 8<<30),
		ran{130, 430, domain.AttemptSucceeded, domain.ReasonCompleted, 12000, 1 << 30, 0})
	tune := seedRun(t, s, "tune", "p", "standard", 140, cpu(2, 4<<30),
		ran{150, 220, domain.AttemptFailed, domain.ReasonExitCode, 6000, 3 << 30 * 5 / 4, 0},
		ran{230, 520, domain.AttemptSucceeded, domain.ReasonCompleted, 30000, 1 << 30, 0})
	eval := seedRun(t, s, "eval", "q", "gpu", 70, gpu,
		ran{80, 320, domain.AttemptPreempted, domain.ReasonPreempted, 0, 0, 5400},
		ran{340, -1, domain.AttemptRunning, "", 0, 0, 0})
	create(t, s, func() store.NewJob {
		spec := testSpec("sweep", "q")
		spec.Pool, spec.Resources = "gpu", gpu
		return newJob(t, spec, "alice", am(220))
	}())
	seedRun(t, s, "old", "p", "standard", 30, cpu(2, 0), ran{40, 100, domain.AttemptFailed, domain.ReasonExitCode, 60, 0, 0})
	seedRun(t, s, "late", "p", "standard", 170, cpu(2, 0), ran{920, 1220, domain.AttemptTimedOut, domain.ReasonTimeout, 60, 0, 0})
	seedRun(t, s, "flaky", "p", "standard", 320, cpu(2, 4<<30), ran{330, 340, domain.AttemptLost, domain.ReasonNodeLost, 300, 1 << 30, 0})

	mins := func(n int) time.Duration { return am(n).Sub(h0) }
	p := store.ReportRow{Group: "p", Submitted: 3,
		Queue:   store.QueueTimes{N: 4, P50: mins(10), P90: mins(750), P99: mins(750), Max: mins(750)},
		Started: 5, Retries: 1, Ended: 4, Succeeded: 2,
		Failures: []store.ReasonCount{{State: domain.AttemptFailed, Reason: domain.ReasonExitCode, N: 1},
			{State: domain.AttemptLost, Reason: domain.ReasonNodeLost, N: 1}},
		CPUUsed: 48300 * time.Second}
	q := store.ReportRow{Group: "q", Submitted: 1, Started: 1, Retries: 1, Ended: 1, Preempted: 1, GPUUsed: 5400 * time.Second,
		Failures: []store.ReasonCount{{State: domain.AttemptPreempted, Reason: domain.ReasonPreempted, N: 1}}}
	query := func(by string, projects ...string) store.ReportQuery {
		return store.ReportQuery{SpendQuery: store.SpendQuery{Since: h0.Add(2 * time.Hour), Until: h0.Add(17 * time.Hour), By: by,
			AllProjects: len(projects) == 0, Projects: projects}, Under: 0.25, Near: 0.9, Limit: 10, MinRun: 15 * time.Minute, MinCPUs: 2}
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
	// Held is the whole of the ended attempts, each end in whole
	// microseconds.
	if got, want := sized(got.Oversized), fmt.Sprintf("%d held 5h0m0s used 3h20m0s peak 1GiB; %d held 4h0m0s used 0s peak 0; ", train.ID, eval.ID); got != want {
		t.Errorf("oversized:\n got %s\nwant %s", got, want)
	}
	if got, want := sized(got.NearMemory), fmt.Sprintf("%d held 6h0m0s used 10h0m0s peak 3840MiB; ", tune.ID); got != want {
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

	// The hours each attempt added as it ended are those a rebuild from
	// every attempt derives (as the migration that added them did).
	if r, ok := s.(interface{ RebuildUsage(context.Context) error }); ok {
		before, err := s.ReportTotals(ctx, query("project"))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.RebuildUsage(ctx); err != nil {
			t.Fatal(err)
		}
		after, err := s.ReportTotals(ctx, query("project"))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(before, after) {
			t.Errorf("after RebuildUsage:\n got %+v\nwant %+v", after, before)
		}
	}

	// A window starting inside an hour reads from the start of the hour.
	for _, by := range []string{"project", "pool"} {
		whole, err := s.ReportTotals(ctx, query(by))
		if err != nil {
			t.Fatal(err)
		}
		q := query(by)
		q.Since = q.Since.Add(59*time.Minute + 59*time.Second)
		inside, err := s.ReportTotals(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(whole, inside) {
			t.Errorf("by %s from %s:\n got %+v\nwant %+v", by, q.Since, inside, whole)
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
	if none, err := s.ReportTotals(ctx, store.ReportQuery{SpendQuery: store.SpendQuery{By: "project", Until: am(1020)}}); err != nil || len(none.Rows) != 0 {
		t.Errorf("of no project = %+v, %v", none, err)
	}
	if _, err := s.ReportTotals(ctx, query("user")); err == nil {
		t.Error("ReportTotals by user: no error")
	}
}
