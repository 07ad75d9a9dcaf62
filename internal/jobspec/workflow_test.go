package jobspec

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"trainyard/internal/domain"
)

func fp(f float64) *float64 { return &f }

func TestMembersGrid(t *testing.T) {
	sw := domain.SweepSpec{Method: domain.SweepGrid, Params: map[string]domain.SweepParam{
		"wd":    {Values: []string{"0", "1"}},
		"lr":    {Values: []string{"0.1", "0.01", "0.001"}},
		"batch": {Values: []string{"32"}},
	}}
	ms := Members(sw)
	if len(ms) != 6 {
		t.Fatalf("%d members, want 3*2*1 = 6", len(ms))
	}
	// Names in order batch, lr, wd: wd varies fastest.
	want := [][2]string{{"0.1", "0"}, {"0.1", "1"}, {"0.01", "0"}, {"0.01", "1"}, {"0.001", "0"}, {"0.001", "1"}}
	for i, m := range ms {
		if m.Index != i {
			t.Errorf("member %d has index %d", i, m.Index)
		}
		if got := [2]string{m.Params["lr"], m.Params["wd"]}; got != want[i] || m.Params["batch"] != "32" || len(m.Params) != 3 {
			t.Errorf("member %d params = %v, want lr=%s wd=%s batch=32", i, m.Params, want[i][0], want[i][1])
		}
	}
	// Every combination once.
	seen := map[string]bool{}
	for _, m := range ms {
		k := fmt.Sprint(m.Params)
		if seen[k] {
			t.Errorf("combination %s repeats", k)
		}
		seen[k] = true
	}
}

func TestMembersRandom(t *testing.T) {
	sw := domain.SweepSpec{Method: domain.SweepRandom, Count: 50, Seed: 7, Params: map[string]domain.SweepParam{
		"lr":    {Min: fp(1e-5), Max: fp(1e-1), Log: true},
		"drop":  {Min: fp(0.1), Max: fp(0.5)},
		"optim": {Values: []string{"adam", "sgd"}},
	}}
	a, b := Members(sw), Members(sw)
	if len(a) != 50 {
		t.Fatalf("%d members, want count 50", len(a))
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("the same seed drew different members")
	}
	other := sw
	other.Seed = 8
	if reflect.DeepEqual(a, Members(other)) {
		t.Errorf("seeds 7 and 8 drew the same members")
	}
	optims := map[string]int{}
	var lrs []float64
	for i, m := range a {
		if m.Index != i {
			t.Errorf("member %d has index %d", i, m.Index)
		}
		lr, err1 := strconv.ParseFloat(m.Params["lr"], 64)
		drop, err2 := strconv.ParseFloat(m.Params["drop"], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("member %d params %v are not numbers", i, m.Params)
		}
		// Values are written with 6 significant digits: allow for it.
		if lr <= 0 || lr < 1e-5*(1-1e-5) || lr > 1e-1*(1+1e-5) {
			t.Errorf("member %d lr %v outside [1e-5, 1e-1]", i, lr)
		}
		if drop < 0.1-1e-6 || drop > 0.5+1e-6 {
			t.Errorf("member %d drop %v outside [0.1, 0.5]", i, drop)
		}
		if o := m.Params["optim"]; o != "adam" && o != "sgd" {
			t.Errorf("member %d optim %q is not a listed value", i, o)
		}
		optims[m.Params["optim"]]++
		lrs = append(lrs, lr)
	}
	if len(optims) != 2 {
		t.Errorf("50 draws picked only %v", optims)
	}
	// A log range spreads over its decades: some draws below 1e-3, which
	// a uniform draw over [1e-5, 1e-1] would make about 1% of the time.
	if n := len(slices.DeleteFunc(slices.Clone(lrs), func(x float64) bool { return x >= 1e-3 })); n < 10 {
		t.Errorf("%d of 50 log-range draws below 1e-3; want about half (draws %v)", n, lrs)
	}
	// A degenerate range gives its one value.
	one := Members(domain.SweepSpec{Method: domain.SweepRandom, Count: 3, Params: map[string]domain.SweepParam{"x": {Min: fp(2), Max: fp(2), Log: true}}})
	for _, m := range one {
		if x, _ := strconv.ParseFloat(m.Params["x"], 64); math.Abs(x-2) > 1e-9 {
			t.Errorf("range [2, 2] drew %s", m.Params["x"])
		}
	}
}

func TestMembersArray(t *testing.T) {
	ms := Members(domain.SweepSpec{Method: domain.SweepArray, Indices: []int{3, 5, 6, 10}})
	var got []int
	for _, m := range ms {
		got = append(got, m.Index)
		if len(m.Params) != 0 {
			t.Errorf("array member %d has params %v", m.Index, m.Params)
		}
	}
	if !slices.Equal(got, []int{3, 5, 6, 10}) {
		t.Errorf("array indices = %v, want as given", got)
	}
}

