package simulate

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/scheduler"
)

func load(t testing.TB, name string) Workload {
	t.Helper()
	w, err := LoadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	return w
}

func run(t testing.TB, w Workload) *Report {
	t.Helper()
	r, err := Run(w)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return r
}

func project(t *testing.T, r *Report, name, pool string) ProjectReport {
	t.Helper()
	for _, p := range r.Projects {
		if p.Project == name && p.Pool == pool {
			return p
		}
	}
	t.Fatalf("report has no row for project %s in pool %s", name, pool)
	return ProjectReport{}
}

func stream(t *testing.T, r *Report, name string) StreamReport {
	t.Helper()
	for _, s := range r.Streams {
		if s.Stream == name {
			return s
		}
	}
	t.Fatalf("report has no stream %s", name)
	return StreamReport{}
}

func text(t *testing.T, r *Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestFairShare is the acceptance test: three projects with shares 1:1:2
// under sustained overload end within 5% (relative) of a 25/25/50 split of
// the pool's GPU-hours.
//
// The twin renames the 2-share project so that it sorts last instead of
// first: the split must not depend on names.
func TestFairShare(t *testing.T) {
	t.Run("as written", func(t *testing.T) { checkFairShare(t, load(t, "fairshare.yaml"), splits("llm"), 0.99) })
	// Mixed shapes: 3-GPU jobs on 4-GPU nodes leave GPUs idle (jobs without
	// a timeout cannot backfill ahead of a reservation).
	t.Run("mixed shapes", func(t *testing.T) { checkFairShare(t, load(t, "fairshare_mixed.yaml"), splits("llm"), 0.85) })
	// Job size: 1-GPU and whole-node 8-GPU projects with equal shares each
	// get a quarter (once 1-GPU projects took a third more than their
	// target and 8-GPU ones a seventh less).
	t.Run("job sizes", func(t *testing.T) {
		checkFairShare(t, load(t, "fairshare_sizes.yaml"), map[string]float64{"small-a": 0.25, "small-b": 0.25, "big-a": 0.25, "big-b": 0.25}, 0.99)
	})
	t.Run("reverse naming", func(t *testing.T) {
		w := load(t, "fairshare.yaml")
		for i := range w.Projects {
			if w.Projects[i].Name == "llm" {
				w.Projects[i].Name = "zeta"
			}
		}
		for i := range w.Quotas {
			if w.Quotas[i].Project == "llm" {
				w.Quotas[i].Project = "zeta"
			}
		}
		for i := range w.Streams {
			if w.Streams[i].Project == "llm" {
				w.Streams[i].Project = "zeta"
			}
		}
		checkFairShare(t, w, splits("zeta"), 0.99)
	})
}

// splits is the 25/25/50 target of fairshare.yaml with the 2-share
// project named big.
func splits(big string) map[string]float64 {
	return map[string]float64{"vision": 0.25, "speech": 0.25, big: 0.50}
}

func checkFairShare(t *testing.T, w Workload, targets map[string]float64, minUtil float64) {
	r := run(t, w)
	t.Logf("\n%s", text(t, r))

	if u := r.Pools[0].Utilisation; u < minUtil {
		t.Errorf("utilisation %.2f%%; the overloaded pool should stay full (>= %.0f%%)", 100*u, 100*minUtil)
	}
	for _, name := range slices.Sorted(maps.Keys(targets)) {
		want := struct {
			project string
			target  float64
		}{name, targets[name]}
		p := project(t, r, want.project, "gpu")
		if p.Target != want.target {
			t.Errorf("%s: target %.4f, want %.4f", want.project, p.Target, want.target)
		}
		if p.NeverStarted == 0 {
			t.Errorf("%s: every job started; the workload must keep each project's demand above the pool", want.project)
		}
		if rel := math.Abs(p.Share-want.target) / want.target; rel > 0.05 {
			t.Errorf("%s: %.2f%% of the pool's GPU-hours (%.1f h), target %.2f%%: off by %.1f%% of the target (allowed 5%%)",
				want.project, 100*p.Share, p.UsedHours, 100*want.target, 100*rel)
		}
	}
}

// TestDeterministic runs each workload twice and demands identical reports,
// and a different seed a different one.
func TestDeterministic(t *testing.T) {
	for _, name := range []string{"fairshare.yaml", "preemption.yaml", "gang.yaml"} {
		t.Run(name, func(t *testing.T) {
			w := load(t, name)
			if name == "fairshare.yaml" {
				w.Duration = domain.Duration(24 * time.Hour) // enough to diverge; keeps the test quick
			}
			var a, b bytes.Buffer
			if err := run(t, w).WriteJSON(&a); err != nil {
				t.Fatal(err)
			}
			if err := run(t, w).WriteJSON(&b); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a.Bytes(), b.Bytes()) {
				t.Fatalf("two runs of the same workload differ:\n%s\n---\n%s", a.String(), b.String())
			}
			w.Seed++
			var c bytes.Buffer
			if err := run(t, w).WriteJSON(&c); err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(a.Bytes(), c.Bytes()) {
				t.Errorf("seeds %d and %d gave the same report; the seed is not used", w.Seed-1, w.Seed)
			}
		})
	}
}

