package simulate

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"trainyard/internal/scheduler"
)

// script is a stand-in scheduler: at each virtual time, its passes return
// the listed plans in turn (then empty plans). It lets a test feed the
// checks plans that break an invariant, whatever the real scheduler does.
type script map[time.Duration][]scheduler.Plan

// runScripted runs doc with the checks on, deciding passes by sc. The
// stability invariant still runs the real scheduler on what a plan leaves.
func runScripted(t *testing.T, doc string, sc script) *CheckReport {
	t.Helper()
	s := newSim(mustParse(t, doc), Options{Check: true})
	s.schedule = func(snap scheduler.Snapshot, _ []int64) scheduler.Plan {
		at := snap.Now.Sub(Epoch)
		if plans := sc[at]; len(plans) > 0 {
			sc[at] = plans[1:]
			return plans[0]
		}
		return scheduler.Plan{}
	}
	if err := s.loop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	s.chk.finish()
	return &s.chk.rep
}

func start(id int64, node string, gpus ...int) scheduler.Placement {
	return scheduler.Placement{JobID: id, Pool: "p", Nodes: []scheduler.NodeAlloc{{Node: node, GPUs: gpus}}}
}

func preempt(victim, beneficiary int64) scheduler.Preemption {
	return scheduler.Preemption{JobID: victim, For: beneficiary, Message: "scripted"}
}

// violations returns the violations of one invariant.
func violations(c *CheckReport, inv string) []Violation {
	var out []Violation
	for _, v := range c.Violations {
		if v.Invariant == inv {
			out = append(out, v)
		}
	}
	return out
}

// wantViolation demands exactly one violation of inv, naming jobs and
// saying msg.
func wantViolation(t *testing.T, c *CheckReport, inv string, jobs []int64, msg string) {
	t.Helper()
	vs := violations(c, inv)
	if len(vs) != 1 || c.Counts[inv] != 1 {
		t.Fatalf("%d %s violation(s) (count %d), want 1: %v", len(vs), inv, c.Counts[inv], c.Violations)
	}
	if !slices.Equal(vs[0].Jobs, jobs) || !strings.Contains(vs[0].Message, msg) {
		t.Errorf("violation %s names jobs %v; want jobs %v and a message containing %q", vs[0], vs[0].Jobs, jobs, msg)
	}
}

func wantNone(t *testing.T, c *CheckReport, inv string) {
	t.Helper()
	if n := c.Counts[inv]; n != 0 {
		t.Errorf("%d %s violation(s), want none: %v", n, inv, violations(c, inv))
	}
}

// An owner's low-priority job runs within the owner's 2-GPU guarantee; a
// guest job arrives at 5m and a high-priority owner job at 30m.
const guaranteeDoc = `
seed: 1
duration: 1h
pools: [{name: p, borrowing: true, preemption: true, nodes: [{name: n1, cpus: 16, memory: 64GiB, gpus: 2}]}]
quotas: [{project: owner, pool: p, gpus: 2, max_priority: high}]
jobs:
  - {name: owner-low, project: owner, pool: p, priority: low, count: 1, gpus: 2, runtime: 2h, preemptible: true}
  - {name: guest, project: guest, pool: p, count: 1, submit_at: 5m, gpus: 2, runtime: 2h, preemptible: true}
  - {name: owner-high, project: owner, pool: p, priority: high, count: 1, submit_at: 30m, gpus: 2, runtime: 2h, preemptible: true}
`

func TestCheckGuarantee(t *testing.T) {
	t.Run("another project takes guaranteed work", func(t *testing.T) {
		c := runScripted(t, guaranteeDoc, script{
			0:               {{Start: []scheduler.Placement{start(1, "n1", 0, 1)}}},
			5 * time.Minute: {{Preempt: []scheduler.Preemption{preempt(1, 2)}}},
		})
		wantViolation(t, c, InvariantGuarantee, []int64{1, 2}, "job 1 (owner-low, project owner, low) ran within its project's guarantee (2 GPUs) and was preempted for job 2 (guest, project guest, normal)")
	})
	t.Run("guarantees above the pool's capacity are not checked", func(t *testing.T) {
		doc := strings.Replace(guaranteeDoc, "quotas: [{project: owner, pool: p, gpus: 2, max_priority: high}]",
			"quotas: [{project: owner, pool: p, gpus: 2, max_priority: high}, {project: guest, pool: p, gpus: 2}]", 1)
		c := runScripted(t, doc, script{
			0:               {{Start: []scheduler.Placement{start(1, "n1", 0, 1)}}},
			5 * time.Minute: {{Preempt: []scheduler.Preemption{preempt(1, 2)}}},
		})
		wantNone(t, c, InvariantGuarantee)
	})
	t.Run("a higher-priority job of the same project may", func(t *testing.T) {
		c := runScripted(t, guaranteeDoc, script{
			0:                {{Start: []scheduler.Placement{start(1, "n1", 0, 1)}}},
			30 * time.Minute: {{Preempt: []scheduler.Preemption{preempt(1, 3)}}, {Start: []scheduler.Placement{start(3, "n1", 0, 1)}}},
		})
		wantNone(t, c, InvariantGuarantee)
		if p := c.Preemptions; p.Total != 1 || p.Own != 1 {
			t.Errorf("preemptions %+v, want 1, within the project", p)
		}
	})
}

