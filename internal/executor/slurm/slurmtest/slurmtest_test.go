package slurmtest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"trainyard/internal/executor/slurm/slurmtest"
)

// TestStart starts a cluster, runs a job through it and stops it.
func TestStart(t *testing.T) {
	t0 := time.Now()
	c := slurmtest.New(t)
	t.Logf("started in %v: %d CPUs, %d GPUs (devices: %v)", time.Since(t0), c.CPUs, c.GPUs, c.GPUDevices)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := c.Command(ctx, "sbatch", "--parsable", "-o", "/dev/null", "--wrap=true").CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch: %v: %s", err, out)
	}
	out, err = c.Command(ctx, "scontrol", "show", "nodes", "--oneliner").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "NodeName="+c.Node) {
		t.Fatalf("scontrol show nodes: %v: %s", err, out)
	}
	t.Logf("%s", out)
}