// TestPreemption: a high-priority burst into a pool full of preemptible
// low-priority work preempts it and starts within minutes.
func TestPreemption(t *testing.T) {
	r := run(t, load(t, "preemption.yaml"))
	t.Logf("\n%s", text(t, r))

	if u := r.Pools[0].Utilisation; u < 0.95 {
		t.Errorf("utilisation %.1f%%, want the pool kept full (>= 95%%)", 100*u)
	}
	burst := stream(t, r, "burst")
	if burst.Submitted != 4 || burst.Succeeded != 4 {
		t.Errorf("burst: %d submitted, %d succeeded; want all 4 to finish", burst.Submitted, burst.Succeeded)
	}
	// Room appears only after the victims' 30s stop delay, and takes a pass
	// or two; ten minutes is generous and far below the sweep's 4–8h jobs.
	if burst.WaitMax.D() > 10*time.Minute {
		t.Errorf("burst waited up to %s (p50 %s); preemption should start it within 10m", burst.WaitMax, burst.WaitP50)
	}
	sweep := project(t, r, "research", "gpu")
	if sweep.Preemptions == 0 || r.Preemptions != sweep.Preemptions {
		t.Errorf("research preempted %d times, %d in all; want the burst to preempt research's jobs and nothing else", sweep.Preemptions, r.Preemptions)
	}
	// 4 jobs × 4 GPUs fill the 16-GPU pool: every one of the 8 two-GPU
	// sweep jobs running then must make room.
	if sweep.Preemptions < 8 {
		t.Errorf("research preempted %d times; the burst needs at least 8 two-GPU victims", sweep.Preemptions)
	}
	if sweep.LostHours <= 0 || sweep.LostHours > float64(sweep.Preemptions)*2*(10.0/60) {
		t.Errorf("research lost %.2f GPU-hours to %d preemptions; with 10m checkpoints each 2-GPU victim loses under 20 GPU-minutes", sweep.LostHours, sweep.Preemptions)
	}
	if p := project(t, r, "product", "gpu"); p.Preemptions != 0 {
		t.Errorf("product's high-priority jobs were preempted %d times", p.Preemptions)
	}
}

// TestGangFinishes: gangs of 2 and 4 nodes among single-node jobs all
// finish: no deadlock, no starvation.
func TestGangFinishes(t *testing.T) {
	r := run(t, load(t, "gang.yaml"))
	t.Logf("\n%s", text(t, r))
	if !r.Drained {
		t.Fatalf("work remained after %s: %d queued, %d running", r.Simulated, r.Queued, r.Running)
	}
	if r.Submitted != 250 || r.Succeeded != 250 || r.Failed != 0 {
		t.Errorf("%d submitted, %d succeeded, %d failed; want 250 submitted and succeeded", r.Submitted, r.Succeeded, r.Failed)
	}
	if r.Makespan.D() >= 30*24*time.Hour || r.Makespan.D() <= 0 {
		t.Errorf("makespan %s, want between 0 and the 30d limit", r.Makespan)
	}
	for _, name := range []string{"pairs", "quads"} {
		if s := stream(t, r, name); s.Succeeded != s.Submitted {
			t.Errorf("%s: %d of %d succeeded", name, s.Succeeded, s.Submitted)
		}
	}
}