func TestParseArray(t *testing.T) {
	for _, c := range []struct {
		in     string
		want   []int
		maxPar int
	}{
		{"0-3", []int{0, 1, 2, 3}, 0},
		{"1,3,5-7", []int{1, 3, 5, 6, 7}, 0},
		{"0-31%4", seq(0, 31), 4},
		{"5", []int{5}, 0},
		{" 2 - 4 ", []int{2, 3, 4}, 0},
		{"3,1-4,3", []int{3, 1, 2, 4}, 0},
		{fmt.Sprintf("0-%d", MaxSweepMembers-1), seq(0, MaxSweepMembers-1), 0},
	} {
		got, maxPar, err := ParseArray(c.in)
		if err != nil || !slices.Equal(got, c.want) || maxPar != c.maxPar {
			t.Errorf("ParseArray(%q) = %v, %d, %v; want %v, %d", c.in, short(got), maxPar, err, short(c.want), c.maxPar)
		}
	}
	for _, in := range []string{"5-2", "a", "1,a", "0-3%0", "0-3%x", "%0", "-1", "", "1,,2", fmt.Sprintf("0-%d", MaxSweepMembers)} {
		got, _, err := ParseArray(in)
		if err == nil {
			t.Errorf("ParseArray(%q) = %v; want an error", in, short(got))
			continue
		}
		if !strings.Contains(err.Error(), "array") {
			t.Errorf("ParseArray(%q) error %q does not say it is about the array", in, err)
		}
	}
}

func seq(a, b int) []int {
	var out []int
	for i := a; i <= b; i++ {
		out = append(out, i)
	}
	return out
}

func short(xs []int) string {
	if len(xs) > 10 {
		return fmt.Sprintf("%v… (%d)", xs[:10], len(xs))
	}
	return fmt.Sprint(xs)
}

// errAt returns the problem at path, failing the test when there is none.
func errAt(t *testing.T, es domain.FieldErrors, path string) domain.FieldError {
	t.Helper()
	for _, e := range es {
		if e.Path == path {
			return e
		}
	}
	t.Fatalf("no problem at %s; got %v", path, es)
	return domain.FieldError{}
}

func TestLoadSweep(t *testing.T) {
	s := mustLoad(t, minimal+`sweep:
  params:
    lr: [0.1, 0.01]
    wd: {values: [0, 1]}
  max_parallel: 2
  objective: {metric: val_loss}
`)
	sw := s.Sweep
	if sw == nil || sw.Method != domain.SweepGrid || sw.MaxParallel != 2 || !slices.Equal(sw.Params["lr"].Values, []string{"0.1", "0.01"}) ||
		!slices.Equal(sw.Params["wd"].Values, []string{"0", "1"}) {
		t.Fatalf("sweep = %+v", sw)
	}
	if sw.Objective == nil || sw.Objective.Metric != "val_loss" || sw.Objective.Goal != "minimize" {
		t.Errorf("objective = %+v; want val_loss, minimize by default", sw.Objective)
	}
	r := mustLoad(t, minimal+"sweep: {count: 4, seed: 9, params: {lr: {min: 0.0001, max: 0.1, log: true}}}\n").Sweep
	if r.Method != domain.SweepRandom || r.Count != 4 || r.Seed != 9 || *r.Params["lr"].Min != 0.0001 || !r.Params["lr"].Log {
		t.Errorf("random sweep = %+v; want the method random from count", r)
	}
}

