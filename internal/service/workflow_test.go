package service_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store"
)

// wfJob is a small job of project default.
const wfJob = "name: step\nentrypoint: [python3, train.py]\nresources: {cpus: 1}\n"

func submitSweep(t *testing.T, e compareEnv, p service.Principal, doc string) service.SweepResult {
	t.Helper()
	res, err := e.svc.Jobs.SubmitSweep(context.Background(), p, service.SweepInput{Doc: []byte(doc)})
	if err != nil {
		t.Fatalf("SubmitSweep: %v", err)
	}
	return res
}

func storedJob(t *testing.T, st store.Store, id int64) domain.Job {
	t.Helper()
	j, err := st.GetJob(context.Background(), id)
	if err != nil {
		t.Fatalf("GetJob(%d): %v", id, err)
	}
	return j
}

func TestSubmitAfterHidesJobsTheCallerCannotRead(t *testing.T) {
	e := compareEnv{newAuditEnv(t), t}
	ctx := context.Background()
	if _, err := e.svc.Pools.SetQuota(ctx, admin, domain.Quota{Project: "vision", Pool: "default",
		Guaranteed: domain.Limits{CPUs: 8, Memory: 32 << 30}, MaxPriority: domain.PriorityUrgent}); err != nil {
		t.Fatal(err)
	}
	hidden := submitJob(t, e.svc, admin, wfJob+"project: vision\n")
	bob := service.Principal{Subject: "bob", Projects: []domain.ProjectRole{{Project: "default", Role: domain.RoleMember}}}
	missing := hidden.ID + 1000

	msg := func(id int64) string {
		t.Helper()
		_, _, err := e.svc.Jobs.Submit(ctx, bob, service.SubmitInput{Doc: []byte(wfJob + fmt.Sprintf("after: [{job: %d, on: succeeded}]\n", id))})
		fe := fieldErr(t, err, "after[0].job")
		return strings.ReplaceAll(fe, strconv.FormatInt(id, 10), "ID")
	}
	if a, b := msg(hidden.ID), msg(missing); a != b {
		t.Errorf("after: a job of another project says %q, a missing job %q; want the same (no existence leak)", a, b)
	}
	// from_job, too.
	inMsg := func(id int64) string {
		t.Helper()
		_, _, err := e.svc.Jobs.Submit(ctx, bob, service.SubmitInput{Doc: []byte(wfJob + fmt.Sprintf("inputs: [{from_job: %d, path: model/}]\n", id))})
		fe := fieldErr(t, err, "inputs[0].from_job")
		return strings.ReplaceAll(fe, strconv.FormatInt(id, 10), "ID")
	}
	if a, b := inMsg(hidden.ID), inMsg(missing); a != b {
		t.Errorf("from_job: a job of another project says %q, a missing job %q; want the same", a, b)
	}
	// And a sweep.
	sw := submitSweep(t, e, admin, wfJob+"project: vision\nsweep: {params: {lr: [\"0.1\"]}}\n")
	_, _, err := e.svc.Jobs.Submit(ctx, bob, service.SubmitInput{Doc: []byte(wfJob + fmt.Sprintf("after: [{sweep: %d, on: ended}]\n", sw.Sweep.ID))})
	hid := strings.ReplaceAll(fieldErr(t, err, "after[0].sweep"), strconv.FormatInt(sw.Sweep.ID, 10), "ID")
	_, _, err = e.svc.Jobs.Submit(ctx, bob, service.SubmitInput{Doc: []byte(wfJob + "after: [{sweep: 9999, on: ended}]\n")})
	if miss := strings.ReplaceAll(fieldErr(t, err, "after[0].sweep"), "9999", "ID"); hid != miss {
		t.Errorf("after: a hidden sweep says %q, a missing one %q; want the same", hid, miss)
	}
	if n := jobCount(t, e.st); n != 2 {
		t.Errorf("%d jobs stored, want 2 (the refused submits store nothing)", n)
	}
}