// TestTimeout: a job whose runtime exceeds its timeout fails at the timeout,
// and the time it held counts.
func TestTimeout(t *testing.T) {
	w := mustParse(t, `
seed: 1
duration: 10h
pools: [{name: p, nodes: [{name: n, cpus: 4, memory: 8GiB}]}]
quotas: [{project: a, pool: p, cpus: 4, memory: 8GiB}]
jobs:
  - {project: a, pool: p, count: 1, cpus: 4, runtime: 3h, timeout: 1h}
  - {project: a, pool: p, count: 1, cpus: 4, runtime: 2h}
`)
	r := run(t, w)
	if r.Failed != 1 || r.Succeeded != 1 || !r.Drained {
		t.Fatalf("failed %d, succeeded %d, drained %v; want 1, 1, true\n%s", r.Failed, r.Succeeded, r.Drained, text(t, r))
	}
	if r.Makespan.D() != 3*time.Hour {
		t.Errorf("makespan %s, want 3h (1h until the timeout, then 2h)", r.Makespan)
	}
	if p := r.Pools[0]; p.Unit != "CPU" || p.AllocatedHours != 12 || p.CapacityHours != 12 || p.Utilisation != 1 {
		t.Errorf("pool %+v; want a CPU pool with 12 of 12 CPU-hours allocated", p)
	}
}

func mustParse(t *testing.T, doc string) Workload {
	t.Helper()
	w, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return w
}

const goodDoc = `
seed: 1
duration: 24h
pools:
  - name: p
    nodes:
      - {name: n1, cpus: 8, memory: 64GiB, gpus: [0, 1]}
jobs:
  - {project: a, pool: p, count: 3, gpus: 1, cpus: 2, memory: 8GiB, runtime: {min: 1h, max: 2h}}
quotas: [{project: a, pool: p, gpus: 2}]
`

func TestParseDefaults(t *testing.T) {
	w := mustParse(t, goodDoc)
	s := w.Streams[0]
	if s.Priority != domain.PriorityNormal || s.Nodes != 1 || s.Name != "a/0" || s.Until.D() != 24*time.Hour {
		t.Errorf("stream defaults: %+v", s)
	}
	if s.Runtime != (Runtime{Min: time.Hour, Max: 2 * time.Hour}) {
		t.Errorf("runtime %+v, want 1h..2h", s.Runtime)
	}
	if w.Simulation.Tick.D() != time.Minute || w.Simulation.CheckpointInterval.D() != 10*time.Minute || w.Scheduler.FairShareHalfLife.D() != 24*time.Hour {
		t.Errorf("defaults: simulation %+v, scheduler %+v", w.Simulation, w.Scheduler)
	}
}

// TestParseNodeCount: one entry with count declares that many identical
// nodes, numbered from 1, and a GPU count stands for indices 0..n-1.
func TestParseNodeCount(t *testing.T) {
	w := mustParse(t, strings.Replace(goodDoc, "{name: n1, cpus: 8, memory: 64GiB, gpus: [0, 1]}",
		"{name: gpu, count: 3, cpus: 8, memory: 64GiB, gpus: 2}\n      - {name: cpu, cpus: 4}", 1))
	p := w.domainPools()[0]
	var got []string
	for _, n := range p.Nodes {
		got = append(got, fmt.Sprintf("%s:%g:%s:%v", n.Name, n.CPUs, n.Memory, n.GPUs))
	}
	want := []string{"gpu-1:8:64GiB:[0 1]", "gpu-2:8:64GiB:[0 1]", "gpu-3:8:64GiB:[0 1]", "cpu:4:0:[]"}
	if !slices.Equal(got, want) {
		t.Errorf("nodes %v, want %v", got, want)
	}
	if c := p.Capacity(); c.GPUs != 6 || c.CPUs != 28 {
		t.Errorf("capacity %+v, want 6 GPUs and 28 CPUs", c)
	}
}