func TestCheckQuota(t *testing.T) {
	c := runScripted(t, `
seed: 1
duration: 1h
pools: [{name: p, nodes: [{name: n1, cpus: 16, memory: 64GiB, gpus: 2}]}]
quotas: [{project: a, pool: p, gpus: 1}]
jobs: [{project: a, pool: p, count: 2, gpus: 1, runtime: 2h}]
`, script{0: {{Start: []scheduler.Placement{start(1, "n1", 0), start(2, "n1", 1)}}}})
	wantViolation(t, c, InvariantQuota, []int64{1, 2}, "project a runs 2 GPUs in pool p, above its ceiling (quota 1 GPU)")
}

func TestCheckRepeatedPreemption(t *testing.T) {
	c := runScripted(t, guaranteeDoc, script{
		0:                {{Start: []scheduler.Placement{start(1, "n1", 0, 1)}}},
		30 * time.Minute: {{Preempt: []scheduler.Preemption{preempt(1, 3)}}, {Start: []scheduler.Placement{start(1, "n1", 0, 1)}}},
		40 * time.Minute: {{Preempt: []scheduler.Preemption{preempt(1, 3)}}},
	})
	wantViolation(t, c, InvariantRepeated, []int64{1, 3}, "job 1 (owner-low, project owner, low) was preempted again for job 3")
	if p := c.Preemptions; p.Total != 2 || p.Repeated != 1 {
		t.Errorf("preemptions %+v, want 2 with 1 repeated", p)
	}
}

func TestCheckMinimalPreemption(t *testing.T) {
	// Four low-priority 1-GPU jobs fill a 4-GPU node; a high-priority job
	// needs 1 GPU.
	const doc = `
seed: 1
duration: 1h
pools: [{name: p, preemption: true, nodes: [{name: n1, cpus: 16, memory: 64GiB, gpus: 4}]}]
quotas: [{project: a, pool: p, gpus: 4, max_priority: high}]
jobs:
  - {project: a, pool: p, priority: low, count: 4, gpus: 1, runtime: 2h, preemptible: true}
  - {project: a, pool: p, priority: high, count: 1, submit_at: 10m, gpus: 1, runtime: 2h}
`
	fill := []scheduler.Plan{{Start: []scheduler.Placement{start(1, "n1", 0), start(2, "n1", 1), start(3, "n1", 2), start(4, "n1", 3)}}}
	t.Run("three victims for one GPU", func(t *testing.T) {
		c := runScripted(t, doc, script{0: fill, 10 * time.Minute: {{Preempt: []scheduler.Preemption{preempt(1, 5), preempt(2, 5), preempt(3, 5)}}}})
		wantViolation(t, c, InvariantMinimal, []int64{5, 1, 2, 3}, "3 jobs (1, 2, 3) preempted for job 5 (a/1, project a, high), which needs 1 GPU on each of 1 node(s): without the largest (job 1) they free that on n1")
	})
	t.Run("one victim", func(t *testing.T) {
		c := runScripted(t, doc, script{0: fill, 10 * time.Minute: {{Preempt: []scheduler.Preemption{preempt(1, 5)}}}})
		wantNone(t, c, InvariantMinimal)
	})

	// A guest borrows all 8 GPUs; the owner, guaranteed 1, submits three
	// 1-GPU jobs at 1h.
	const reclaimDoc = `
seed: 1
duration: 2h
pools: [{name: p, borrowing: true, preemption: true, nodes: [{name: n1, cpus: 64, memory: 512GiB, gpus: 8}]}]
quotas: [{project: owner, pool: p, gpus: 1, borrow: {gpus: 7}}]
jobs:
  - {name: guest, project: guest, pool: p, count: 8, gpus: 1, runtime: 10h, preemptible: true}
  - {name: owner, project: owner, pool: p, count: 3, submit_at: 1h, gpus: 1, runtime: 10h, preemptible: true}
`
	var guests []scheduler.Placement
	for i := range 8 {
		pl := start(int64(i+1), "n1", i)
		pl.Borrowed = true
		guests = append(guests, pl)
	}
	t.Run("a reclaim beyond the guarantee", func(t *testing.T) {
		c := runScripted(t, reclaimDoc, script{0: {{Start: guests}},
			time.Hour: {{Preempt: []scheduler.Preemption{preempt(1, 9), preempt(2, 10), preempt(3, 11)}}}})
		wantViolation(t, c, InvariantMinimal, []int64{1, 2, 3}, "project owner reclaimed 3 job(s) (1, 2, 3) in pool p with 1 GPU left in its guarantee for its normal-or-higher jobs: without the largest (job 1) they free 2 GPUs")
		if p := c.Preemptions; p.Reclaim != 3 {
			t.Errorf("preemptions %+v, want 3 reclaims", p)
		}
	})
	t.Run("one reclaim per unit of guarantee", func(t *testing.T) {
		c := runScripted(t, reclaimDoc, script{0: {{Start: guests}}, time.Hour: {{Preempt: []scheduler.Preemption{preempt(1, 9)}}}})
		wantNone(t, c, InvariantMinimal)
	})
}

