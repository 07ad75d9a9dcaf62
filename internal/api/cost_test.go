package api_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api"
	"trainyard/internal/api/apitypes"
	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
)

// TestCostReport: at 2.10 per GPU-hour on pool gpu and a fake clock at hour
// 10, job 1 (2 GPUs, hours 1–2.5, succeeded) costs 2×2.10×1.5 = 6.30; job
// 2's first attempt (1 GPU, hours 2–4, preempted) 4.20 of waste, its retry
// (running from hour 4) 1×2.10×6 = 12.60 and 2.10 an hour; job 3 (1 GPU,
// hours 5–6, failed, project nlp) 2.10 of waste. Total 25.20, waste 6.30.
func TestCostReport(t *testing.T) {
	e, at := newCostEnv(t, "")
	token := e.token
	code, b := e.do("GET", "/api/v1/cost", token, nil)
	var rep apitypes.CostReport
	if err := json.Unmarshal(b, &rep); code != 200 || err != nil {
		t.Fatalf("GET /api/v1/cost = %d %s", code, b)
	}
	var got []string
	for _, l := range append(rep.Lines, rep.Total) {
		got = append(got, fmt.Sprintf("%s %s %s %d %s %g", l.Group, l.Cost, l.Waste, l.Attempts, l.RunningPerHour, l.GPUHours))
	}
	want := "[vision 23.10 4.20 3 2.10 11 nlp 2.10 2.10 1 0.00 1 total 25.20 6.30 4 2.10 12]"
	if fmt.Sprint(got) != want {
		t.Errorf("report:\n got %v\nwant %s", got, want)
	}
	if rep.By != "project" || !rep.Until.Equal(at(10)) || !rep.Since.Equal(at(10).Add(-30*24*time.Hour)) {
		t.Errorf("by %s, window %s–%s; want project over the 30 days up to now", rep.By, rep.Since, rep.Until)
	}

	// From hour 5 by job: the retry's 5 h (10.50) and job 3's hour.
	code, b = e.do("GET", "/api/v1/cost?since=5h&by=job&project=vision", token, nil)
	rep = apitypes.CostReport{}
	if err := json.Unmarshal(b, &rep); code != 200 || err != nil || len(rep.Lines) != 1 || rep.Lines[0].Group != "2 sweep" || rep.Lines[0].Cost != "10.50" {
		t.Errorf("since=5h&by=job&project=vision = %d %s", code, b)
	}
	code, b = e.do("GET", "/api/v1/cost?since=2026-03-01T06:00:00Z&by=day", token, nil)
	rep = apitypes.CostReport{}
	if err := json.Unmarshal(b, &rep); code != 200 || err != nil || len(rep.Lines) != 1 ||
		rep.Lines[0].Group != "2026-03-01" || rep.Lines[0].Cost != "8.40" || rep.Lines[0].GPUHours != 4 {
		t.Errorf("since a time, by day = %d %s", code, b)
	}

	for query, want := range map[string]string{
		"by=team":          `by: cannot group by "team"; choose one of project, pool, user, job, day`,
		"since=sooner":     `since: must be a duration back from now (30d, 12h) or a time (2026-03-01, RFC 3339), got "sooner"`,
		"since=-3d":        `since: must be a duration back from now (30d, 12h) or a time (2026-03-01, RFC 3339), got "-3d"`,
		"since=2027-01-01": `since: 2027-01-01T00:00:00Z is in the future; name a past time or a duration such as 30d`,
	} {
		code, b := e.do("GET", "/api/v1/cost?"+query, token, nil)
		if code != 400 {
			t.Errorf("?%s = %d %s, want 400", query, code, b)
			continue
		}
		fe := decodeErr(t, b).Fields
		if len(fe) != 1 || fe[0].Path+": "+fe[0].Message != want {
			t.Errorf("?%s: fields %+v, want %q", query, fe, want)
		}
	}
	if code, _ := e.do("GET", "/api/v1/cost", "", nil); code != 401 {
		t.Errorf("without a token: %d, want 401", code)
	}
}