func TestParseErrors(t *testing.T) {
	tests := map[string]struct {
		doc      string
		wantPath string
		wantLine int
		wantMsg  string
	}{
		"unknown top-level field": {
			doc:      "seed: 1\nduration: 1h\nworkers: 3\n",
			wantPath: "workers", wantLine: 3, wantMsg: `unknown field "workers"`,
		},
		"unknown nested field suggests": {
			doc:      strings.Replace(goodDoc, "gpus: [0, 1]", "gpu: [0, 1]", 1),
			wantPath: "pools[0].nodes[0].gpu", wantLine: 7, wantMsg: `did you mean "gpus"?`,
		},
		"unknown stream field": {
			doc:      strings.Replace(goodDoc, "count: 3", "number: 3", 1),
			wantPath: "jobs[0].number", wantLine: 9, wantMsg: `unknown field "number"`,
		},
		"unknown runtime field": {
			doc:      strings.Replace(goodDoc, "max: 2h", "mean: 2h", 1),
			wantPath: "jobs[0].runtime", wantLine: 9, wantMsg: `unknown field "mean"`,
		},
		"missing seed": {
			doc:      strings.Replace(goodDoc, "seed: 1\n", "", 1),
			wantPath: "seed", wantMsg: "is required",
		},
		"missing duration": {
			doc:      strings.Replace(goodDoc, "duration: 24h\n", "", 1),
			wantPath: "duration", wantMsg: "is required",
		},
		"bad duration": {
			doc:      strings.Replace(goodDoc, "duration: 24h", "duration: a week", 1),
			wantPath: "duration", wantLine: 3, wantMsg: "not a duration",
		},
		"wrong type": {
			doc:      strings.Replace(goodDoc, "cpus: 8", "cpus: many", 1),
			wantPath: "pools[0].nodes[0].cpus", wantLine: 7, wantMsg: `"many" is not valid here; want a number`,
		},
		"unknown pool": {
			doc:      strings.Replace(goodDoc, "pool: p,", "pool: q,", 1),
			wantPath: "jobs[0].pool", wantLine: 9, wantMsg: `"q" is not a pool`,
		},
		"never fits": {
			doc:      strings.Replace(goodDoc, "gpus: 1,", "gpus: 4,", 1),
			wantPath: "jobs[0].gpus", wantLine: 9, wantMsg: "the largest node in pool p has 2",
		},
		"above quota": {
			doc:      strings.Replace(strings.Replace(goodDoc, "gpus: 2}]", "gpus: 1}]", 1), "gpus: 1,", "gpus: 2,", 1),
			wantPath: "jobs[0].gpus", wantMsg: "at most 1 in pool p",
		},
		"no quota, no borrowing": {
			doc:      strings.Replace(goodDoc, "project: a, pool: p, gpus: 2", "project: b, pool: p, gpus: 2", 1),
			wantPath: "jobs[0].pool", wantMsg: "has no quota in pool p",
		},
		"priority above quota": {
			doc:      strings.Replace(goodDoc, "count: 3,", "count: 3, priority: high,", 1),
			wantPath: "jobs[0].priority", wantMsg: "at most normal",
		},
		"timeout required": {
			doc:      strings.Replace(goodDoc, "    nodes:\n", "    max_timeout: 2h\n    nodes:\n", 1),
			wantPath: "jobs[0].timeout", wantMsg: "requires a timeout",
		},
		"submits nothing": {
			doc:      strings.Replace(goodDoc, "count: 3, ", "", 1),
			wantPath: "jobs[0]", wantMsg: "submits nothing",
		},
		"rate and backlog": {
			doc:      strings.Replace(goodDoc, "count: 3", "rate: 2, backlog: 3", 1),
			wantPath: "jobs[0]", wantMsg: "both rate and backlog",
		},
		"bad priority": {
			doc:      strings.Replace(goodDoc, "count: 3", "count: 3, priority: top", 1),
			wantPath: "jobs[0].priority", wantMsg: `"top" is not a priority class`,
		},
		"missing runtime": {
			doc:      strings.Replace(goodDoc, ", runtime: {min: 1h, max: 2h}", "", 1),
			wantPath: "jobs[0].runtime", wantMsg: "is required",
		},
		"inverted runtime": {
			doc:      strings.Replace(goodDoc, "{min: 1h, max: 2h}", "{min: 3h, max: 2h}", 1),
			wantPath: "jobs[0].runtime", wantMsg: "min <= max",
		},
		"duplicate pool": {
			doc:      strings.Replace(goodDoc, "jobs:", "  - {name: p, nodes: [{name: n, cpus: 1}]}\njobs:", 1),
			wantPath: "pools[1].name", wantMsg: "declared twice",
		},
		"negative node count": {
			doc:      strings.Replace(goodDoc, "{name: n1,", "{name: n1, count: -1,", 1),
			wantPath: "pools[0].nodes[0].count", wantLine: 7, wantMsg: "use 1 to 100000 identical nodes",
		},
		"node count repeats a name": {
			doc:      strings.Replace(goodDoc, "{name: n1,", "{name: n, count: 2, cpus: 1}\n      - {name: n-2,", 1),
			wantPath: "pools[0].nodes[1].name", wantLine: 8, wantMsg: `node "n-2" appears twice`,
		},
		"bad GPU count": {
			doc:      strings.Replace(goodDoc, "gpus: [0, 1]", "gpus: eight", 1),
			wantPath: "pools[0].nodes[0].gpus", wantLine: 7, wantMsg: "want a GPU count from 0 to 1024",
		},
		"bad GPU index": {
			doc:      strings.Replace(goodDoc, "gpus: [0, 1]", "gpus: [0, x]", 1),
			wantPath: "pools[0].nodes[0].gpus", wantLine: 7, wantMsg: `"x" is not a GPU index`,
		},
		"pools not a list": {
			doc:      "seed: 1\nduration: 1h\npools: {name: p}\n",
			wantPath: "pools", wantLine: 3, wantMsg: "must be a list",
		},
		"not yaml": {
			doc:      "seed: [1\n",
			wantPath: "document", wantMsg: "is not valid YAML",
		},
		"empty": {
			doc: "", wantPath: "document", wantMsg: "is empty",
		},
		"not a mapping": {
			doc: "- 1\n- 2\n", wantPath: "document", wantLine: 1, wantMsg: "must be a mapping",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if err == nil {
				t.Fatal("Parse accepted the workload")
			}
			if !errors.Is(err, domain.ErrInvalid) {
				t.Errorf("error %v does not match domain.ErrInvalid", err)
			}
			var fe domain.FieldErrors
			if !errors.As(err, &fe) {
				t.Fatalf("error %T is not domain.FieldErrors", err)
			}
			for _, e := range fe {
				if e.Path == tc.wantPath && strings.Contains(e.Message, tc.wantMsg) && (tc.wantLine == 0 || e.Line == tc.wantLine) {
					return
				}
			}
			t.Errorf("no error at %s (line %d) containing %q; got %v", tc.wantPath, tc.wantLine, tc.wantMsg, err)
		})
	}
}