func TestCheckStability(t *testing.T) {
	// A plan that starts the low-priority job and leaves the high-priority
	// one queued is not a fixed point: the real scheduler, run again,
	// preempts the first for the second.
	c := runScripted(t, `
seed: 1
duration: 10m
pools: [{name: p, preemption: true, nodes: [{name: n1, cpus: 16, memory: 64GiB, gpus: 2}]}]
quotas: [{project: a, pool: p, gpus: 2, max_priority: high}]
jobs:
  - {project: a, pool: p, priority: low, count: 1, gpus: 2, runtime: 2h, preemptible: true}
  - {project: a, pool: p, priority: high, count: 1, gpus: 2, runtime: 2h}
`, script{0: {{Start: []scheduler.Placement{start(1, "n1", 0, 1)}}}})
	wantViolation(t, c, InvariantStability, []int64{1, 2}, "the plan is not a fixed point: run again on the state it left, with no new events, the scheduler preempts job 1 for job 2")
}

func TestCheckStarvation(t *testing.T) {
	t.Run("within its guarantee, never started", func(t *testing.T) {
		c := runScripted(t, `
seed: 1
duration: 1h
pools: [{name: p, preemption: true, nodes: [{name: n1, cpus: 16, memory: 64GiB, gpus: 2}]}]
quotas: [{project: a, pool: p, gpus: 2}]
jobs: [{project: a, pool: p, count: 1, gpus: 1, runtime: 2h, preemptible: true}]
`, script{})
		wantViolation(t, c, InvariantStarvation, []int64{1}, "job 1 (a/0, project a, normal) waited 1h and never started")
	})
	// Job 2 needs room beyond the guarantee (job 1 holds it at the same
	// priority), and a pool without preemption cannot make room: neither
	// is starvation.
	for name, doc := range map[string]string{
		"beyond its guarantee": `
seed: 1
duration: 1h
pools: [{name: p, borrowing: true, preemption: true, nodes: [{name: n1, cpus: 16, memory: 64GiB, gpus: 2}]}]
quotas: [{project: a, pool: p, gpus: 1, borrow: {gpus: 1}}]
jobs: [{project: a, pool: p, count: 2, gpus: 1, runtime: 2h, preemptible: true}]
`,
		"pool without preemption": `
seed: 1
duration: 1h
pools: [{name: p, nodes: [{name: n1, cpus: 16, memory: 64GiB, gpus: 2}]}]
quotas: [{project: a, pool: p, gpus: 2}]
jobs: [{project: a, pool: p, count: 2, gpus: 1, runtime: 2h, preemptible: true}]
`,
	} {
		t.Run(name, func(t *testing.T) {
			c := runScripted(t, doc, script{0: {{Start: []scheduler.Placement{start(1, "n1", 0)}}}})
			wantNone(t, c, InvariantStarvation)
		})
	}
}

// TestCheckHeldByScheduler: on workloads the scheduler handles well, the
// checks find nothing (a check that fires on correct plans is useless).
func TestCheckHeldByScheduler(t *testing.T) {
	for _, name := range []string{"gang.yaml", "fairshare_mixed.yaml"} {
		t.Run(name, func(t *testing.T) {
			r, err := RunWith(load(t, name), Options{Check: true})
			if err != nil {
				t.Fatal(err)
			}
			if n := r.Check.Violated(); n != 0 || r.Check.Passes != r.Passes {
				t.Errorf("%d violation(s) in %d of %d passes: %v", n, r.Check.Passes, r.Passes, r.Check.Violations)
			}
		})
	}
}