func TestSubmitAfterStoresTheJobHeldForItsDependency(t *testing.T) {
	e := compareEnv{newAuditEnv(t), t}
	dep := submitJob(t, e.svc, admin, wfJob)
	job := submitJob(t, e.svc, admin, wfJob+fmt.Sprintf("after: [{job: %d, on: ended}]\n", dep.ID))
	want := fmt.Sprintf("waits for job %d to end", dep.ID)
	if job.State != domain.JobHeld || job.Reason != domain.ReasonDependency || job.Message != want {
		t.Errorf("job: %s, %s, %q; want held, Dependency, %q", job.State, job.Reason, job.Message, want)
	}
	waits, err := e.st.WaitsOf(context.Background(), job.ID)
	if err != nil || !reflect.DeepEqual(waits, []domain.Dependency{{Job: dep.ID, On: domain.DependEnded}}) {
		t.Errorf("WaitsOf = %+v, %v; want job %d on ended", waits, err, dep.ID)
	}
	if d := storedJob(t, e.st, dep.ID); d.State != domain.JobQueued {
		t.Errorf("the job without after: is %s, want queued", d.State)
	}
}

func TestSweepLabelsAreThePlatforms(t *testing.T) {
	e := compareEnv{newAuditEnv(t), t}
	ctx := context.Background()
	for _, k := range []string{domain.SweepLabel, domain.ArrayIndexLabel} {
		_, _, err := e.svc.Jobs.Submit(ctx, admin, service.SubmitInput{Doc: []byte(wfJob + fmt.Sprintf("labels: {%s: \"3\"}\n", k))})
		if fe := fieldErr(t, err, "labels."+k); !strings.Contains(fe, "set by the platform") {
			t.Errorf("labels.%s: %q; want it to say the platform sets it", k, fe)
		}
	}
	sw := submitSweep(t, e, admin, wfJob+"labels: {team: vision}\nsweep: {params: {lr: [\"0.1\", \"0.2\"]}}\n")
	member := storedJob(t, e.st, sw.Jobs[1])
	if member.Spec.Labels[domain.SweepLabel] != strconv.FormatInt(sw.Sweep.ID, 10) || member.Spec.Labels[domain.ArrayIndexLabel] != "1" {
		t.Fatalf("member labels = %v; want the sweep %d and index 1", member.Spec.Labels, sw.Sweep.ID)
	}
	re, created, err := e.svc.Jobs.Rerun(ctx, admin, member.ID, service.RerunInput{})
	if err != nil || !created {
		t.Fatalf("Rerun of a member: created=%v, %v", created, err)
	}
	if _, ok := re.Spec.Labels[domain.SweepLabel]; ok {
		t.Errorf("re-run labels = %v; want no %s", re.Spec.Labels, domain.SweepLabel)
	}
	if _, ok := re.Spec.Labels[domain.ArrayIndexLabel]; ok {
		t.Errorf("re-run labels = %v; want no %s", re.Spec.Labels, domain.ArrayIndexLabel)
	}
	if re.Spec.Labels["team"] != "vision" || re.Spec.Params["lr"] != "0.2" {
		t.Errorf("re-run: labels %v params %v; want team=vision kept and lr=0.2", re.Spec.Labels, re.Spec.Params)
	}
	if of, err := e.st.SweepOf(ctx, re.ID); err != nil || of != 0 {
		t.Errorf("SweepOf(re-run) = %d, %v; want 0 (a job of its own)", of, err)
	}
}