func TestLoadFileMissing(t *testing.T) {
	_, err := LoadFile(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("err %v, want one matching os.ErrNotExist", err)
	}
}

func TestParseNoPanicOnOddInput(t *testing.T) {
	for _, doc := range []string{"&a [*a]", "seed: !!binary x", "jobs: [{runtime: [1]}]", "pools: [{nodes: [{gpus: {a: 1}}]}]", "? [a]\n: b\n", "duration: 99999d\nseed: 1"} {
		if _, err := Parse([]byte(doc)); err == nil {
			t.Errorf("Parse(%q) accepted an invalid workload", doc)
		}
	}
}

// TestFoldedUsageMatchesDecayUsage: the folded usage handed to the
// scheduler equals scheduler.DecayUsage over every attempt's record.
func TestFoldedUsageMatchesDecayUsage(t *testing.T) {
	for _, name := range []string{"fairshare.yaml", "preemption.yaml"} {
		w := load(t, name)
		w.Duration = domain.Duration(36 * time.Hour)
		s := newSim(w, Options{})
		if err := s.loop(); err != nil {
			t.Fatal(err)
		}
		got := s.usage()
		want := scheduler.DecayUsage(s.records, s.now, w.Scheduler.FairShareHalfLife.D())
		if len(got) != len(want) || len(got) == 0 {
			t.Fatalf("%s: folded usage %v, want %v", name, got, want)
		}
		for i := range want {
			g, u := got[i], want[i]
			if g.Project != u.Project || g.Pool != u.Pool || math.Abs(g.Value-u.Value) > 1e-9*u.Value {
				t.Errorf("%s: folded usage %+v, want %+v", name, g, u)
			}
		}
	}
}