// TestCheckChangesNothing: the checks only read the run; the report is the
// same with and without them.
func TestCheckChangesNothing(t *testing.T) {
	w := load(t, "preemption.yaml")
	plain, checked := run(t, w), mustRunWith(t, w, Options{Check: true})
	checked.Check = nil
	var a, b strings.Builder
	if err := plain.WriteJSON(&a); err != nil {
		t.Fatal(err)
	}
	if err := checked.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Errorf("the report differs with --check:\n%s\n---\n%s", a.String(), b.String())
	}
}

func mustRunWith(t *testing.T, w Workload, opt Options) *Report {
	t.Helper()
	r, err := RunWith(w, opt)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return r
}

// TestEvents: the event log has every start, preemption, requeue and end,
// in order, with times and reasons.
func TestEvents(t *testing.T) {
	w := mustParse(t, `
seed: 1
duration: 10h
pools: [{name: p, preemption: true, nodes: [{name: n, cpus: 8, memory: 8GiB, gpus: [0, 1]}]}]
quotas: [{project: a, pool: p, gpus: 2, max_priority: high}]
jobs:
  - {name: sweep, project: a, pool: p, priority: low, count: 1, gpus: 2, cpus: 1, runtime: 2h, preemptible: true}
  - {name: urgent, project: a, pool: p, priority: high, count: 1, submit_at: 25m, gpus: 2, cpus: 1, runtime: 1h, timeout: 30m}
`)
	var got []Event
	mustRunWith(t, w, Options{Events: func(e Event) { got = append(got, e) }})
	want := []string{
		"0s        start   job 1 sweep (a, low) attempt 1 on n:0,1; queued 0s",
		"25m       preempt job 1 sweep (a, low) attempt 1 for job 2 (a): preempted for job 2 (priority high) in pool p",
		"25m       requeue job 1 sweep (a, low) attempt 1: stopped after 25m, lost 5m since its last checkpoint",
		"25m       start   job 2 urgent (a, high) attempt 1 on n:0,1; queued 0s (WaitingForResources)",
		"55m       end     job 2 urgent (a, high) attempt 1: failed-timeout",
		"55m       start   job 1 sweep (a, low) attempt 2 on n:0,1; queued 30m (QuotaExceeded)",
		"2h35m     end     job 1 sweep (a, low) attempt 2: succeeded",
	}
	var lines []string
	for _, e := range got {
		lines = append(lines, e.String())
	}
	if !slices.Equal(lines, want) {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if len(got) > 1 && (got[1].For != 2 || got[1].ForProject != "a" || got[1].Kind != EventPreempt) {
		t.Errorf("preempt event %+v; want it for job 2 of project a", got[1])
	}
}

// TestKueueScenariosHoldInvariants runs the small scenarios after Kueue's
// tests (a borrower preempting guaranteed work: livelock; a reclaim taking
// more than the guarantee; own preemption with reclaim) with the checks on.
func TestKueueScenariosHoldInvariants(t *testing.T) {
	for _, name := range []string{"kueue-livelock.yaml", "kueue-overpreempt.yaml", "kueue-own-reclaim.yaml"} {
		t.Run(name, func(t *testing.T) { holdsInvariants(t, name, 0) })
	}
}

// holdsInvariants runs a workload with the checks on and fails listing
// the first violations of each invariant.
func holdsInvariants(t *testing.T, name string, minJobs int) {
	t.Helper()
	r := mustRunWith(t, load(t, name), Options{Check: true})
	if r.Submitted < minJobs {
		t.Fatalf("%d jobs submitted; the workload should submit at least %d", r.Submitted, minJobs)
	}
	c := r.Check
	if c.Violated() == 0 {
		return
	}
	var b strings.Builder
	for _, inv := range Invariants() {
		fmt.Fprintf(&b, "%s: %d", inv, c.Counts[inv])
		shown := 0
		for _, v := range c.Violations {
			if v.Invariant == inv && shown < 3 {
				fmt.Fprintf(&b, "\n    %s", v)
				shown++
			}
		}
		b.WriteString("\n")
	}
	t.Errorf("%d violation(s) in %d passes (%d jobs, %+v):\n%s", c.Violated(), c.Passes, r.Submitted, c.Preemptions, b.String())
}
