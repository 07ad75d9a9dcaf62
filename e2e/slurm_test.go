package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/executor/slurm/slurmtest"
)

// slurmServer starts a server with a pool, hpc, on a Slurm executor over
// the shared test cluster (one node of 8 CPUs), its jobs named with a
// prefix of the test's own. Isolation is off: Slurm runs jobs as the
// user that submits them (the server's), which a server that isolates
// jobs refuses.
func slurmServer(t *testing.T, prefix string) (*server, *slurmtest.Cluster) {
	t.Helper()
	c := slurmtest.Shared(t)
	extra := fmt.Sprintf(`isolation: off
executors:
  - name: hpc
    kind: slurm
    partition: %s
    env: [SLURM_CONF=%s]
    name_prefix: %s
    poll_interval: 200ms
pools:
  - name: hpc
    executor: hpc
`, c.Partition, c.Conf, prefix)
	return startServer(t, serverOpts{extra: extra}), c
}

// squeueNames lists the names of the jobs Slurm still lists (any state).
func squeueNames(t *testing.T, c *slurmtest.Cluster) string {
	t.Helper()
	out, err := c.Command(context.Background(), "squeue", "--noheader", "--format=%j").Output()
	if err != nil {
		t.Fatalf("squeue: %v", err)
	}
	return string(out)
}

// TestSlurmPool: a server runs a pool on a Slurm cluster. The pool has
// the cluster's node; the smoke job succeeds with its log readable
// through the API; a failing job's exit code reaches show; a multi-node
// job is refused at submit; a job Slurm holds (its node is taken by a
// job outside Trainyard) says Slurm's reason in why, then runs when the
// node frees; cancel of a running job ends it canceled and Slurm no
// longer lists it.
func TestSlurmPool(t *testing.T) {
	prefix := fmt.Sprintf("ty-e2e-%d", time.Now().UnixNano()%1_000_000)
	s, c := slurmServer(t, prefix)
	ctx := context.Background()

	var pool apitypes.Pool
	waitFor(t, 30*time.Second, "pool hpc to have the cluster's node", func() bool {
		s.api("GET", "/api/v1/pools/hpc", nil, &pool)
		return len(pool.Nodes) == 1
	})
	if pool.Executor != "hpc" || pool.Capacity.CPUs != float64(c.CPUs) {
		t.Errorf("pool hpc: executor %q, capacity %+v; want hpc with %d CPUs", pool.Executor, pool.Capacity, c.CPUs)
	}

	// The smoke job, and a failing one.
	smoke := s.submit("name: smoke\npool: hpc\nresources: {cpus: 1, memory: 256MiB}\nentrypoint: [sh, -c, \"echo hello; exit 0\"]\n")
	fail := s.submit("name: crash\npool: hpc\nresources: {cpus: 1, memory: 256MiB}\npolicy: {retries: 0}\nentrypoint: [sh, -c, \"echo bye; exit 3\"]\n")
	if got := s.waitState(smoke.ID, 2*time.Minute, "succeeded", "failed", "canceled"); got.State != "succeeded" {
		t.Fatalf("smoke job on Slurm: %s (%s) %+v", got.State, got.Reason, got.Attempts)
	}
	if out := s.mustCLI("logs", strconv.FormatInt(smoke.ID, 10)); !strings.Contains(out, "hello") {
		t.Errorf("logs of the smoke job:\n%s\nwant hello", out)
	}
	got := s.waitState(fail.ID, 2*time.Minute, "succeeded", "failed", "canceled")
	if n := len(got.Attempts); got.State != "failed" || n == 0 || got.Attempts[n-1].ExitCode == nil || *got.Attempts[n-1].ExitCode != 3 {
		t.Errorf("failing job on Slurm: %s, attempts %+v; want failed with exit code 3", got.State, got.Attempts)
	}
	if out := s.mustCLI("show", strconv.FormatInt(fail.ID, 10)); !strings.Contains(out, "3") {
		t.Errorf("show of the failed job:\n%s", out)
	}

	// Multi-node is refused at submit, saying why.
	b := fmt.Sprintf("%q", "name: gang\npool: hpc\nresources: {nodes: 2, cpus: 1}\nentrypoint: [sh, -c, \"true\"]\n")
	code, body := s.rawAPI("POST", "/api/v1/jobs", apitypes.SubmitRequest{Spec: []byte(b)})
	if code/100 != 4 || !strings.Contains(body, "single-node") {
		t.Errorf("2-node job on a Slurm pool: status %d %s; want it refused as single-node only", code, body)
	}

	// A job outside Trainyard takes every CPU of the node: Trainyard's
	// job waits in Slurm, and why says Slurm's reason.
	out, err := c.Command(ctx, "sbatch", "--parsable", "--partition="+c.Partition, "--cpus-per-task="+strconv.Itoa(c.CPUs),
		"--output=/dev/null", "--job-name=blocker-"+prefix, "--wrap=sleep 600").Output()
	if err != nil {
		t.Fatalf("sbatch the blocker: %v", err)
	}
	blocker := strings.TrimSpace(string(out))
	defer c.Command(ctx, "scancel", blocker).Run()
	waitFor(t, 30*time.Second, "the blocker to run", func() bool {
		out, _ := c.Command(ctx, "squeue", "--noheader", "--jobs="+blocker, "--format=%T").Output()
		return strings.TrimSpace(string(out)) == "RUNNING"
	})
	held := s.submit("name: held\npool: hpc\nresources: {cpus: 1, memory: 256MiB}\nentrypoint: [sh, -c, \"echo ran\"]\n")
	var why string
	waitFor(t, time.Minute, "why to say Slurm's reason", func() bool {
		why, _, _ = s.cli("why", strconv.FormatInt(held.ID, 10))
		return strings.Contains(why, "waiting in Slurm")
	})
	if !strings.Contains(why, "Resources") && !strings.Contains(why, "Priority") {
		t.Errorf("why of a job Slurm holds:\n%s\nwant Slurm's reason (Resources)", why)
	}
	if err := c.Command(ctx, "scancel", blocker).Run(); err != nil {
		t.Fatalf("scancel the blocker: %v", err)
	}
	if got := s.waitState(held.ID, 2*time.Minute, "succeeded", "failed", "canceled"); got.State != "succeeded" {
		t.Errorf("held job once the node freed: %s (%s)", got.State, got.Reason)
	}

	// Cancel of a running job: canceled, and gone from Slurm.
	long := s.submit("name: long\npool: hpc\nresources: {cpus: 1, memory: 256MiB}\nentrypoint: [sleep, \"600\"]\n")
	s.waitState(long.ID, 2*time.Minute, "running")
	s.mustCLI("cancel", strconv.FormatInt(long.ID, 10))
	if got := s.waitState(long.ID, time.Minute, "canceled", "failed", "succeeded"); got.State != "canceled" {
		t.Errorf("canceled job: %s (%s)", got.State, got.Reason)
	}
	name := fmt.Sprintf("%s-%d-1", prefix, long.ID)
	waitFor(t, time.Minute, "Slurm to no longer list the canceled job", func() bool {
		return !strings.Contains(squeueNames(t, c), name)
	})
}