// newCostEnv is a server (in currency, "" for the default) on a store
// with the history TestCostReport describes, its fake clock at hour 10 of
// 2026-03-01 (at gives hour h), and e.token an admin's.
func newCostEnv(t *testing.T, currency string) (*env, func(h float64) time.Time) {
	t.Helper()
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	at := func(h float64) time.Time { return t0.Add(time.Duration(h * float64(time.Hour))) }
	raw, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	rates := map[string]domain.Rates{"gpu": {GPUHour: 2_100_000}}
	pool := domain.Pool{Name: "gpu", Nodes: []domain.Node{{Name: "g1", CPUs: 8, Memory: 64 << 30, GPUs: []int{0, 1, 2, 3}}}, Rates: rates["gpu"]}
	if _, err := raw.PutPool(ctx, pool, domain.AuditRecord{At: t0, Actor: "user:admin", Action: "pool.write", Target: "pool/gpu", Result: domain.AuditOK}); err != nil {
		t.Fatal(err)
	}
	apply := func(changes ...store.Change) {
		t.Helper()
		errs, err := raw.Apply(ctx, changes)
		if err = errors.Join(append(errs, err)...); err != nil {
			t.Fatal(err)
		}
	}
	job := func(name, project string, gpus int) domain.Job {
		t.Helper()
		spec := domain.Spec{Name: name, Project: project, Pool: "gpu", Entrypoint: []string{"true"}, Resources: domain.Resources{GPUs: gpus, Nodes: 1}}
		b, _ := json.Marshal(spec)
		sum := sha256.Sum256(b)
		j, _, err := raw.CreateJob(ctx, store.NewJob{Spec: spec, SpecJSON: b, SpecHash: "sha256:" + hex.EncodeToString(sum[:]),
			Submitter: "alice", SubmittedAt: t0, Actor: "user:alice", OutputDir: func(id int64) string { return fmt.Sprintf("/out/%d", id) }},
			domain.AuditRecord{At: t0, Actor: "user:alice", Action: "job.submit", Target: "job/", Result: domain.AuditOK})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	run := func(j domain.Job, n int, from, to float64, move domain.Move, end domain.AttemptState) {
		t.Helper()
		apply(store.Change{JobID: j.ID, Move: domain.MoveStart(), At: at(from),
			Attempt: &store.AttemptChange{Number: n, Create: true, To: domain.AttemptStarting, Node: "g1"}},
			store.Change{JobID: j.ID, Move: domain.MoveRun(), At: at(from),
				Attempt: &store.AttemptChange{Number: n, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}})
		if to > 0 {
			apply(store.Change{JobID: j.ID, Move: move.Only(domain.JobRunning), At: at(to),
				Attempt: &store.AttemptChange{Number: n, From: []domain.AttemptState{domain.AttemptRunning}, To: end}})
		}
	}
	run(job("train", "vision", 2), 1, 1, 2.5, domain.MoveSucceed(), domain.AttemptSucceeded)
	j2 := job("sweep", "vision", 1)
	run(j2, 1, 2, 4, domain.MoveRequeue(), domain.AttemptPreempted)
	run(j2, 2, 4, 0, domain.Move{}, "")
	run(job("prep", "nlp", 1), 1, 5, 6, domain.MoveFail(), domain.AttemptFailed)

	svc := service.New(service.Config{Store: raw, Clock: clock.NewFake(at(10))})
	token, err := svc.Identity.Bootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler(api.Config{Service: svc, Ready: raw.Ping, Currency: currency}))
	t.Cleanup(func() { srv.Close(); raw.Close() })
	return &env{t: t, srv: srv, st: raw, token: token}, at
}