func TestFromJobReadsTheParentsOutputs(t *testing.T) {
	e := compareEnv{newAuditEnv(t), t}
	ctx := context.Background()
	parent := submitJob(t, e.svc, admin, wfJob)
	if parent.OutputDir == "" {
		t.Fatal("the parent has no output directory")
	}
	child := submitJob(t, e.svc, admin, wfJob+fmt.Sprintf("inputs: [{from_job: %d, path: model/best}]\n", parent.ID))
	in := child.Spec.Inputs[0]
	pid := strconv.FormatInt(parent.ID, 10)
	if want := filepath.Join(parent.OutputDir, "model/best"); in.Path != want || in.Name != "job-"+pid || in.Version != "job-"+pid {
		t.Errorf("input = %+v; want path %s, name and version job-%s", in, want, pid)
	}
	if !reflect.DeepEqual(child.Spec.After, []domain.Dependency{{Job: parent.ID, On: domain.DependSucceeded}}) {
		t.Errorf("after = %+v; want job %d on succeeded, added for from_job", child.Spec.After, parent.ID)
	}
	if child.State != domain.JobHeld || child.Reason != domain.ReasonDependency {
		t.Errorf("child is %s (%s); want held for Dependency", child.State, child.Reason)
	}
	// An after: that names the parent already is kept as given.
	kept := submitJob(t, e.svc, admin, wfJob+fmt.Sprintf("inputs: [{name: data, from_job: %d}]\nafter: [{job: %d, on: ended}]\n", parent.ID, parent.ID))
	if !reflect.DeepEqual(kept.Spec.After, []domain.Dependency{{Job: parent.ID, On: domain.DependEnded}}) {
		t.Errorf("after = %+v; want only the given job %d on ended", kept.Spec.After, parent.ID)
	}
	if in := kept.Spec.Inputs[0]; in.Name != "data" || in.Path != parent.OutputDir {
		t.Errorf("input = %+v; want name data, path %s (the whole output directory)", in, parent.OutputDir)
	}
	// A path out of the parent's outputs is refused, relative or not.
	for _, p := range []string{"../x", "/../x", "model/../../x"} {
		_, _, err := e.svc.Jobs.Submit(ctx, admin, service.SubmitInput{Doc: []byte(wfJob + fmt.Sprintf("inputs: [{from_job: %d, path: %q}]\n", parent.ID, p))})
		if fe := fieldErr(t, err, "inputs[0].path"); !strings.Contains(fe, "..") && !strings.Contains(fe, "leads out") {
			t.Errorf("path %q: %q; want it refused as leading out", p, fe)
		}
	}
}

const sweepDoc = `name: grid
entrypoint: [python3, train.py]
resources: {cpus: 1}
params: {lr: "0.5", epochs: "3"}
labels: {team: vision}
sweep:
  params: {lr: ["0.1", "0.01", "0.001"], wd: ["0", "1"]}
  max_parallel: 2
`

func TestSubmitSweepStoresItsMembers(t *testing.T) {
	e := compareEnv{newAuditEnv(t), t}
	ctx := context.Background()
	res := submitSweep(t, e, admin, sweepDoc)
	sw := res.Sweep
	if sw.ID == 0 || sw.Members != 6 || len(res.Jobs) != 6 || sw.MaxParallel != 2 || sw.Method != domain.SweepGrid {
		t.Fatalf("sweep = %+v with %d jobs; want a grid of 6 members, max_parallel 2", sw, len(res.Jobs))
	}
	type combo struct{ lr, wd string }
	want := []combo{{"0.1", "0"}, {"0.1", "1"}, {"0.01", "0"}, {"0.01", "1"}, {"0.001", "0"}, {"0.001", "1"}}
	for i, id := range res.Jobs {
		j := storedJob(t, e.st, id)
		if got := (combo{j.Spec.Params["lr"], j.Spec.Params["wd"]}); got != want[i] || j.Spec.Params["epochs"] != "3" {
			t.Errorf("member %d params = %v; want lr=%s wd=%s (the sweep's over the spec's) and epochs=3", i, j.Spec.Params, want[i].lr, want[i].wd)
		}
		if j.Spec.Labels["team"] != "vision" || j.Spec.Labels[domain.SweepLabel] != strconv.FormatInt(sw.ID, 10) ||
			j.Spec.Labels[domain.ArrayIndexLabel] != strconv.Itoa(i) {
			t.Errorf("member %d labels = %v; want team, the sweep's id and index %d", i, j.Spec.Labels, i)
		}
		if j.Spec.Sweep != nil {
			t.Errorf("member %d keeps the sweep: section; a member is one job", i)
		}
		wantState, wantReason := domain.JobQueued, domain.ReasonSubmitted
		if i >= 2 {
			wantState, wantReason = domain.JobHeld, domain.ReasonSweepLimit
		}
		if j.State != wantState || j.Reason != wantReason {
			t.Errorf("member %d is %s (%s); want %s (%s)", i, j.State, j.Reason, wantState, wantReason)
		}
	}
	got, err := e.st.GetSweep(ctx, sw.ID)
	if err != nil || got.Members != 6 || got.Submitter != admin.Subject || got.Project != "default" {
		t.Errorf("stored sweep = %+v, %v", got, err)
	}
	if recs := e.records(t, "job.submit"); len(recs) != 1 || recs[0].Target != "sweep/"+strconv.FormatInt(sw.ID, 10) {
		t.Errorf("job.submit records = %+v; want one for sweep/%d", recs, sw.ID)
	}
}