func TestLoadSweepErrors(t *testing.T) {
	for _, c := range []struct {
		name, sweep, path, says string
		line                    int // 0: not checked
	}{
		{"unknown method", "sweep:\n  method: bayes\n  params: {lr: [1]}\n", "sweep.method", "grid", 4},
		{"grid with a range", "sweep:\n  params:\n    lr: {min: 0.1, max: 1}\n", "sweep.params.lr", "method: random", 5},
		{"random without count", "sweep:\n  method: random\n  params: {lr: [1, 2]}\n", "sweep.count", "1 to", 0},
		{"min above max", "sweep:\n  count: 3\n  params:\n    lr: {min: 2, max: 1}\n", "sweep.params.lr", "above max", 6},
		{"log from zero", "sweep:\n  count: 3\n  params:\n    lr: {min: 0, max: 1, log: true}\n", "sweep.params.lr.min", "above 0", 6},
		{"half a range", "sweep:\n  count: 3\n  params:\n    lr: {min: 0.1}\n", "sweep.params.lr", "both min and max", 6},
		{"values and range", "sweep:\n  count: 3\n  params:\n    lr: {values: [1], min: 0, max: 1}\n", "sweep.params.lr", "both values and a range", 6},
		{"empty values", "sweep:\n  params:\n    lr: []\n", "sweep.params.lr", "no values", 5},
		{"empty params", "sweep:\n  max_parallel: 2\n", "sweep.params", "is empty", 0},
		{"bad param name", "sweep:\n  params:\n    1lr: [1]\n", "sweep.params.1lr", "not a valid parameter name", 5},
		{"too many combinations", "sweep:\n  params:\n    a: [" + nums(101) + "]\n    b: [" + nums(100) + "]\n", "sweep.params", "10100 combinations", 0},
		{"count for a grid", "sweep:\n  method: grid\n  count: 3\n  params: {lr: [1]}\n", "sweep.count", "method: random", 0},
		{"count too big", "sweep:\n  count: 10001\n  params: {lr: [1]}\n", "sweep.count", "1 to 10000", 0},
		{"bad goal", "sweep:\n  params: {lr: [1]}\n  objective: {metric: loss, goal: lowest}\n", "sweep.objective.goal", "minimize or maximize", 0},
		{"no metric", "sweep:\n  params: {lr: [1]}\n  objective: {goal: maximize}\n", "sweep.objective.metric", "is required", 0},
		{"metric too long", "sweep:\n  params: {lr: [1]}\n  objective: {metric: " + strings.Repeat("m", 129) + "}\n", "sweep.objective.metric", "not a metric name", 0},
		{"negative max_parallel", "sweep:\n  params: {lr: [1]}\n  max_parallel: -1\n", "sweep.max_parallel", "0 (no limit)", 0},
		{"unknown field", "sweep:\n  params: {lr: [1]}\n  parallel: 2\n", "sweep.parallel", "unknown field", 5},
		{"param not a list", "sweep:\n  params:\n    lr: 0.1\n", "sweep.params.lr", "list of values", 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			es := loadErrors(t, minimal+c.sweep)
			e := errAt(t, es, c.path)
			if !strings.Contains(e.Message, c.says) {
				t.Errorf("%s: %q; want it to say %q", c.path, e.Message, c.says)
			}
			if c.line != 0 && e.Line != c.line {
				t.Errorf("%s is on line %d, want %d", c.path, e.Line, c.line)
			}
		})
	}
}

// The objective's metric is shown on terminals and pages (sweep show, the
// best member): its check promises "printable characters on one line".
func TestSweepObjectiveMetricIsOneLineOfPrintableText(t *testing.T) {
	for _, metric := range []string{"a\\nb", "loss\\u001b[31m"} {
		_, err := Load([]byte(minimal+"sweep:\n  params: {lr: [1]}\n  objective: {metric: \""+metric+"\"}\n"), nil)
		if err == nil {
			t.Errorf("metric %q: accepted; want sweep.objective.metric refused as not one line of printable text", metric)
		}
	}
}

func nums(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = strconv.Itoa(i)
	}
	return strings.Join(parts, ", ")
}

func TestCheckSweepArray(t *testing.T) {
	var es domain.FieldErrors
	CheckSweep(&es, &domain.SweepSpec{Method: domain.SweepArray})
	errAt(t, es, "sweep")
	es = nil
	CheckSweep(&es, &domain.SweepSpec{Method: domain.SweepArray, Indices: []int{0, 1}, MaxParallel: 1})
	if len(es) != 0 {
		t.Errorf("a good array: %v", es)
	}
	es = nil
	CheckSweep(&es, nil)
	if len(es) != 0 {
		t.Errorf("no sweep: %v", es)
	}
}

func TestLoadAfter(t *testing.T) {
	s := mustLoad(t, minimal+"after:\n  - {job: 12, on: succeeded}\n  - {sweep: 3, on: failed}\n  - {job: 13, on: ended}\n")
	want := []domain.Dependency{{Job: 12, On: domain.DependSucceeded}, {Sweep: 3, On: domain.DependFailed}, {Job: 13, On: domain.DependEnded}}
	if !reflect.DeepEqual(s.After, want) {
		t.Errorf("after = %+v, want %+v", s.After, want)
	}
}