// The report carries accrued storage beside compute, priced per tier at
// the pool's storage rates, without changing the compute lines.
func TestCostReportStorage(t *testing.T) {
	e, at := newCostEnv(t, "")
	ctx := context.Background()
	day := at(0).AddDate(0, 0, -1) // 2026-02-28, over by the fake clock's now
	const gibDay = int64(1<<30) * 86400
	if err := e.st.RecordStorageDays(ctx, []domain.StorageDay{
		{Day: day, JobID: 1, JobName: "train", Tier: domain.TierLocal, Project: "vision", Pool: "gpu", Submitter: "alice", ByteSeconds: 2 * gibDay},
		{Day: day, JobID: 1, JobName: "train", Tier: domain.TierObject, Project: "vision", Pool: "gpu", Submitter: "alice", ByteSeconds: gibDay / 2},
	}); err != nil {
		t.Fatal(err)
	}
	code, b := e.do("GET", "/api/v1/cost", e.token, nil)
	var rep apitypes.CostReport
	if err := json.Unmarshal(b, &rep); code != 200 || err != nil {
		t.Fatalf("GET /api/v1/cost = %d %s", code, b)
	}
	if rep.Total.Cost != "25.20" {
		t.Errorf("compute total = %s, want 25.20 as without storage", rep.Total.Cost)
	}
	st := rep.Storage
	if len(st.Lines) != 1 || st.Lines[0].Group != "vision" || st.Total.LocalGiBDays != 2 || st.Total.ObjectGiBDays != 0.5 ||
		st.Total.Cost != "0.00" || !st.Since.Equal(at(0).AddDate(0, 0, -30)) || !st.Until.Equal(at(0)) {
		t.Errorf("storage = %+v; want vision with 2 local and 0.5 object GiB-days, free (pool gpu has no storage rates), whole days up to today", st)
	}
}

// TestJobListCost: each job of a list carries what its attempts cost so
// far, as GET /jobs/{id} prices it; a job of a priced pool that never ran
// costs 0.00, one of a pool without rates carries no cost.
func TestJobListCost(t *testing.T) {
	e, _ := newCostEnv(t, "EUR")
	free := domain.Pool{Name: "free", Nodes: []domain.Node{{Name: "c1", CPUs: 8, Memory: 64 << 30}}}
	if _, err := e.st.PutPool(context.Background(), free, domain.AuditRecord{Actor: "user:admin", Action: "pool.write", Target: "pool/free", Result: domain.AuditOK}); err != nil {
		t.Fatal(err)
	}
	for _, pool := range []string{"gpu", "free"} {
		spec, _ := json.Marshal("name: idle-" + pool + "\npool: " + pool + "\nentrypoint: [\"true\"]\nresources: {cpus: 1}\n")
		if code, b := e.do("POST", "/api/v1/jobs", e.token, apitypes.SubmitRequest{Spec: spec}); code != 201 {
			t.Fatalf("submit to %s: %d %s", pool, code, b)
		}
	}
	code, b := e.do("GET", "/api/v1/jobs?limit=50", e.token, nil)
	var list apitypes.JobList
	if err := json.Unmarshal(b, &list); code != 200 || err != nil {
		t.Fatalf("GET /api/v1/jobs = %d %s", code, b)
	}
	var got []string
	for _, j := range list.Jobs {
		got = append(got, strings.TrimSpace(fmt.Sprintf("%s %q %s", j.Name, j.Cost, j.Currency)))
		if j.Cost == "" {
			continue
		}
		var one apitypes.Job
		if code, b := e.do("GET", fmt.Sprintf("/api/v1/jobs/%d", j.ID), e.token, nil); code != 200 || json.Unmarshal(b, &one) != nil || one.Cost != j.Cost {
			t.Errorf("job %s: listed at %s, shown at %s (%d)", j.Name, j.Cost, one.Cost, code)
		}
	}
	want := `[idle-free "" idle-gpu "0.00" EUR prep "2.10" EUR sweep "16.80" EUR train "6.30" EUR]`
	if fmt.Sprint(got) != want {
		t.Errorf("listed costs:\n got %v\nwant %s", got, want)
	}
}
