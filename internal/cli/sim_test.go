package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"trainyard/internal/simulate"
)

func TestSimText(t *testing.T) {
	h := newHarness(t)
	r := h.mustRun(0, "sim", filepath.Join("..", "simulate", "testdata", "gang.yaml"))
	for _, want := range []string{"Makespan:", "POOL", "UTILISATION", "PROJECT", "WAIT-P99", "quads"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	if len(h.srv.seenRequests()) != 0 {
		t.Errorf("sim talked to the server: %v", h.srv.seenRequests())
	}
}

func TestSimJSON(t *testing.T) {
	h := newHarness(t)
	r := h.mustRun(0, "sim", filepath.Join("..", "simulate", "testdata", "gang.yaml"), "-o", "json")
	var v struct {
		Submitted int `json:"submitted"`
		Drained   bool
		Pools     []struct{ Pool string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, r.stdout)
	}
	if v.Submitted != 250 || !v.Drained || len(v.Pools) != 1 || v.Pools[0].Pool != "multi" {
		t.Errorf("report %+v; want 250 jobs submitted, drained, pool multi", v)
	}
}

func TestSimInvalidWorkloadExit2(t *testing.T) {
	h := newHarness(t)
	file := writeSpec(t, t.TempDir(), "w.yaml", "seed: 1\nduration: 1h\nworkers: 3\n")
	r := h.mustRun(2, "sim", file)
	for _, want := range []string{"error: workload " + file + " is invalid", `workers (line 3): unknown field "workers"`, "pools: is required"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if r.stdout != "" {
		t.Errorf("stdout = %q, want nothing", r.stdout)
	}
}

const simEventsDoc = `seed: 1
duration: 10h
pools: [{name: p, preemption: true, nodes: [{name: n, cpus: 8, memory: 8GiB, gpus: 2}]}]
quotas: [{project: a, pool: p, gpus: 2, max_priority: high}]
jobs:
  - {name: sweep, project: a, pool: p, priority: low, count: 1, gpus: 2, cpus: 1, runtime: 2h, preemptible: true}
  - {name: urgent, project: a, pool: p, priority: high, count: 1, submit_at: 25m, gpus: 2, cpus: 1, runtime: 1h}
`

func TestSimEventsText(t *testing.T) {
	h := newHarness(t)
	file := writeSpec(t, t.TempDir(), "w.yaml", simEventsDoc)
	r := h.mustRun(0, "sim", file, "--events")
	events, report, ok := strings.Cut(r.stdout, "\n\n")
	if !ok || !strings.HasPrefix(report, "Simulated 3h5m of virtual time") {
		t.Fatalf("stdout is not the events, a blank line and the report:\n%s", r.stdout)
	}
	lines := strings.Split(events, "\n")
	if len(lines) != 7 || !strings.Contains(lines[1], "preempt job 1 sweep (a, low) attempt 1 for job 2 (a)") ||
		!strings.Contains(lines[6], "end     job 1 sweep (a, low) attempt 2: succeeded") {
		t.Errorf("events:\n%s\nwant 7 lines: start, preempt, requeue, start, end, start, end", events)
	}
}

func TestSimEventsJSONLines(t *testing.T) {
	h := newHarness(t)
	file := writeSpec(t, t.TempDir(), "w.yaml", simEventsDoc)
	r := h.mustRun(0, "sim", file, "--events", "-o", "json")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	var kinds []string
	for _, l := range lines[:len(lines)-1] {
		var e struct {
			Event string
			At    string
			Job   int64
			For   int64
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil || e.Event == "" || e.Job == 0 {
			t.Fatalf("line %q is not an event (%v)", l, err)
		}
		kinds = append(kinds, e.At+" "+e.Event)
	}
	if got := strings.Join(kinds, ", "); got != "0s start, 25m preempt, 25m requeue, 25m start, 1h25m end, 1h25m start, 3h5m end" {
		t.Errorf("events %s", got)
	}
	var rep struct{ Submitted, Succeeded int }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); err != nil || rep.Submitted != 2 || rep.Succeeded != 2 {
		t.Errorf("the last line is not the report (%v): %s", err, lines[len(lines)-1])
	}
}

func TestSimCheckHolds(t *testing.T) {
	h := newHarness(t)
	r := h.mustRun(0, "sim", filepath.Join("..", "simulate", "testdata", "gang.yaml"), "--check")
	for _, want := range []string{"Checks: every invariant held in all", "INVARIANT", "starvation", "Preemptions: 0"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	r = h.mustRun(0, "sim", filepath.Join("..", "simulate", "testdata", "gang.yaml"), "--check", "-o", "json")
	var v struct {
		Check struct {
			Passes int
			Counts map[string]int `json:"violations_by_invariant"`
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v.Check.Passes == 0 || len(v.Check.Counts) != 6 {
		t.Errorf("check section %+v (%v); want passes and six invariants", v.Check, err)
	}
}

func TestSimCheckViolationsExit1(t *testing.T) {
	r := &simulate.Report{Check: &simulate.CheckReport{Counts: map[string]int{simulate.InvariantGuarantee: 2, simulate.InvariantQuota: 0}}}
	err := checkFailed(r, "w.yaml")
	if ExitCode(err) != ExitFailure || err.Error() != "2 invariant violation(s) in w.yaml; the report's check section lists them" {
		t.Errorf("error %v (exit %d); want exit 1 naming 2 violations", err, ExitCode(err))
	}
	r.Check.Counts[simulate.InvariantGuarantee] = 0
	if err := checkFailed(r, "w.yaml"); err != nil {
		t.Errorf("no violations gave error %v", err)
	}
}