func TestLoadAfterErrors(t *testing.T) {
	many := "after:\n"
	for i := range MaxAfter + 1 {
		many += fmt.Sprintf("  - {job: %d, on: ended}\n", i+1)
	}
	for _, c := range []struct {
		name, after, path string
		says              []string
		line              int
	}{
		{"missing on", "after:\n  - {job: 12}\n", "after[0].on", []string{"succeeded, ended, failed"}, 4},
		{"unknown condition", "after:\n  - {job: 12, on: done}\n", "after[0].on", []string{`"done"`, "succeeded, ended, failed"}, 4},
		{"job and sweep", "after:\n  - {job: 12, sweep: 3, on: ended}\n", "after[0]", []string{"both a job and a sweep"}, 4},
		{"neither", "after:\n  - {on: ended}\n", "after[0]", []string{"names no job"}, 4},
		{"repeat", "after:\n  - {job: 12, on: ended}\n  - {job: 12, on: failed}\n", "after[1]", []string{"repeats after[0]"}, 5},
		{"too many", many, "after", []string{fmt.Sprint(MaxAfter + 1), "at most"}, 3},
		{"not a list", "after: 12\n", "after", []string{"must be a list"}, 3},
		{"empty entry", "after:\n  -\n", "after[0]", []string{"is empty"}, 0},
		{"unknown field", "after:\n  - {job: 12, on: ended, when: now}\n", "after[0].when", []string{"unknown field"}, 4},
		{"negative job", "after:\n  - {job: -1, on: ended}\n", "after[0].job", []string{"positive"}, 0},
		{"job not a number", "after:\n  - {job: twelve, on: ended}\n", "after[0].job", nil, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := errAt(t, loadErrors(t, minimal+c.after), c.path)
			for _, s := range c.says {
				if !strings.Contains(e.Message, s) {
					t.Errorf("%s: %q; want it to say %q", c.path, e.Message, s)
				}
			}
			if c.line != 0 && e.Line != c.line {
				t.Errorf("%s is on line %d, want %d", c.path, e.Line, c.line)
			}
		})
	}
}

func TestSetAfter(t *testing.T) {
	s := mustLoad(t, minimal, "after=12,13:ended,sweep/4:failed")
	want := []domain.Dependency{{Job: 12, On: domain.DependSucceeded}, {Job: 13, On: domain.DependEnded}, {Sweep: 4, On: domain.DependFailed}}
	if !reflect.DeepEqual(s.After, want) {
		t.Errorf("after = %+v, want %+v", s.After, want)
	}
	// It replaces the document's after:, and an empty value clears it.
	s = mustLoad(t, minimal+"after: [{job: 1, on: ended}]\n", "after=2")
	if !reflect.DeepEqual(s.After, []domain.Dependency{{Job: 2, On: domain.DependSucceeded}}) {
		t.Errorf("after = %+v; want only job 2", s.After)
	}
	s = mustLoad(t, minimal+"after: [{job: 1, on: ended}]\n", "after=")
	if len(s.After) != 0 {
		t.Errorf("after= left %+v; want none", s.After)
	}
	for _, c := range []struct{ set, path, says string }{
		{"after=abc", "set[0]", "not a job id"},
		{"after=12,job/3", "set[0]", "not a job id"},
		{"after=sweep/x", "set[0]", "not a job id"},
		{"after=12:done", "after[0].on", `"done"`},
		{"after=12,12:ended", "after[1]", "repeats"},
		{"after=0", "after[0]", "names no job"},
	} {
		e := errAt(t, loadErrors(t, minimal, c.set), c.path)
		if !strings.Contains(e.Message, c.says) {
			t.Errorf("--set %s: %s: %q; want it to say %q", c.set, c.path, e.Message, c.says)
		}
	}
}

func TestLoadFromJob(t *testing.T) {
	s := mustLoad(t, minimal+"inputs:\n  - {from_job: 12, path: model/}\n  - {name: base, from_job: 13}\n")
	if want := []domain.Input{{FromJob: 12, Path: "model/"}, {Name: "base", FromJob: 13}}; !reflect.DeepEqual(s.Inputs, want) {
		t.Errorf("inputs = %+v, want %+v (no version needed)", s.Inputs, want)
	}
	for _, c := range []struct{ inputs, path, says string }{
		{"  - {from_job: 12, path: ../x}\n", "inputs[0].path", "\"..\""},
		{"  - {from_job: 12, path: a/../../x}\n", "inputs[0].path", "\"..\""},
		{"  - {from_job: -2}\n", "inputs[0].from_job", "positive"},
		// The default name job-12 clashes with an input named so.
		{"  - {from_job: 12}\n  - {name: job-12, from_job: 12}\n", "inputs[1].name", "already used"},
	} {
		e := errAt(t, loadErrors(t, minimal+"inputs:\n"+c.inputs), c.path)
		if !strings.Contains(e.Message, c.says) {
			t.Errorf("%s: %q; want it to say %q", c.path, e.Message, c.says)
		}
	}
}
