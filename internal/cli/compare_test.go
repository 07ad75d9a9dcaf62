package cli

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"trainyard/internal/api"
	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
)

// liveEnv is a real server (API, service, SQLite store) and a harness
// that runs the CLI against it, with the means to run jobs' attempts and
// report their metrics as the control loop and the jobs would.
type liveEnv struct {
	*harness
	svc *service.Service
	st  store.Store
}

var liveAdmin = service.Principal{Subject: "admin", Role: "admin"}

func newLiveEnv(t *testing.T) liveEnv {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	svc := service.New(service.Config{Store: st, ArtifactsRoot: filepath.Join(dir, "artifacts"), Logger: slog.New(slog.DiscardHandler)})
	token, err := svc.Identity.Bootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pool := domain.Pool{Name: "default", Nodes: []domain.Node{{Name: "n1", CPUs: 8, Memory: 32 << 30}}}
	if _, _, err := svc.Pools.PutPool(ctx, liveAdmin, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Pools.SetQuota(ctx, liveAdmin, domain.Quota{Project: "default", Pool: "default",
		Guaranteed: pool.Capacity(), MaxPriority: domain.PriorityUrgent}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler(api.Config{Service: svc}))
	t.Cleanup(func() { srv.Close(); st.Close() })
	h := &harness{t: t, srv: &fakeServer{t: t, srv: srv}, vars: map[string]string{
		EnvServer: srv.URL, EnvToken: token, "XDG_CONFIG_HOME": t.TempDir(), "NO_COLOR": "",
	}}
	return liveEnv{harness: h, svc: svc, st: st}
}

// run submits spec, starts its first attempt and reports loss values at
// steps 1, 2, … through the service.
func (e liveEnv) run(spec string, loss ...float64) int64 {
	e.t.Helper()
	ctx := context.Background()
	j, _, err := e.svc.Jobs.Submit(ctx, liveAdmin, service.SubmitInput{Doc: []byte(spec)})
	if err != nil {
		e.t.Fatal(err)
	}
	now := time.Now()
	errs, err := e.st.Apply(ctx, []store.Change{
		{JobID: j.ID, Move: domain.MoveStart(), At: now, Attempt: &store.AttemptChange{Create: true, Number: 1, To: domain.AttemptRunning}},
		{JobID: j.ID, Move: domain.MoveRun(), At: now}})
	if err == nil {
		err = errors.Join(errs...)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	var pts []service.MetricsInput
	for i, v := range loss {
		pts = append(pts, service.MetricsInput{Step: int64(i + 1), Metrics: map[string]float64{"loss": v}})
	}
	if len(pts) > 0 {
		if _, err := e.svc.Jobs.ReportMetrics(ctx, liveAdmin, j.ID, 1, pts); err != nil {
			e.t.Fatal(err)
		}
	}
	return j.ID
}

// trainerSpec is the sample trainer's smoke spec (examples/smoke.yaml) at
// learning rate lr.
func trainerSpec(lr string) string {
	return "name: smoke\nentrypoint: [python3, trainer.py, --steps, \"40\"]\nresources: {cpus: 1, memory: 256MiB}\n" +
		"params: {lr: \"" + lr + "\"}\npolicy: {timeout: 5m}\n"
}

// lineOf returns the line of out that starts (after spaces) with prefix.
func lineOf(out, prefix string) string {
	for l := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), prefix) {
			return l
		}
	}
	return ""
}