// TestSlurmRestart: a server killed with SIGKILL while its Slurm jobs run
// reattaches to them once restarted: every job succeeds in its first
// attempt, with its whole log, and Slurm ran each attempt once (its job
// id, in the attempt's directory, is the one from before the kill, and
// Slurm lists one job by that name).
func TestSlurmRestart(t *testing.T) {
	prefix := fmt.Sprintf("ty-e2e-r%d", time.Now().UnixNano()%1_000_000)
	s, c := slurmServer(t, prefix)
	ctx := context.Background()
	t0 := time.Now()

	var ids []int64
	for i := range 3 {
		j := s.submit(fmt.Sprintf("name: nap-%d\npool: hpc\nresources: {cpus: 1, memory: 256MiB}\n", i) +
			"entrypoint: [sh, -c, \"echo begin; sleep 5; echo end\"]\n")
		ids = append(ids, j.ID)
	}
	slurmJob := map[int64]string{}
	for _, id := range ids {
		s.waitState(id, 2*time.Minute, "running")
		f := filepath.Join(s.data, "runs", strconv.FormatInt(id, 10), "1", "slurm-job")
		waitFor(t, 30*time.Second, "the Slurm job id in "+f, func() bool {
			b, err := os.ReadFile(f)
			slurmJob[id] = strings.TrimSpace(string(b))
			return err == nil && slurmJob[id] != ""
		})
	}

	s.kill9()
	// The kill must land while Slurm still runs at least one of them, or
	// this test tests nothing.
	out, err := c.Command(ctx, "squeue", "--noheader", "--states=R,CG", "--format=%i").Output()
	if err != nil {
		t.Fatalf("squeue: %v", err)
	}
	running := 0
	for _, id := range ids {
		if slices.Contains(strings.Fields(string(out)), slurmJob[id]) {
			running++
		}
	}
	if running == 0 {
		t.Fatalf("every job had ended in Slurm when the server was killed; squeue: %q", out)
	}
	t.Logf("killed the server %v after the first submit, %d of 3 jobs still running in Slurm", time.Since(t0).Round(time.Millisecond), running)

	s.start()
	for _, id := range ids {
		got := s.waitState(id, 2*time.Minute, "succeeded", "failed", "canceled")
		if got.State != "succeeded" || len(got.Attempts) != 1 {
			t.Errorf("job %d after the restart: %s (%s), %d attempts; want succeeded in its first", id, got.State, got.Reason, len(got.Attempts))
		}
		if out := s.mustCLI("logs", strconv.FormatInt(id, 10)); !strings.Contains(out, "begin") || !strings.Contains(out, "end") {
			t.Errorf("log of job %d after the restart:\n%s\nwant begin and end", id, out)
		}
		b, err := os.ReadFile(filepath.Join(s.data, "runs", strconv.FormatInt(id, 10), "1", "slurm-job"))
		if got := strings.TrimSpace(string(b)); err != nil || got != slurmJob[id] {
			t.Errorf("job %d's Slurm job after the restart: %q (%v), want %s, the one from before the kill", id, got, err, slurmJob[id])
		}
		name := fmt.Sprintf("%s-%d-", prefix, id)
		out, err := c.Command(ctx, "squeue", "--noheader", "--states=all", "--format=%j").Output()
		if err != nil {
			t.Fatalf("squeue: %v", err)
		}
		if n := strings.Count(string(out), name); n != 1 {
			t.Errorf("Slurm lists %d jobs named %s*, want 1 (the attempt was submitted again?)", n, name)
		}
	}
	t.Logf("every job succeeded %v after the first submit", time.Since(t0).Round(time.Millisecond))
}