func TestSubmitSweepArray(t *testing.T) {
	e := compareEnv{newAuditEnv(t), t}
	ctx := context.Background()
	res, err := e.svc.Jobs.SubmitSweep(ctx, admin, service.SweepInput{Doc: []byte(wfJob), Array: "3,5-6%1"})
	if err != nil {
		t.Fatalf("SubmitSweep(array): %v", err)
	}
	if res.Sweep.Method != domain.SweepArray || res.Sweep.MaxParallel != 1 || len(res.Jobs) != 3 {
		t.Fatalf("array = %+v, %d jobs; want 3 members, max_parallel 1", res.Sweep, len(res.Jobs))
	}
	for i, idx := range []string{"3", "5", "6"} {
		if got := storedJob(t, e.st, res.Jobs[i]).Spec.Labels[domain.ArrayIndexLabel]; got != idx {
			t.Errorf("member %d has index %s, want %s", i, got, idx)
		}
	}
	// sweep: and --array together are refused.
	_, err = e.svc.Jobs.SubmitSweep(ctx, admin, service.SweepInput{Doc: []byte(sweepDoc), Array: "0-3"})
	fieldErr(t, err, "array")
	_, err = e.svc.Jobs.SubmitSweep(ctx, admin, service.SweepInput{Doc: []byte(wfJob), Array: "5-2"})
	fieldErr(t, err, "array")
	// Neither is refused, naming both ways.
	_, err = e.svc.Jobs.SubmitSweep(ctx, admin, service.SweepInput{Doc: []byte(wfJob)})
	if fe := fieldErr(t, err, "sweep"); !strings.Contains(fe, "--array") {
		t.Errorf("no sweep: %q; want it to name --array", fe)
	}
	if n := jobCount(t, e.st); n != 3 {
		t.Errorf("%d jobs stored, want 3", n)
	}
}

// TestSubmitSweepIdempotencyKey: a repeat with the key returns the first
// sweep and its members, stores nothing and audits nothing.
func TestSubmitSweepIdempotencyKey(t *testing.T) {
	e := compareEnv{newAuditEnv(t), t}
	ctx := context.Background()
	first, err := e.svc.Jobs.SubmitSweep(ctx, admin, service.SweepInput{Doc: []byte(wfJob), Array: "0-3%2", IdempotencyKey: "nightly"})
	if err != nil || !first.Created {
		t.Fatalf("SubmitSweep: created %v, %v", first.Created, err)
	}
	audits := len(e.records(t, ""))
	again, err := e.svc.Jobs.SubmitSweep(ctx, admin, service.SweepInput{Doc: []byte(wfJob), Array: "0-9", IdempotencyKey: "nightly"})
	if err != nil {
		t.Fatalf("SubmitSweep again: %v", err)
	}
	if again.Created || again.Sweep.ID != first.Sweep.ID || !slices.Equal(again.Jobs, first.Jobs) || again.Sweep.MaxParallel != 2 {
		t.Errorf("replay: created %v, sweep %d %v (max_parallel %d); want sweep %d %v as first stored", again.Created, again.Sweep.ID, again.Jobs,
			again.Sweep.MaxParallel, first.Sweep.ID, first.Jobs)
	}
	if n := jobCount(t, e.st); n != 4 {
		t.Errorf("%d jobs stored, want 4", n)
	}
	if n := len(e.records(t, "")); n != audits {
		t.Errorf("the replay wrote %d audit records, want none", n-audits)
	}
	_, err = e.svc.Jobs.SubmitSweep(ctx, admin, service.SweepInput{Doc: []byte(wfJob), Array: "0-1", IdempotencyKey: strings.Repeat("k", 201)})
	fieldErr(t, err, "Idempotency-Key")
}