func TestCompareShowsDifferingParamsAndMetricSummaries(t *testing.T) {
	e := newLiveEnv(t)
	a := e.run(trainerSpec("0.05"), 2.5, 1.1, 0.7, 0.4)
	b := e.run(trainerSpec("0.2"), 2.4, 0.3, 0.6)
	out := e.mustRun(0, "compare", fmt.Sprint(a), fmt.Sprint(b)).stdout

	if f := strings.Fields(lineOf(out, "JOB")); len(f) != 3 || f[1] != fmt.Sprint(a) || f[2] != fmt.Sprint(b) {
		t.Errorf("header row %q, want JOB %d %d:\n%s", f, a, b, out)
	}
	if f := strings.Fields(lineOf(out, "params.lr")); len(f) != 3 || f[1] != "0.05" || f[2] != "0.2" {
		t.Errorf("params.lr row %q, want 0.05 and 0.2:\n%s", f, out)
	}
	if !strings.Contains(out, "Differences (1):") || strings.Contains(out, "entrypoint") || strings.Contains(out, "resources.") {
		t.Errorf("want exactly one difference, params.lr:\n%s", out)
	}
	for prefix, want := range map[string][]string{
		"loss": {"loss", "last", "0.4", "@4", "0.6", "@3"},
		"min":  {"min", "0.4", "0.3"},
		"max":  {"max", "2.5", "2.4"},
		"Env":  {"Env", "host@1", "host@1"},
		"Name": {"Name", "smoke", "smoke"},
	} {
		if f := strings.Fields(lineOf(out, prefix)); strings.Join(f, " ") != strings.Join(want, " ") {
			t.Errorf("%s row %q, want %q:\n%s", prefix, f, want, out)
		}
	}
	if f := strings.Fields(lineOf(out, "State")); len(f) != 3 || f[1] != "running" {
		t.Errorf("State row %q:\n%s", f, out)
	}

	// -o json is the API's comparison.
	var c apitypes.Comparison
	if err := json.Unmarshal([]byte(e.mustRun(0, "compare", fmt.Sprint(a), fmt.Sprint(b), "-o", "json").stdout), &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Differences) != 1 || c.Differences[0].Path != "params.lr" || string(c.Differences[0].Values[1]) != `"0.2"` ||
		len(c.Jobs) != 2 || c.Jobs[1].Metrics[0].Last != 0.6 {
		t.Errorf("-o json: %+v", c)
	}

	// Another run with the same spec differs in nothing, and a job that
	// reported nothing shows dashes.
	same := e.run(trainerSpec("0.05"))
	out = e.mustRun(0, "compare", fmt.Sprint(a), fmt.Sprint(same)).stdout
	if !strings.Contains(out, "Differences: none; the specs are the same") {
		t.Errorf("same spec:\n%s", out)
	}
	if f := strings.Fields(lineOf(out, "loss")); len(f) != 5 || f[4] != "-" {
		t.Errorf("loss row of a job without metrics %q:\n%s", f, out)
	}
}