// TestWaitReasons: the time a job spends queued is attributed to the
// reasons the scheduler gives.
func TestWaitReasons(t *testing.T) {
	w := mustParse(t, `
seed: 1
duration: 10h
pools: [{name: p, nodes: [{name: n, cpus: 8, memory: 8GiB, gpus: [0]}]}]
quotas: [{project: a, pool: p, gpus: 1}]
jobs: [{project: a, pool: p, count: 2, gpus: 1, cpus: 1, runtime: 90m}]
`)
	r := run(t, w)
	p := project(t, r, "a", "p")
	total := 0.0
	for _, h := range p.WaitHours {
		total += h
	}
	if total != 1.5 || p.TopWaitReason() == "-" || p.WaitMax.D() != 90*time.Minute {
		t.Errorf("waited %v (top %s, max %s); want 1.5 hours in all, for the second job", p.WaitHours, p.TopWaitReason(), p.WaitMax)
	}
}

// TestLongestWaitAndDeviation: the longest wait counts jobs that never
// started (until the end), which the wait percentiles leave out; the
// fair-share deviation is share minus target in percentage points.
func TestLongestWaitAndDeviation(t *testing.T) {
	w := mustParse(t, `
seed: 1
duration: 4h
pools: [{name: p, nodes: [{name: n, cpus: 8, memory: 8GiB, gpus: [0]}]}]
quotas: [{project: a, pool: p, gpus: 1}, {project: b, pool: p, gpus: 1}]
jobs:
  - {project: a, pool: p, count: 1, gpus: 1, cpus: 1, runtime: 10h}
  - {project: b, pool: p, count: 1, submit_at: 1h, gpus: 1, cpus: 1, runtime: 1h}
`)
	r := run(t, w)
	a, b := project(t, r, "a", "p"), project(t, r, "b", "p")
	if b.NeverStarted != 1 || b.WaitMax != 0 || b.LongestWait.D() != 3*time.Hour {
		t.Errorf("b: never started %d, wait max %s, longest wait %s; want 1, 0s (no start), 3h (1h to 4h)", b.NeverStarted, b.WaitMax, b.LongestWait)
	}
	if a.LongestWait != 0 || a.FairShareDeviation != 50 || b.FairShareDeviation != -50 {
		t.Errorf("a: longest wait %s, deviation %+gpp; b: deviation %+gpp; want 0s, +50pp, -50pp", a.LongestWait, a.FairShareDeviation, b.FairShareDeviation)
	}
	out := text(t, r)
	for _, want := range []string{"DEVIATION", "LONGEST-WAIT", "+50.0pp", "-50.0pp", "3h"} {
		if !strings.Contains(out, want) {
			t.Errorf("the text report lacks %q:\n%s", want, out)
		}
	}
}

// TestDocExample keeps the full example in docs/simulate.md valid and
// runnable.
func TestDocExample(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "simulate.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```yaml\n")
	doc, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/simulate.md has no ```yaml example")
	}
	w, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("the example in docs/simulate.md is invalid: %v", err)
	}
	r := run(t, w)
	if r.Submitted == 0 || r.Succeeded == 0 || len(r.Streams) != 3 {
		t.Errorf("the example ran %d jobs (%d succeeded) in %d streams; want jobs from 3 streams", r.Submitted, r.Succeeded, len(r.Streams))
	}
	t.Logf("\n%s", text(t, r))
}

// TestContractViolations: placements and preemptions that break the
// scheduler's contract stop the run with an error naming the job.
func TestContractViolations(t *testing.T) {
	w := mustParse(t, `
