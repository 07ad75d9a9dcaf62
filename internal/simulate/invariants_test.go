//go:build invariants

// The invariant acceptance tests: the generated week-long workloads and the
// Kueue scenarios must hold every invariant sim --check checks. Run them
// with
//
//	go test -tags invariants -run 'Invariants' ./internal/simulate/
//
// They are behind a build tag until the scheduler holds the invariants;
// then the tag goes and they run with the rest.
package simulate

import (
	"fmt"
	"strings"
	"testing"
)

// TestGeneratedWorkloadsHoldInvariants runs each generated workload (a
// week on 100 nodes of 8 GPUs, about 10,000 jobs: see testdata/gen-*.yaml)
// with the checks on and demands no violation.
func TestGeneratedWorkloadsHoldInvariants(t *testing.T) {
	for _, name := range []string{"gen-steady.yaml", "gen-overload.yaml", "gen-gangs.yaml"} {
		t.Run(name, func(t *testing.T) { holdsInvariants(t, name, 10_000) })
	}
}

// TestKueueScenariosHoldInvariants runs the small scenarios that break the
// invariants the way Kueue's tests guard against (livelock, over-preemption,
// own preemption with reclaim).
func TestKueueScenariosHoldInvariants(t *testing.T) {
	for _, name := range []string{"kueue-livelock.yaml", "kueue-overpreempt.yaml", "kueue-own-reclaim.yaml"} {
		t.Run(name, func(t *testing.T) { holdsInvariants(t, name, 0) })
	}
}

func holdsInvariants(t *testing.T, name string, minJobs int) {
	r, err := RunWith(load(t, name), Options{Check: true})
	if err != nil {
		t.Fatal(err)
	}
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