// Four jobs with long names and values fit 120 columns, and text the jobs
// chose cannot drive the terminal.
func TestCompareTableFitsAndEscapes(t *testing.T) {
	long := strings.Repeat("x", 200)
	cmp := apitypes.Comparison{Currency: "EUR"}
	for i := range 4 {
		cmp.Jobs = append(cmp.Jobs, apitypes.ComparedJob{ID: int64(100000 + i), Name: strings.Repeat("n", 63), Project: "default",
			State: "failed", Reason: "ExitCode", Env: "pytorch-2.4@3", Code: &apitypes.CodeRef{SHA256: "sha256:" + strings.Repeat("ab", 32), Commit: strings.Repeat("c", 40), Dirty: true},
			Attempts: 2, Started: ptr(testNow), RunSeconds: 3725, Cost: "12.3456",
			Metrics: []apitypes.MetricSummary{{Key: "loss\x1b[2J" + long, LastStep: 1000000, Last: -1.2345678e-5, Min: -1.2345678e-5, Max: 3}}})
	}
	cmp.Differences = []apitypes.SpecDifference{
		{Path: "params." + long, Values: []json.RawMessage{json.RawMessage(`"` + long + `"`), nil, json.RawMessage(`"a\u001b[31mred"`), json.RawMessage(`["python3","x"]`)}},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/compare" || r.URL.Query().Get("jobs") != "100000,100001,100002,100003" {
			fail(w, http.StatusNotFound, "not_found", "unexpected "+r.URL.String())
			return
		}
		reply(w, http.StatusOK, cmp)
	}))
	t.Cleanup(srv.Close)
	h := &harness{t: t, srv: &fakeServer{t: t, srv: srv}, vars: map[string]string{EnvServer: srv.URL, EnvToken: testToken, "XDG_CONFIG_HOME": t.TempDir()}}
	out := h.mustRun(0, "compare", "100000", "100001", "100002", "100003").stdout
	for _, l := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(l); n > compareWidth {
			t.Errorf("line of %d characters, want at most %d: %q", n, compareWidth, l)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("an escape reached the terminal:\n%q", out)
	}
	for _, want := range []string{`a\x1b[31mred`, "(absent)", `["python3","x"]`, "cccccccccccc+dirty", "1h2m", "12.35", "Cost (EUR)", "failed (ExitCode)", `loss\x1b[2Jxxx`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestCompareUsageErrors(t *testing.T) {
	many := make([]string, maxCompareJobs+1)
	for i := range many {
		many[i] = fmt.Sprint(i + 1)
	}
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"one job":          {[]string{"compare", "1"}, "compare takes 2 to 20 job ids, got 1"},
		"too many":         {append([]string{"compare"}, many...), "compare takes 2 to 20 job ids, got 21"},
		"twice":            {[]string{"compare", "1", "2", "#1"}, "job 1 is named twice"},
		"not an id":        {[]string{"compare", "1", "x"}, `invalid job id "x"`},
		"metrics too many": {append([]string{"metrics"}, many...), "metrics takes 1 to 20 job ids, got 21"},
		"metrics twice":    {[]string{"metrics", "3", "3"}, "job 3 is named twice"},
	} {
		h := newHarness(t)
		r := h.mustRun(ExitUsage, c.args...)
		if !strings.Contains(r.stderr, c.want) {
			t.Errorf("%s: stderr %q, want %q", name, r.stderr, c.want)
		}
		if reqs := h.srv.seenRequests(); len(reqs) != 0 {
			t.Errorf("%s sent %v", name, reqs)
		}
	}
}

func TestCompareMissingJob(t *testing.T) {
	e := newLiveEnv(t)
	a := e.run(trainerSpec("0.1"))
	r := e.mustRun(ExitNotFound, "compare", fmt.Sprint(a), "99")
	if !strings.Contains(r.stderr, "job 99 does not exist") {
		t.Errorf("stderr %q", r.stderr)
	}
}