func TestSubmitRefusesASweepSpec(t *testing.T) {
	e := compareEnv{newAuditEnv(t), t}
	_, _, err := e.svc.Jobs.Submit(context.Background(), admin, service.SubmitInput{Doc: []byte(sweepDoc)})
	if fe := fieldErr(t, err, "sweep"); !strings.Contains(fe, "/v1/sweeps") {
		t.Errorf("sweep: %q; want it to point to /v1/sweeps", fe)
	}
	if n := jobCount(t, e.st); n != 0 {
		t.Errorf("%d jobs stored, want 0", n)
	}
}

func TestCancelSweepCancelsEveryLiveMember(t *testing.T) {
	e := compareEnv{newAuditEnv(t), t}
	ctx := context.Background()
	res := submitSweep(t, e, admin, sweepDoc) // 2 queued, 4 held
	e.start(res.Jobs[0], 1)
	e.start(res.Jobs[1], 1)
	e.end(res.Jobs[1], 1, domain.MoveSucceed(), domain.AttemptSucceeded)
	// The loop would now release member 2; do as it does.
	e.apply(store.Change{JobID: res.Jobs[2], Move: domain.MoveRelease(), Reason: domain.ReasonReleased, At: e.clk.Now()})

	v, err := e.svc.Jobs.CancelSweep(ctx, admin, res.Sweep.ID, "wrong grid")
	if err != nil {
		t.Fatalf("CancelSweep: %v", err)
	}
	if v.CanceledAt.IsZero() || v.CanceledBy != admin.Subject {
		t.Errorf("sweep: CanceledAt %v by %q; want now by admin", v.CanceledAt, v.CanceledBy)
	}
	running := storedJob(t, e.st, res.Jobs[0])
	if running.State != domain.JobRunning || !running.CancelRequested {
		t.Errorf("running member: %s, cancel requested %v; want running with a cancel request", running.State, running.CancelRequested)
	}
	if done := storedJob(t, e.st, res.Jobs[1]); done.State != domain.JobSucceeded {
		t.Errorf("ended member: %s, want succeeded (unchanged)", done.State)
	}
	for _, id := range res.Jobs[2:] {
		j := storedJob(t, e.st, id)
		if j.State != domain.JobCanceled || j.Reason != domain.ReasonCanceledByUser || !strings.Contains(j.Message, "wrong grid") {
			t.Errorf("member %d: %s (%s) %q; want canceled by user with the reason", id, j.State, j.Reason, j.Message)
		}
	}
	if _, err := e.svc.Jobs.CancelSweep(ctx, admin, res.Sweep.ID, ""); err != nil {
		t.Fatalf("second CancelSweep: %v", err)
	}
	target := "sweep/" + strconv.FormatInt(res.Sweep.ID, 10)
	var n int
	for _, r := range e.records(t, "job.cancel") {
		if r.Target == target {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d job.cancel records for %s, want 1", n, target)
	}
	// Someone who cannot read the sweep is told it does not exist.
	eve := service.Principal{Subject: "eve", Projects: []domain.ProjectRole{{Project: "audio", Role: domain.RoleMember}}}
	if _, err := e.svc.Jobs.CancelSweep(ctx, eve, res.Sweep.ID, ""); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("CancelSweep by an outsider: %v; want ErrNotFound", err)
	}
}

