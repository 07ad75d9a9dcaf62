package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store"
)

// compareEnv is an auditEnv with helpers that move a job's attempts along
// and report its metrics, as the control loop and a job token would.
type compareEnv struct {
	auditEnv
	t *testing.T
}

func (e compareEnv) apply(changes ...store.Change) {
	e.t.Helper()
	errs, err := e.st.Apply(context.Background(), changes)
	if err == nil {
		err = errors.Join(errs...)
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

// start creates attempt n of job id, running from now.
func (e compareEnv) start(id int64, n int) {
	e.t.Helper()
	e.apply(store.Change{JobID: id, Move: domain.MoveStart(), At: e.clk.Now(),
		Attempt: &store.AttemptChange{Number: n, Create: true, To: domain.AttemptStarting, Node: "n1"}},
		store.Change{JobID: id, Move: domain.MoveRun(), At: e.clk.Now(),
			Attempt: &store.AttemptChange{Number: n, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}})
}

// end ends job id's running attempt n now: the job moves by move.
func (e compareEnv) end(id int64, n int, move domain.Move, to domain.AttemptState) {
	e.t.Helper()
	e.apply(store.Change{JobID: id, Move: move, At: e.clk.Now(),
		Attempt: &store.AttemptChange{Number: n, From: []domain.AttemptState{domain.AttemptRunning}, To: to}})
}

func (e compareEnv) report(id int64, n int, points ...service.MetricsInput) {
	e.t.Helper()
	if _, err := e.svc.Jobs.ReportMetrics(context.Background(), admin, id, n, points); err != nil {
		e.t.Fatal(err)
	}
}

func step(s int64, kv ...any) service.MetricsInput {
	m := map[string]float64{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1].(float64)
	}
	return service.MetricsInput{Step: s, Metrics: m}
}

func TestCompareListsOnlyTheDifferencesAndSummarisesMetrics(t *testing.T) {
	e := compareEnv{newAuditEnv(t), t}
	ctx := context.Background()
	a := submitJob(t, e.svc, admin, "name: sweep\nentrypoint: [python3, train.py]\nparams: {lr: \"0.1\", epochs: \"3\"}\nresources: {cpus: 1}\nlabels: {team: vision}\n")
	b := submitJob(t, e.svc, admin, "name: sweep\nentrypoint: [python3, train.py]\nparams: {lr: \"0.2\", epochs: \"3\", wd: \"0.01\"}\nresources: {cpus: 2}\nlabels: {team: vision}\n")

	// a: attempt 1 runs 1m and fails, attempt 2 runs 2m and succeeds;
	// the 30s it waited in between is not run time.
	e.start(a.ID, 1)
	e.report(a.ID, 1, step(1, "loss", 0.9, "acc", 0.1), step(2, "loss", 0.5))
	e.clk.Advance(time.Minute)
	e.end(a.ID, 1, domain.MoveRequeue(), domain.AttemptFailed)
	e.clk.Advance(30 * time.Second)
	e.start(a.ID, 2)
	// More points than the summary reads: the lowest sits in the middle,
	// and attempt 2 repeats step 2 before it goes on.
	var pts []service.MetricsInput
	for s := int64(2); s <= 40; s++ {
		v := 0.4
		if s == 17 {
			v = 0.05
		}
		pts = append(pts, step(s, "loss", v, "acc", float64(s)/100))
	}
	e.report(a.ID, 2, pts...)
	e.clk.Advance(10 * time.Second)
	e.report(a.ID, 2, step(40, "loss", 0.3)) // a later report of step 40: it is the last
	e.clk.Advance(110 * time.Second)
	e.end(a.ID, 2, domain.MoveSucceed().Only(domain.JobRunning), domain.AttemptSucceeded)
	// b is still running: its run time counts to now.
	e.start(b.ID, 1)
	e.report(b.ID, 1, step(10, "loss", 1.5), step(20, "loss", 1.2))
	e.clk.Advance(45 * time.Second)

	got, err := e.svc.Jobs.Compare(ctx, admin, []int64{b.ID, a.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Jobs) != 2 || got.Jobs[0].Job.ID != b.ID || got.Jobs[1].Job.ID != a.ID {
		t.Fatalf("jobs not in the order asked: %+v", got.Jobs)
	}
	diff := map[string][]string{}
	var order []string
	for _, d := range got.Differences {
		order = append(order, d.Path)
		for _, v := range d.Values {
			diff[d.Path] = append(diff[d.Path], string(v))
		}
	}
	want := map[string][]string{
		"params.lr":      {`"0.2"`, `"0.1"`},
		"params.wd":      {`"0.01"`, ""},
		"resources.cpus": {"2", "1"},
	}
	if !reflect.DeepEqual(diff, want) {
		t.Errorf("differences = %q, want exactly %q", diff, want)
	}
	if !reflect.DeepEqual(order, []string{"params.lr", "params.wd", "resources.cpus"}) {
		t.Errorf("differences in order %q, want params first, then by path", order)
	}
	if d := got.Differences[1]; d.Values[1] != nil {
		t.Errorf("a's absent params.wd = %q, want nil", d.Values[1])
	}

	jb, ja := got.Jobs[0], got.Jobs[1]
	if ja.RunTime != 3*time.Minute || jb.RunTime != 45*time.Second {
		t.Errorf("run times: a %s (want 3m0s: 1m + 2m, not the wait), b %s (want 45s, until now)", ja.RunTime, jb.RunTime)
	}
	if ja.Job.Spec.Env != "host@1" || ja.Job.State != domain.JobSucceeded || jb.Job.State != domain.JobRunning {
		t.Errorf("job a: env %q state %s; job b: state %s", ja.Job.Spec.Env, ja.Job.State, jb.Job.State)
	}
	wantA := []service.MetricSummary{
		{Key: "acc", LastStep: 40, Last: 0.4, Min: 0.02, Max: 0.4},
		{Key: "loss", LastStep: 40, Last: 0.3, Min: 0.05, Max: 0.9},
	}
	if !reflect.DeepEqual(ja.Metrics, wantA) {
		t.Errorf("a's metrics = %+v, want %+v", ja.Metrics, wantA)
	}
	wantB := []service.MetricSummary{{Key: "loss", LastStep: 20, Last: 1.2, Min: 1.2, Max: 1.5}}
	if !reflect.DeepEqual(jb.Metrics, wantB) {
		t.Errorf("b's metrics = %+v, want %+v", jb.Metrics, wantB)
	}
}

// Two jobs of the same spec differ in nothing, however their values were
// written; a spec value that is a list compares as a whole.
func TestCompareSameSpecHasNoDifferences(t *testing.T) {
	e := newAuditEnv(t)
	a := submitJob(t, e.svc, admin, "name: same\nentrypoint: [python3, train.py]\nparams: {lr: \"0.1\"}\n")
	b := submitJob(t, e.svc, admin, "{\"name\": \"same\", \"entrypoint\": [\"python3\", \"train.py\"], \"params\": {\"lr\": \"0.1\"}}")
	c := submitJob(t, e.svc, admin, "name: same\nentrypoint: [python3, train.py, --fast]\nparams: {lr: \"0.1\"}\n")
	got, err := e.svc.Jobs.Compare(context.Background(), admin, []int64{a.ID, b.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Differences) != 0 {
		t.Errorf("differences of one spec written twice: %+v", got.Differences)
	}
	if len(got.Jobs[0].Metrics) != 0 || got.Jobs[0].RunTime != 0 {
		t.Errorf("a job that never ran: %+v", got.Jobs[0])
	}
	got, err = e.svc.Jobs.Compare(context.Background(), admin, []int64{a.ID, b.ID, c.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Differences) != 1 || got.Differences[0].Path != "entrypoint" ||
		string(got.Differences[0].Values[2]) != `["python3","train.py","--fast"]` || string(got.Differences[0].Values[0]) != `["python3","train.py"]` {
		t.Errorf("differences = %+v, want the entrypoint as a whole", got.Differences)
	}
}

func TestCompareRefusesBadJobLists(t *testing.T) {
	e := newAuditEnv(t)
	a := submitJob(t, e.svc, admin, "name: a\nentrypoint: [\"true\"]\n")
	b := submitJob(t, e.svc, admin, "name: b\nentrypoint: [\"true\"]\n")
	many := make([]int64, service.MaxCompareJobs+1)
	for i := range many {
		many[i] = int64(i + 1)
	}
	for name, c := range map[string]struct {
		ids  []int64
		want string
	}{
		"none":      {nil, "names 0 job(s); name 2 to 20 jobs"},
		"one":       {[]int64{a.ID}, "names 1 job(s); name 2 to 20 jobs"},
		"too many":  {many, "names 21 jobs; compare at most 20"},
		"twice":     {[]int64{a.ID, b.ID, a.ID}, fmt.Sprintf("names job %d twice", a.ID)},
		"not an id": {[]int64{a.ID, 0}, "0 is not a job id"},
	} {
		_, err := e.svc.Jobs.Compare(context.Background(), admin, c.ids)
		var fe domain.FieldErrors
		if !errors.As(err, &fe) || fe[0].Path != "jobs" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want a field error on jobs saying %q", name, err, c.want)
		}
	}
}

// Every job must be readable by the caller; one that is not answers as a
// missing one does, naming it.
func TestCompareAuthorization(t *testing.T) {
	e := newAuditEnv(t)
	ctx := context.Background()
	member := func(name string) service.Principal {
		return service.Principal{Subject: name, Projects: []domain.ProjectRole{{Project: "default", Role: domain.RoleMember}}}
	}
	alice, bob := member("alice"), member("bob")
	lead := service.Principal{Subject: "lena", Projects: []domain.ProjectRole{{Project: "default", Role: domain.RoleLead}}}
	ja := submitJob(t, e.svc, alice, "name: mine\nentrypoint: [\"true\"]\n")
	ja2 := submitJob(t, e.svc, alice, "name: mine2\nentrypoint: [\"true\"]\n")
	jb := submitJob(t, e.svc, bob, "name: his\nentrypoint: [\"true\"]\n")

	_, err := e.svc.Jobs.Compare(ctx, alice, []int64{ja.ID, jb.ID})
	if !errors.Is(err, domain.ErrNotFound) || !strings.Contains(err.Error(), fmt.Sprintf("job %d does not exist", jb.ID)) {
		t.Errorf("alice compares with bob's job: err = %v, want not found naming job %d", err, jb.ID)
	}
	_, err = e.svc.Jobs.Compare(ctx, alice, []int64{ja.ID, jb.ID + 100})
	if !errors.Is(err, domain.ErrNotFound) || !strings.Contains(err.Error(), fmt.Sprintf("job %d does not exist", jb.ID+100)) {
		t.Errorf("a missing job: err = %v, want not found", err)
	}
	if _, err := e.svc.Jobs.Compare(ctx, alice, []int64{ja.ID, ja2.ID}); err != nil {
		t.Errorf("alice compares her own jobs: %v", err)
	}
	if _, err := e.svc.Jobs.Compare(ctx, lead, []int64{ja.ID, jb.ID}); err != nil {
		t.Errorf("the project's lead compares both: %v", err)
	}
}

// The differences are those of the stored snapshots: every value a job's
// JSON holds keeps its JSON type.
func TestCompareValuesAreJSON(t *testing.T) {
	e := newAuditEnv(t)
	a := submitJob(t, e.svc, admin, "name: a\nentrypoint: [\"true\"]\npolicy: {timeout: 1h}\n")
	b := submitJob(t, e.svc, admin, "name: a\nentrypoint: [\"true\"]\npolicy: {timeout: 2h, priority: high}\n")
	got, err := e.svc.Jobs.Compare(context.Background(), admin, []int64{a.ID, b.ID})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range got.Differences {
		for _, v := range d.Values {
			if v != nil && !json.Valid(v) {
				t.Errorf("%s: %q is not JSON", d.Path, v)
			}
		}
	}
	var paths []string
	for _, d := range got.Differences {
		paths = append(paths, d.Path)
	}
	if !reflect.DeepEqual(paths, []string{"policy.priority", "policy.timeout"}) {
		t.Errorf("paths = %q", paths)
	}
}