func TestMetricsOverlaysSeveralJobs(t *testing.T) {
	e := newLiveEnv(t)
	a := e.run(trainerSpec("0.05"), 8, 6, 4, 2, 1, 0.5, 0.25, 0)
	b := e.run(trainerSpec("0.2"), 8, 8, 8, 8) // half the steps, never lower than 8
	c := e.run(trainerSpec("0.3"))             // no metrics

	out := e.mustRun(0, "metrics", fmt.Sprint(a), fmt.Sprint(b), fmt.Sprint(c), "--key", "loss").stdout
	if !strings.HasPrefix(out, "loss: every job on one scale, steps 1 to 8, values 0 to 8\n") {
		t.Errorf("header:\n%s", out)
	}
	la := strings.Fields(lineOf(out, fmt.Sprint(a)))
	lb := strings.Fields(lineOf(out, fmt.Sprint(b)))
	lc := strings.Fields(lineOf(out, fmt.Sprint(c)))
	// One column per step (8 steps): a falls from the top to the bottom;
	// b stays at the top and ends after step 4, drawn on a's scale.
	if want := []string{fmt.Sprint(a), "█▆▄▂▁▁▁▁", "1-8", "8", "0", "0", "8"}; strings.Join(la, " ") != strings.Join(want, " ") {
		t.Errorf("job a: %q, want %q:\n%s", la, want, out)
	}
	if want := []string{fmt.Sprint(b), "████", "1-4", "8", "8", "8", "8"}; strings.Join(lb, " ") != strings.Join(want, " ") {
		t.Errorf("job b: %q, want %q:\n%s", lb, want, out)
	}
	if len(lc) != 7 || lc[1] != "(none)" {
		t.Errorf("job c: %q:\n%s", lc, out)
	}

	// CSV: long format, one row per job, key and step.
	rows, err := csv.NewReader(strings.NewReader(e.mustRun(0, "metrics", fmt.Sprint(a), fmt.Sprint(b), "-o", "csv").stdout)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1+8+4 || strings.Join(rows[0], ",") != "job,key,step,value,at,attempt" ||
		strings.Join(rows[1][:4], ",") != fmt.Sprintf("%d,loss,1,8", a) || strings.Join(rows[9][:4], ",") != fmt.Sprintf("%d,loss,1,8", b) {
		t.Errorf("csv rows: %q", rows)
	}
	// JSON: each job's series, in the order asked.
	var js []jobMetrics
	if err := json.Unmarshal([]byte(e.mustRun(0, "metrics", fmt.Sprint(b), fmt.Sprint(a), "-o", "json").stdout), &js); err != nil {
		t.Fatal(err)
	}
	if len(js) != 2 || js[0].Job != b || len(js[0].Series["loss"]) != 4 || len(js[1].Series["loss"]) != 8 {
		t.Errorf("json: %+v", js)
	}
	// Nothing at all under that key.
	out = e.mustRun(0, "metrics", fmt.Sprint(a), fmt.Sprint(c), "--key", "acc").stdout
	if !strings.HasPrefix(out, fmt.Sprintf(`jobs %d, %d have reported no metrics named "acc";`, a, c)) {
		t.Errorf("no such key: %q", out)
	}
	// One job keeps its own table.
	out = e.mustRun(0, "metrics", fmt.Sprint(a)).stdout
	if !strings.HasPrefix(out, "METRIC") || !strings.Contains(lineOf(out, "loss"), "1-8") {
		t.Errorf("one job:\n%s", out)
	}
	if r := e.mustRun(ExitNotFound, "metrics", fmt.Sprint(a), "99"); !strings.Contains(r.stderr, "job 99 does not exist") {
		t.Errorf("a missing job among several: %q", r.stderr)
	}
}

func TestOverlaySparkline(t *testing.T) {
	pts := func(steps ...int64) []apitypes.MetricPoint {
		var out []apitypes.MetricPoint
		for i, s := range steps {
			out = append(out, apitypes.MetricPoint{Step: s, Value: float64(i)})
		}
		return out
	}
	for name, c := range map[string]struct {
		pts            []apitypes.MetricPoint
		loStep, hiStep int64
		lo, hi         float64
		width          int
		want           string
	}{
		// Steps 0 and 99 of 0..99 over 4 columns: the gap repeats the
		// first value.
		"gap held":      {pts(0, 99), 0, 99, 0, 1, 4, "▁▁▁█"},
		"starts later":  {pts(50, 99), 0, 99, 0, 1, 4, "  ▁█"},
		"ends earlier":  {pts(0, 40), 0, 99, 0, 1, 4, "▁█"},
		"shared scale":  {pts(0, 1), 0, 1, 0, 7, 2, "▁▂"},
		"flat":          {pts(0), 0, 0, 0, 0, 40, "▁"},
		"mean of a col": {[]apitypes.MetricPoint{{Step: 0, Value: 0}, {Step: 1, Value: 1}}, 0, 1, 0, 1, 1, "▄"},
	} {
		if got := overlaySparkline(c.pts, c.loStep, c.hiStep, c.lo, c.hi, c.width); got != c.want {
			t.Errorf("%s: %q, want %q", name, got, c.want)
		}
	}
}