seed: 1
duration: 1h
pools: [{name: p, nodes: [{name: n1, cpus: 8, memory: 8GiB, gpus: [0, 1]}, {name: n2, cpus: 8, memory: 8GiB, gpus: [0, 1]}]}]
quotas: [{project: a, pool: p, gpus: 4}]
jobs: [{project: a, pool: p, count: 3, gpus: 1, cpus: 1, runtime: 2h}]
`)
	s := newSim(w, Options{})
	s.handleSubmit(0) // jobs 1, 2 and 3 pending
	if err := s.start(scheduler.Placement{JobID: 1, Pool: "p", Nodes: []scheduler.NodeAlloc{{Node: "n1", GPUs: []int{0}}}}); err != nil {
		t.Fatalf("a valid placement was refused: %v", err)
	}
	tests := map[string]struct {
		apply func() error
		want  string
	}{
		"GPU held by another job": {
			func() error {
				return s.start(scheduler.Placement{JobID: 2, Pool: "p", Nodes: []scheduler.NodeAlloc{{Node: "n1", GPUs: []int{0}}}})
			},
			"GPU 0 of node \"n1\", which job 1 holds",
		},
		"unknown GPU": {
			func() error {
				return s.start(scheduler.Placement{JobID: 2, Pool: "p", Nodes: []scheduler.NodeAlloc{{Node: "n2", GPUs: []int{7}}}})
			},
			"no such GPU",
		},
		"wrong GPU count": {
			func() error {
				return s.start(scheduler.Placement{JobID: 2, Pool: "p", Nodes: []scheduler.NodeAlloc{{Node: "n2", GPUs: []int{0, 1}}}})
			},
			"gave job 2 2 GPU(s)",
		},
		"unknown node": {
			func() error {
				return s.start(scheduler.Placement{JobID: 2, Pool: "p", Nodes: []scheduler.NodeAlloc{{Node: "n9", GPUs: []int{0}}}})
			},
			"not in pool",
		},
		"wrong pool": {
			func() error {
				return s.start(scheduler.Placement{JobID: 2, Pool: "q", Nodes: []scheduler.NodeAlloc{{Node: "n2", GPUs: []int{0}}}})
			},
			"submitted to \"p\"",
		},
		"already running": {
			func() error {
				return s.start(scheduler.Placement{JobID: 1, Pool: "p", Nodes: []scheduler.NodeAlloc{{Node: "n2", GPUs: []int{0}}}})
			},
			"job 1, which is not pending",
		},
		"preempt a non-preemptible job": {
			func() error { return s.preempt(scheduler.Preemption{JobID: 1, For: 2}) },
			"neither preemptible nor borrowing",
		},
		"preempt a queued job": {
			func() error { return s.preempt(scheduler.Preemption{JobID: 3, For: 2}) },
			"which is not running",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.apply()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestPreemptedJobResumesFromCheckpoint: a victim loses only the work since
// its last checkpoint and needs the rest in its next attempt.
func TestPreemptedJobResumesFromCheckpoint(t *testing.T) {
	w := mustParse(t, `
seed: 1
duration: 10h
simulation: {checkpoint_interval: 10m}
pools: [{name: p, preemption: true, nodes: [{name: n, cpus: 8, memory: 8GiB, gpus: [0]}]}]
quotas: [{project: a, pool: p, gpus: 1}]
jobs: [{project: a, pool: p, count: 1, gpus: 1, cpus: 1, runtime: 2h, preemptible: true}]
`)
	s := newSim(w, Options{})
	s.heap = nil // drive the first steps by hand
	s.handleSubmit(0)
	if err := s.start(scheduler.Placement{JobID: 1, Pool: "p", Nodes: []scheduler.NodeAlloc{{Node: "n", GPUs: []int{0}}}}); err != nil {
		t.Fatal(err)
	}
	s.now = s.now.Add(25 * time.Minute)
	if err := s.preempt(scheduler.Preemption{JobID: 1, For: 2}); err != nil {
		t.Fatal(err)
	}
	s.stopPreempted() // as the pass does after its checks
	j := s.job(1)
	if j.state != statePending || j.done != 20*time.Minute || j.lost != 5*time.Minute || j.preemptions != 1 {
		t.Fatalf("after preemption at 25m: state %d, done %s, lost %s, preemptions %d; want pending, 20m, 5m, 1", j.state, j.done, j.lost, j.preemptions)
	}
	s.push(event{at: s.now, kind: evTick})
	if err := s.loop(); err != nil {
		t.Fatal(err)
	}
	r := s.report()
	// 25m first attempt, then 1h40m: 2h05m in all, of which 5m was lost.
	if !r.Drained || r.Succeeded != 1 || r.Makespan.D() != 2*time.Hour+5*time.Minute {
		t.Errorf("drained %v, succeeded %d, makespan %s; want true, 1, 2h5m", r.Drained, r.Succeeded, r.Makespan)
	}
	if p := r.Projects[0]; math.Abs(p.UsedHours-125.0/60) > 1e-3 || math.Abs(p.LostHours-5.0/60) > 1e-3 || p.Preemptions != 1 {
		t.Errorf("project %+v; want 2.083 GPU-hours used, 0.083 lost, 1 preemption", p)
	}
}