func TestReleaseRefusesAPlatformHold(t *testing.T) {
	e := compareEnv{newAuditEnv(t), t}
	res := submitSweep(t, e, admin, sweepDoc)
	_, err := e.svc.Jobs.Release(context.Background(), admin, res.Jobs[3])
	if !errors.Is(err, domain.ErrConflict) || !strings.Contains(err.Error(), string(domain.ReasonSweepLimit)) {
		t.Errorf("Release of a member held for max_parallel: %v; want a conflict naming %s", err, domain.ReasonSweepLimit)
	}
	if j := storedJob(t, e.st, res.Jobs[3]); j.State != domain.JobHeld {
		t.Errorf("member is %s, want still held", j.State)
	}
	dep := submitJob(t, e.svc, admin, wfJob)
	waiter := submitJob(t, e.svc, admin, wfJob+fmt.Sprintf("after: [{job: %d, on: succeeded}]\n", dep.ID))
	if _, err := e.svc.Jobs.Release(context.Background(), admin, waiter.ID); !errors.Is(err, domain.ErrConflict) ||
		!strings.Contains(err.Error(), string(domain.ReasonDependency)) {
		t.Errorf("Release of a job waiting for another: %v; want a conflict naming %s", err, domain.ReasonDependency)
	}
}

func TestGetSweepPicksTheBestMember(t *testing.T) {
	for _, c := range []struct {
		goal string
		best int // the member index
	}{{"minimize", 1}, {"maximize", 2}} {
		t.Run(c.goal, func(t *testing.T) {
			e := compareEnv{newAuditEnv(t), t}
			ctx := context.Background()
			res := submitSweep(t, e, admin, "name: s\nentrypoint: [python3, train.py]\nresources: {cpus: 1}\n"+
				"sweep: {params: {lr: [\"0.1\", \"0.2\", \"0.3\", \"0.4\"]}, objective: {metric: val_loss, goal: "+c.goal+"}}\n")
			// member 0: 0.5 then 0.4; member 1: 0.2 at step 3; member 2:
			// 0.9; member 3 never ran.
			vals := [][]float64{{0.5, 0.4}, {0.3, 0.25, 0.2}, {0.9}}
			for i, vs := range vals {
				e.start(res.Jobs[i], 1)
				for s, v := range vs {
					e.report(res.Jobs[i], 1, step(int64(s+1), "val_loss", v, "other", 100.0))
				}
			}
			v, err := e.svc.Jobs.GetSweep(ctx, admin, res.Sweep.ID)
			if err != nil {
				t.Fatalf("GetSweep: %v", err)
			}
			wantVal := map[string]float64{"minimize": 0.2, "maximize": 0.9}[c.goal]
			wantStep := map[string]int64{"minimize": 3, "maximize": 1}[c.goal]
			if v.Best == nil {
				t.Fatalf("Best = nil; want member %d", c.best)
			}
			if v.Best.JobID != res.Jobs[c.best] || v.Best.Index != c.best || v.Best.Value != wantVal || v.Best.Step != wantStep ||
				v.Best.Metric != "val_loss" || v.Best.Params["lr"] != []string{"0.1", "0.2", "0.3", "0.4"}[c.best] {
				t.Errorf("Best = %+v; want member %d (job %d) with %v at step %d", *v.Best, c.best, res.Jobs[c.best], wantVal, wantStep)
			}
			if v.Counts[domain.JobRunning] != 3 || v.Counts[domain.JobQueued] != 1 || v.State != domain.JobRunning {
				t.Errorf("counts %v state %s; want 3 running, 1 queued, running", v.Counts, v.State)
			}
		})
	}
	// Without an objective there is no best.
	e := compareEnv{newAuditEnv(t), t}
	res := submitSweep(t, e, admin, wfJob+"sweep: {params: {lr: [\"0.1\"]}}\n")
	e.start(res.Jobs[0], 1)
	e.report(res.Jobs[0], 1, step(1, "val_loss", 0.1))
	if v, err := e.svc.Jobs.GetSweep(context.Background(), admin, res.Sweep.ID); err != nil || v.Best != nil {
		t.Errorf("GetSweep without an objective: best %+v, %v; want none", v.Best, err)
	}
	if _, err := e.svc.Jobs.GetSweep(context.Background(), admin, res.Sweep.ID+100); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("GetSweep(unknown) = %v, want ErrNotFound", err)
	}
}

