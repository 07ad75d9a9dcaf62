package slurm_test

import (
	"testing"

	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
)

// TestExercise runs the conformance suite against the real daemons, on
// two nodes (both this machine), so that its multi-node attempt runs. The
// batch step is the local executor's supervisor, on this machine: the
// suite's process checks hold, and the supervisor's records (progress,
// checkpoints, outputs) are reported as the local executor reports them.
// Slurm picks a multi-node attempt's nodes and GPUs, whatever its
// placement says.
func TestExercise(t *testing.T) {
	t.Parallel() // beside TestSlurmTimeLimit, which mostly waits
	w := newWorldOf(t, twoNodes)
	executortest.Exercise(t, func(t *testing.T) executor.Executor { return w.exec(t) }, executortest.Options{
		Processes:            true,
		SchedulerPlacesNodes: true,
	})
}
