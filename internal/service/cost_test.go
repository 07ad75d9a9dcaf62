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
	"trainyard/internal/cost"
	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
)

var costT0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func costAt(h float64) time.Time { return costT0.Add(time.Duration(h * float64(time.Hour))) }

func mustMoney(t testing.TB, s string) domain.Money {
	t.Helper()
	m, err := domain.ParseMoney(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// newCostEnv is a service on a fresh store, its clock at hour 10 of
// costT0, with this history (rates: pool gpu 2.10/GPU-h, 0.04/CPU-h,
// 0.005/GiB-h; pool cpu 0.05/CPU-h):
//
//	job 1 vision/train (alice), 2 GPUs, 4 CPUs, 16 GiB, hours 1–2.5, succeeded:
//	  2×2.10×1.5 + 4×0.04×1.5 + 16×0.005×1.5 = 6.30 + 0.24 + 0.12 = 6.66
//	job 2 vision/sweep (bob), 1 GPU: attempt 1 hours 2–4, preempted: 4.20 waste;
//	  attempt 2 from hour 4, running: 1×2.10×6 = 12.60, 2.10/h now
//	job 3 nlp/prep (carol), 10 CPUs on pool cpu, hours 5–8, failed: 10×0.05×3 = 1.50 waste
//
// vision 23.46 (waste 4.20), nlp 1.50 (waste 1.50), total 24.96 (waste 5.70).
func newCostEnv(t *testing.T) (*service.Service, store.Store) {
	t.Helper()
	ctx := context.Background()
	raw, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	rates := map[string]domain.Rates{
		"gpu": {GPUHour: mustMoney(t, "2.10"), CPUHour: mustMoney(t, "0.04"), MemoryGiBHour: mustMoney(t, "0.005")},
		"cpu": {CPUHour: mustMoney(t, "0.05")},
	}
	for name, r := range rates {
		p := domain.Pool{Name: name, Nodes: []domain.Node{{Name: name + "-1", CPUs: 64, Memory: 512 << 30, GPUs: []int{0, 1, 2, 3}}}, Rates: r}
		if _, err := raw.PutPool(ctx, p, domain.AuditRecord{At: costT0, Actor: "user:admin", Action: "pool.write", Target: "pool/" + name, Result: domain.AuditOK}); err != nil {
			t.Fatal(err)
		}
	}
	job := func(name, project, pool, user string, res domain.Resources) domain.Job {
		t.Helper()
		spec := domain.Spec{Name: name, Project: project, Pool: pool, Entrypoint: []string{"true"}, Resources: res}
		b, _ := json.Marshal(spec)
		sum := sha256.Sum256(b)
		j, _, err := raw.CreateJob(ctx, store.NewJob{Spec: spec, SpecJSON: b, SpecHash: "sha256:" + hex.EncodeToString(sum[:]),
			Submitter: user, SubmittedAt: costT0, Actor: "user:" + user,
			OutputDir: func(id int64) string { return fmt.Sprintf("/out/%d", id) }},
			domain.AuditRecord{At: costT0, Actor: "user:" + user, Action: "job.submit", Target: "job/", Result: domain.AuditOK})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	apply := func(changes ...store.Change) {
		t.Helper()
		errs, err := raw.Apply(ctx, changes)
		if err == nil {
			err = errors.Join(errs...)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	start := func(j domain.Job, n int, h float64) {
		t.Helper()
		apply(store.Change{JobID: j.ID, Move: domain.MoveStart(), At: costAt(h),
			Attempt: &store.AttemptChange{Number: n, Create: true, To: domain.AttemptStarting, Node: "n"}},
			store.Change{JobID: j.ID, Move: domain.MoveRun(), At: costAt(h),
				Attempt: &store.AttemptChange{Number: n, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}})
	}
	end := func(j domain.Job, n int, h float64, move domain.Move, to domain.AttemptState) {
		t.Helper()
		apply(store.Change{JobID: j.ID, Move: move.Only(domain.JobRunning), At: costAt(h),
			Attempt: &store.AttemptChange{Number: n, From: []domain.AttemptState{domain.AttemptRunning}, To: to}})
	}
	const GiB = 1 << 30
	j1 := job("train", "vision", "gpu", "alice", domain.Resources{GPUs: 2, CPUs: 4, Memory: 16 * GiB, Nodes: 1})
	start(j1, 1, 1)
	end(j1, 1, 2.5, domain.MoveSucceed(), domain.AttemptSucceeded)
	j2 := job("sweep", "vision", "gpu", "bob", domain.Resources{GPUs: 1, Nodes: 1})
	start(j2, 1, 2)
	end(j2, 1, 4, domain.MoveRequeue(), domain.AttemptPreempted)
	start(j2, 2, 4)
	j3 := job("prep", "nlp", "cpu", "carol", domain.Resources{CPUs: 10, Nodes: 1})
	start(j3, 1, 5)
	end(j3, 1, 8, domain.MoveFail(), domain.AttemptFailed)

	svc := service.New(service.Config{Store: raw, Clock: clock.NewFake(costAt(10))})
	return svc, raw
}

func lines(rep service.CostReport) string {
	var s string
	for _, l := range append(rep.Lines, rep.Total) {
		s += fmt.Sprintf("%s %s/%s %d %s; ", l.Group, l.Cost.Cents(), l.Waste.Cents(), l.Attempts, l.RunningPerHour.Cents())
	}
	return s
}

func TestCostReport(t *testing.T) {
	svc, _ := newCostEnv(t)
	ctx := context.Background()
	admin := service.Principal{Subject: "admin", Role: "admin"}
	for _, c := range []struct {
		q    service.CostQuery
		want string
	}{
		{service.CostQuery{}, "vision 23.46/4.20 3 2.10; nlp 1.50/1.50 1 0.00; total 24.96/5.70 4 2.10; "},
		{service.CostQuery{By: "user"}, "bob 16.80/4.20 2 2.10; alice 6.66/0.00 1 0.00; carol 1.50/1.50 1 0.00; total 24.96/5.70 4 2.10; "},
		{service.CostQuery{By: "job", Project: "vision"}, "2 sweep 16.80/4.20 2 2.10; 1 train 6.66/0.00 1 0.00; total 23.46/4.20 3 2.10; "},
		{service.CostQuery{By: "pool"}, "gpu 23.46/4.20 3 2.10; cpu 1.50/1.50 1 0.00; total 24.96/5.70 4 2.10; "},
		// From hour 6: job 2's retry 4 h (8.40), job 3 2 h (1.00); the rest ended before.
		{service.CostQuery{Window: 4 * time.Hour}, "vision 8.40/0.00 1 2.10; nlp 1.00/1.00 1 0.00; total 9.40/1.00 2 2.10; "},
		{service.CostQuery{Since: costAt(6), By: "day"}, "2026-03-01 9.40/1.00 2 2.10; total 9.40/1.00 2 2.10; "},
	} {
		rep, err := svc.Cost.Report(ctx, admin, c.q)
		if err != nil {
			t.Fatalf("%+v: %v", c.q, err)
		}
		if got := lines(rep); got != c.want {
			t.Errorf("%+v:\n got %s\nwant %s", c.q, got, c.want)
		}
	}
	rep, _ := svc.Cost.Report(ctx, admin, service.CostQuery{})
	if !rep.Since.Equal(costAt(10).Add(-service.DefaultCostWindow)) || !rep.Until.Equal(costAt(10)) {
		t.Errorf("default window %s–%s, want 30 days up to now", rep.Since, rep.Until)
	}
	if rep.Lines[0].GPUHours != 3+2+6 || rep.Lines[1].CPUHours != 30 {
		t.Errorf("hours: %+v", rep.Lines)
	}
}

// TestCostReportAuthorization: global readers see every project, project
// roles their projects only (members included), a project filter outside
// them is refused.
func TestCostReportAuthorization(t *testing.T) {
	svc, _ := newCostEnv(t)
	ctx := context.Background()
	in := func(project string, r domain.Role) []domain.ProjectRole {
		return []domain.ProjectRole{{Project: project, Role: r}}
	}
	for name, c := range map[string]struct {
		p       service.Principal
		project string
		want    string // "forbidden" for a refusal
	}{
		"auditor":             {p: service.Principal{Subject: "aud", Roles: []domain.Role{domain.RoleAuditor}}, want: "vision nlp total"},
		"resource-admin":      {p: service.Principal{Subject: "ops", Roles: []domain.Role{domain.RoleResourceAdmin}}, want: "vision nlp total"},
		"member sees all nlp": {p: service.Principal{Subject: "dave", Projects: in("nlp", domain.RoleMember)}, want: "nlp total"},
		"viewer":              {p: service.Principal{Subject: "vic", Projects: in("vision", domain.RoleViewer)}, want: "vision total"},
		"viewer, own filter":  {p: service.Principal{Subject: "vic", Projects: in("vision", domain.RoleViewer)}, project: "vision", want: "vision total"},
		"other project":       {p: service.Principal{Subject: "dave", Projects: in("nlp", domain.RoleMember)}, project: "vision", want: "forbidden"},
		"no role":             {p: service.Principal{Subject: "nobody"}, want: "forbidden"},
	} {
		rep, err := svc.Cost.Report(ctx, c.p, service.CostQuery{Project: c.project})
		var got string
		if errors.Is(err, domain.ErrForbidden) {
			got = "forbidden"
		} else if err != nil {
			t.Fatalf("%s: %v", name, err)
		} else {
			for _, l := range append(rep.Lines, rep.Total) {
				if got != "" {
					got += " "
				}
				got += l.Group
			}
		}
		if got != c.want {
			t.Errorf("%s: got %q, want %q", name, got, c.want)
		}
	}
}

func TestCostReportBadQuery(t *testing.T) {
	svc, _ := newCostEnv(t)
	admin := service.Principal{Subject: "admin", Role: "admin"}
	for q, want := range map[*service.CostQuery]string{
		{By: "team"}:         `by: cannot group by "team"; choose one of project, pool, user, job, day`,
		{Since: costAt(11)}:  "since: 2026-03-01T11:00:00Z is in the future; name a past time or a duration such as 30d",
		{Window: -time.Hour}: "since: must be a positive duration such as 30d or 12h (got -1h0m0s)",
	} {
		_, err := svc.Cost.Report(context.Background(), admin, *q)
		if !errors.Is(err, domain.ErrInvalid) || err.Error() != "1 invalid field(s): "+want {
			t.Errorf("%+v: err = %v, want %q (invalid)", *q, err, want)
		}
	}
}

// The report the database sums equals, line by line, the report priced
// from every attempt's span (cost.Report), for each grouping it serves.
func TestReportTotalsMatchTheSpans(t *testing.T) {
	svc, raw := newCostEnv(t)
	ctx := context.Background()
	admin := service.Principal{Subject: "admin", Role: "admin"}
	since, now := costAt(1.75), costAt(10) // clips job 1's attempt
	spans, err := raw.AttemptSpans(ctx, since)
	if err != nil {
		t.Fatal(err)
	}
	rates := map[string]domain.Rates{
		"gpu": {GPUHour: mustMoney(t, "2.10"), CPUHour: mustMoney(t, "0.04"), MemoryGiBHour: mustMoney(t, "0.005")},
		"cpu": {CPUHour: mustMoney(t, "0.05")},
	}
	for _, by := range []string{"project", "pool", "user", "job"} {
		got, err := svc.Cost.Report(ctx, admin, service.CostQuery{Since: since, By: by})
		if err != nil {
			t.Fatal(err)
		}
		want := cost.Report(store.CostSpans(spans), cost.Flat(rates), now, since, by)
		if lines(got) != lines(want) {
			t.Errorf("by %s:\n summed %s\n priced %s", by, lines(got), lines(want))
		}
	}
}