// ListSweeps shows a member only the sweeps it may see: its own.
func TestListSweepsIsRestricted(t *testing.T) {
	e := compareEnv{newAuditEnv(t), t}
	ctx := context.Background()
	bob := service.Principal{Subject: "bob", Projects: []domain.ProjectRole{{Project: "default", Role: domain.RoleMember}}}
	submitSweep(t, e, admin, wfJob+"sweep: {params: {lr: [\"0.1\"]}}\n")
	his := submitSweep(t, e, bob, wfJob+"sweep: {params: {lr: [\"0.1\"]}}\n")
	eve := service.Principal{Subject: "eve", Projects: []domain.ProjectRole{{Project: "audio", Role: domain.RoleMember}}}
	got, err := e.svc.Jobs.ListSweeps(ctx, eve, "", 0)
	if err != nil || len(got) != 0 {
		t.Errorf("ListSweeps by an outsider = %+v, %v; want none", got, err)
	}
	got, err = e.svc.Jobs.ListSweeps(ctx, bob, "", 0)
	if err != nil || len(got) != 1 || got[0].ID != his.Sweep.ID {
		t.Errorf("ListSweeps by a member = %+v, %v; want only his sweep %d", got, err, his.Sweep.ID)
	}
	if got, err := e.svc.Jobs.ListSweeps(ctx, admin, "", 0); err != nil || len(got) != 2 {
		t.Errorf("ListSweeps by admin = %+v, %v; want both", got, err)
	}
}

// A re-run of a job that reads another's outputs reads the same files: its
// snapshot holds the resolved path, which must not be resolved again.
func TestRerunOfAFromJobChildKeepsItsInputPath(t *testing.T) {
	e := compareEnv{newAuditEnv(t), t}
	ctx := context.Background()
	parent := submitJob(t, e.svc, admin, wfJob)
	child := submitJob(t, e.svc, admin, wfJob+fmt.Sprintf("inputs: [{from_job: %d, path: model/best}]\n", parent.ID))
	re, created, err := e.svc.Jobs.Rerun(ctx, admin, child.ID, service.RerunInput{})
	if err != nil || !created {
		t.Fatalf("Rerun: created=%v, %v", created, err)
	}
	if got, want := re.Spec.Inputs, child.Spec.Inputs; !reflect.DeepEqual(got, want) {
		t.Errorf("re-run inputs = %+v; want the child's %+v", got, want)
	}
	if !reflect.DeepEqual(re.Spec.After, child.Spec.After) {
		t.Errorf("re-run after = %+v; want the child's %+v", re.Spec.After, child.Spec.After)
	}
}

// A member's own sweep is listed even when others' sweeps are newer.
func TestListSweepsFindsAMembersSweepBehindOthers(t *testing.T) {
	e := compareEnv{newAuditEnv(t), t}
	bob := service.Principal{Subject: "bob", Projects: []domain.ProjectRole{{Project: "default", Role: domain.RoleMember}}}
	his := submitSweep(t, e, bob, wfJob+"sweep: {params: {lr: [\"0.1\"]}}\n")
	submitSweep(t, e, admin, wfJob+"sweep: {params: {lr: [\"0.1\"]}}\n")
	got, err := e.svc.Jobs.ListSweeps(context.Background(), bob, "", 1)
	if err != nil || len(got) != 1 || got[0].ID != his.Sweep.ID {
		t.Errorf("ListSweeps(limit 1) by bob = %+v, %v; want his sweep %d", got, err, his.Sweep.ID)
	}
}
