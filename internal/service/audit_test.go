package service_test

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"trainyard/internal/audit"
	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite/sqlitetest"
)

type auditEnv struct {
	svc *service.Service
	st  store.Store
	clk *clock.Fake
}

// newAuditEnv returns a service on a fresh SQLite store with pool "default"
// and a quota for project "default" in it; the log starts with their records.
func newAuditEnv(t *testing.T) auditEnv {
	t.Helper()
	dir := t.TempDir()
	st := sqlitetest.Open(t, dir)
	clk := clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	svc := service.New(service.Config{Store: st, Clock: clk, ArtifactsRoot: filepath.Join(dir, "artifacts")})
	pool := domain.Pool{Name: "default", Nodes: []domain.Node{{Name: "n1", CPUs: 8, Memory: 32 << 30}}}
	if _, _, err := svc.Pools.PutPool(context.Background(), admin, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Pools.SetQuota(context.Background(), admin, domain.Quota{Project: "default", Pool: "default",
		Guaranteed: pool.Capacity(), MaxPriority: domain.PriorityUrgent}); err != nil {
		t.Fatal(err)
	}
	return auditEnv{svc: svc, st: st, clk: clk}
}

// records returns the log's records with action (all when "").
func (e auditEnv) records(t *testing.T, action string) []domain.AuditRecord {
	t.Helper()
	recs, err := e.st.ListAudit(context.Background(), store.AuditFilter{Action: action})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// specWithValues carries values an audit record must never copy: a token in
// the entrypoint, a parameter and an environment variable.
const specWithValues = `name: audited
entrypoint: [python3, train.py, --api-key, tok_ENTRYPOINT_VALUE]
params: {password: tok_PARAM_VALUE}
env_vars: {SERVICE_CREDENTIAL: tok_ENV_VALUE}
resources: {cpus: 1, memory: 1GiB}
`

func TestSubmitAuditRecordHoldsNoSpecValues(t *testing.T) {
	e := newAuditEnv(t)
	ctx := service.WithClient(context.Background(), "192.0.2.10")
	job, created, err := e.svc.Jobs.Submit(ctx, admin, service.SubmitInput{Doc: []byte(specWithValues)})
	if err != nil || !created {
		t.Fatalf("Submit: created=%v, %v", created, err)
	}
	recs := e.records(t, "job.submit")
	if len(recs) != 1 {
		t.Fatalf("%d job.submit records, want 1", len(recs))
	}
	r := recs[0]
	if want := "job/" + strconv.FormatInt(job.ID, 10); r.Target != want {
		t.Errorf("Target = %q, want %q", r.Target, want)
	}
	if r.Actor != "user:admin" || r.Result != domain.AuditOK || r.Client != "192.0.2.10" || !r.At.Equal(e.clk.Now()) {
		t.Errorf("record = %+v; want actor user:admin, result ok, client 192.0.2.10, at the clock's time", r)
	}
	if !strings.Contains(r.After, `"spec_hash":"`+job.SpecHash+`"`) {
		t.Errorf("After = %s; want the spec hash %s", r.After, job.SpecHash)
	}
	for _, field := range []string{r.Target, r.Before, r.After, r.Detail} {
		if strings.Contains(field, "tok_") || strings.Contains(field, "train.py") {
			t.Errorf("the submit record copies spec contents: %q", field)
		}
	}
	if len(r.After) > 300 {
		t.Errorf("After is %d bytes; the submit record holds a summary, not the spec: %s", len(r.After), r.After)
	}

	// A replay with the same idempotency key changes nothing: no record.
	for range 2 {
		if _, _, err := e.svc.Jobs.Submit(ctx, admin, service.SubmitInput{Doc: []byte(specWithValues), IdempotencyKey: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(e.records(t, "job.submit")); n != 2 {
		t.Errorf("after a submit and its replay: %d job.submit records, want 2", n)
	}
}

// failingCreate fails CreateJob inside the store's transaction, after the
// job row was inserted and with the audit record attached.
type failingCreate struct{ store.Store }

func (f failingCreate) CreateJob(ctx context.Context, p store.NewJob, audit domain.AuditRecord) (domain.Job, bool, error) {
	p.OutputDir = func(int64) string { panic("the output directory cannot be named") }
	return f.Store.CreateJob(ctx, p, audit)
}

func TestFailedSubmitLeavesNoRecord(t *testing.T) {
	e := newAuditEnv(t)
	before := len(e.records(t, ""))
	svc := service.New(service.Config{Store: failingCreate{e.st}, Clock: e.clk, ArtifactsRoot: t.TempDir()})
	if _, _, err := svc.Jobs.Submit(context.Background(), admin, service.SubmitInput{Doc: []byte("name: f\nentrypoint: [true]\n")}); err == nil {
		t.Fatal("Submit succeeded though the store failed")
	}
	if jobs, err := e.st.ListJobs(context.Background(), store.JobFilter{}); err != nil || len(jobs) != 0 {
		t.Fatalf("a failed submit left %d jobs (%v)", len(jobs), err)
	}
	if got := len(e.records(t, "")); got != before {
		t.Errorf("a failed submit grew the log by %d records, want 0", got-before)
	}
	// The next change continues the chain without a gap.
	if _, _, err := e.svc.Jobs.Submit(context.Background(), admin, service.SubmitInput{Doc: []byte("name: g\nentrypoint: [true]\n")}); err != nil {
		t.Fatal(err)
	}
	rep, err := e.svc.Audit.VerifyAudit(context.Background(), admin, nil)
	if err != nil || !rep.OK() || rep.Records != int64(before+1) {
		t.Fatalf("VerifyAudit = %+v, %v; want %d intact records", rep, err, before+1)
	}
}

func TestCancelAuditRecord(t *testing.T) {
	e := newAuditEnv(t)
	job, _, err := e.svc.Jobs.Submit(context.Background(), admin, service.SubmitInput{Doc: []byte("name: c\nentrypoint: [true]\n")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Jobs.Cancel(context.Background(), admin, job.ID, "wrong data"); err != nil {
		t.Fatal(err)
	}
	// Canceling again changes nothing and records nothing.
	if _, err := e.svc.Jobs.Cancel(context.Background(), admin, job.ID, ""); err != nil {
		t.Fatal(err)
	}
	recs := e.records(t, "job.cancel")
	if len(recs) != 1 {
		t.Fatalf("%d job.cancel records, want 1", len(recs))
	}
	r := recs[0]
	if r.Target != "job/"+strconv.FormatInt(job.ID, 10) || r.Before != `{"state":"queued"}` || r.After != `{"state":"canceled"}` {
		t.Errorf("cancel record: target %q before %s after %s", r.Target, r.Before, r.After)
	}
}

func TestQuotaAuditRecords(t *testing.T) {
	e := newAuditEnv(t)
	ctx := context.Background()
	q := domain.Quota{Project: "vision", Pool: "default", Guaranteed: domain.Limits{GPUs: 0, CPUs: 2, Memory: 4 << 30, Jobs: 3}}
	if _, err := e.svc.Pools.SetQuota(ctx, admin, q); err != nil {
		t.Fatal(err)
	}
	q.Guaranteed.CPUs = 4
	if _, err := e.svc.Pools.SetQuota(ctx, admin, q); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Pools.DeleteQuota(ctx, admin, "vision", "default"); err != nil {
		t.Fatal(err)
	}
	recs, err := e.st.ListAudit(ctx, store.AuditFilter{Target: "quota/vision/default"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("%d records for quota/vision/default, want 3", len(recs))
	}
	steps := []struct{ before, after string }{
		{"", `"cpus":2`},
		{`"cpus":2`, `"cpus":4`},
		{`"cpus":4`, ""},
	}
	for i, st := range steps {
		r := recs[i]
		if r.Action != "quota.write" {
			t.Errorf("record %d: action %q, want quota.write", i, r.Action)
		}
		check := func(name, got, want string) {
			if (want == "") != (got == "") || !strings.Contains(got, want) {
				t.Errorf("change %d: %s = %q, want it to contain %q", i+1, name, got, want)
			}
		}
		check("Before", r.Before, st.before)
		check("After", r.After, st.after)
	}
}

func TestListVerifyExportAudit(t *testing.T) {
	e := newAuditEnv(t)
	ctx := context.Background()
	for i := range 5 {
		e.clk.Advance(time.Minute)
		if _, _, err := e.svc.Jobs.Submit(ctx, admin, service.SubmitInput{Doc: []byte("name: j" + strconv.Itoa(i) + "\nentrypoint: [true]\n")}); err != nil {
			t.Fatal(err)
		}
	}
	all := e.records(t, "")
	auditor := service.Principal{Subject: "audrey", Role: domain.RoleAuditor}

	page, more, err := e.svc.Audit.ListAudit(ctx, auditor, service.AuditQuery{Action: "job.submit", Limit: 3})
	if err != nil || len(page) != 3 || !more {
		t.Fatalf("ListAudit first page: %d records, more=%v, %v; want 3 and more", len(page), more, err)
	}
	rest, more, err := e.svc.Audit.ListAudit(ctx, auditor, service.AuditQuery{Action: "job.submit", AfterSeq: page[2].Seq})
	if err != nil || len(rest) != 2 || more {
		t.Fatalf("ListAudit second page: %d records, more=%v, %v; want 2 and no more", len(rest), more, err)
	}
	for _, bad := range []service.AuditQuery{{Limit: -1}, {Limit: 1001}, {AfterSeq: -1}} {
		if _, _, err := e.svc.Audit.ListAudit(ctx, auditor, bad); err == nil {
			t.Errorf("ListAudit(%+v) succeeded, want a field error", bad)
		}
	}

	rep, err := e.svc.Audit.VerifyAudit(ctx, auditor, nil)
	if err != nil || !rep.OK() || rep.Records != int64(len(all)) || rep.LastHash != all[len(all)-1].Hash {
		t.Fatalf("VerifyAudit = %+v, %v; want %d intact records", rep, err, len(all))
	}

	var exported []domain.AuditRecord
	if err := e.svc.Audit.ExportAudit(ctx, auditor, 0, func(r domain.AuditRecord) error {
		exported = append(exported, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got, err := audit.Verify(audit.Records(exported)); err != nil || !got.OK() || len(exported) != len(all) {
		t.Errorf("export: %d records, verify %+v %v; want all %d, intact", len(exported), got, err, len(all))
	}
	stop := errors.New("stop")
	if err := e.svc.Audit.ExportAudit(ctx, auditor, 0, func(domain.AuditRecord) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("ExportAudit with a failing writer = %v, want its error", err)
	}
}

func TestAuditReadNeedsAuditRole(t *testing.T) {
	e := newAuditEnv(t)
	ctx := context.Background()
	member := service.Principal{Subject: "bob", Projects: []domain.ProjectRole{{Project: "default", Role: domain.RoleMember}}}
	if _, _, err := e.svc.Audit.ListAudit(ctx, member, service.AuditQuery{}); !errors.Is(err, domain.ErrForbidden) {
		t.Errorf("ListAudit as a member = %v, want ErrForbidden", err)
	}
	if _, err := e.svc.Audit.VerifyAudit(ctx, member, nil); !errors.Is(err, domain.ErrForbidden) {
		t.Errorf("VerifyAudit as a member = %v, want ErrForbidden", err)
	}
	if err := e.svc.Audit.ExportAudit(ctx, member, 0, func(domain.AuditRecord) error { return nil }); !errors.Is(err, domain.ErrForbidden) {
		t.Errorf("ExportAudit as a member = %v, want ErrForbidden", err)
	}
	denied, err := e.st.ListAudit(ctx, store.AuditFilter{Action: "audit.read", Actor: "user:bob"})
	if err != nil {
		t.Fatal(err)
	}
	if len(denied) != 3 || denied[0].Result != domain.AuditDenied {
		t.Errorf("denials recorded: %+v; want 3 audit.read records with result denied", denied)
	}
}

// A rate change is audited with the rates before and after, as the API
// writes them, and a negative rate is refused without a record.
func TestAuditPoolRates(t *testing.T) {
	e := newAuditEnv(t)
	ctx := context.Background()
	pool := domain.Pool{Name: "default", Nodes: []domain.Node{{Name: "n1", CPUs: 8, Memory: 32 << 30}},
		Rates: domain.Rates{GPUHour: 2_100_000, ObjectGiBMonth: 23_000}}
	if _, _, err := e.svc.Pools.PutPool(ctx, admin, pool); err != nil {
		t.Fatal(err)
	}
	recs := e.records(t, "pool.write")
	r := recs[len(recs)-1]
	if strings.Contains(r.Before, "rates") || !strings.Contains(r.After, `"rates":{"gpu_hour":"2.10","object_gib_month":"0.023"}`) {
		t.Errorf("rates set: before %s after %s", r.Before, r.After)
	}

	pool.Rates.GPUHour = -1
	_, _, err := e.svc.Pools.PutPool(ctx, admin, pool)
	if !errors.Is(err, domain.ErrInvalid) || !strings.Contains(err.Error(), "rates.gpu_hour: is -0.000001; a rate cannot be negative") {
		t.Fatalf("negative rate: %v", err)
	}
	if n := len(e.records(t, "pool.write")); n != len(recs) {
		t.Errorf("a refused rate left %d pool records, want %d", n, len(recs))
	}
	if got, err := e.svc.Pools.GetPool(ctx, admin, "default"); err != nil || got.Rates.GPUHour != 2_100_000 {
		t.Errorf("after a refused change the pool's rates are %+v, %v", got.Rates, err)
	}

	pool.Rates = domain.Rates{CPUHour: 50_000}
	if _, _, err := e.svc.Pools.PutPool(ctx, admin, pool); err != nil {
		t.Fatal(err)
	}
	recs = e.records(t, "pool.write")
	r = recs[len(recs)-1]
	if !strings.Contains(r.Before, `"rates":{"gpu_hour":"2.10","object_gib_month":"0.023"}`) || !strings.Contains(r.After, `"rates":{"cpu_hour":"0.05"}`) {
		t.Errorf("rates changed: before %s after %s", r.Before, r.After)
	}
}

// Turning a pool's idle stop on and off is on record like any pool change:
// the summaries before and after show it.
func TestPoolIdleStopIsAudited(t *testing.T) {
	e := newAuditEnv(t)
	ctx := context.Background()
	pool := domain.Pool{Name: "default", Nodes: []domain.Node{{Name: "n1", CPUs: 8, Memory: 32 << 30}},
		IdleStop: domain.IdleStop{Below: 0.05, For: domain.Duration(30 * time.Minute)}}
	if _, _, err := e.svc.Pools.PutPool(ctx, admin, pool); err != nil {
		t.Fatal(err)
	}
	pool.IdleStop = domain.IdleStop{}
	if _, _, err := e.svc.Pools.PutPool(ctx, admin, pool); err != nil {
		t.Fatal(err)
	}
	recs, err := e.st.ListAudit(ctx, store.AuditFilter{Target: "pool/default"})
	if err != nil || len(recs) != 3 {
		t.Fatalf("%d records for pool/default (%v), want 3", len(recs), err)
	}
	on := `"idle_stop":{"below":0.05,"for":"30m"}`
	if r := recs[1]; strings.Contains(r.Before, "idle_stop") || !strings.Contains(r.After, on) {
		t.Errorf("turning it on: before %s after %s", r.Before, r.After)
	}
	if r := recs[2]; !strings.Contains(r.Before, on) || strings.Contains(r.After, "idle_stop") {
		t.Errorf("turning it off: before %s after %s", r.Before, r.After)
	}
}
