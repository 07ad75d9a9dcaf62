package slurmtest_test

import (
	"context"
	"fmt"
	"slices"
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

// TestStartNodes starts a cluster of two nodes (two slurmd on this
// machine) and runs a task on each with srun.
func TestStartNodes(t *testing.T) {
	t0 := time.Now()
	c := slurmtest.NewWith(t, slurmtest.Options{Nodes: 2})
	t.Logf("started %v in %v", c.Nodes, time.Since(t0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := c.Command(ctx, "srun", "--nodes=2", "--ntasks-per-node=1", "sh", "-c", `echo "$SLURM_PROCID $SLURMD_NODENAME"`).CombinedOutput()
	if err != nil {
		t.Fatalf("srun: %v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	slices.Sort(lines)
	if want := []string{"0 " + c.Nodes[0], "1 " + c.Nodes[1]}; !slices.Equal(lines, want) {
		t.Errorf("srun printed %q, want %q", lines, want)
	}
}

// TestMemoryLimits starts a cluster that enforces --mem: a job that
// allocates past it ends OUT_OF_MEMORY, one within it COMPLETED.
func TestMemoryLimits(t *testing.T) {
	c := slurmtest.NewWith(t, slurmtest.Options{MemoryLimits: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	submit := func(mib int) string {
		t.Helper()
		// Touch every page: memory counts once written.
		out, err := c.Command(ctx, "sbatch", "--parsable", "-o", "/dev/null", "--mem=64M",
			fmt.Sprintf("--wrap=python3 -c 'b = bytearray(%d << 20); b[::4096] = b\"x\" * len(b[::4096])'", mib)).CombinedOutput()
		if err != nil {
			t.Fatalf("sbatch: %v: %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	over, within := submit(512), submit(8)
	state := func(id string) string {
		out, _ := c.Command(ctx, "squeue", "-h", "-t", "all", "-j", id, "-o", "%T").Output()
		return strings.TrimSpace(string(out))
	}
	ended := func(s string) bool {
		return s != "" && s != "PENDING" && s != "RUNNING" && s != "COMPLETING" && s != "CONFIGURING"
	}
	for _, j := range []struct{ id, want string }{{over, "OUT_OF_MEMORY"}, {within, "COMPLETED"}} {
		var got string
		for got = state(j.id); !ended(got); got = state(j.id) {
			if ctx.Err() != nil {
				t.Fatalf("job %s still %q", j.id, got)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if got != j.want {
			t.Errorf("job %s ended %s, want %s", j.id, got, j.want)
		}
	}
}
