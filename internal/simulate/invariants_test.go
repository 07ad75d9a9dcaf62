// The invariant acceptance test on the generated week-long workloads: they
// must hold every invariant sim --check checks (about 35 s, 3 min with
// -race). Run it alone with
//
//	go test -run TestGeneratedWorkloadsHoldInvariants ./internal/simulate/
package simulate

import "testing"

// TestGeneratedWorkloadsHoldInvariants runs each generated workload (a
// week on 100 nodes of 8 GPUs, about 10,000 jobs: see testdata/gen-*.yaml)
// with the checks on and demands no violation.
func TestGeneratedWorkloadsHoldInvariants(t *testing.T) {
	for _, name := range []string{"gen-steady.yaml", "gen-overload.yaml", "gen-gangs.yaml"} {
		t.Run(name, func(t *testing.T) { holdsInvariants(t, name, 10_000) })
	}
}
