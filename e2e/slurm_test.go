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
// the test cluster the package shares for opts, its jobs named with a
// prefix of the test's own. Isolation is off: Slurm runs jobs as the
// user that submits them (the server's), which a server that isolates
// jobs refuses.
func slurmServer(t *testing.T, prefix string, opts slurmtest.Options) (*server, *slurmtest.Cluster) {
	t.Helper()
	c := slurmtest.SharedWith(t, opts)
	extra := fmt.Sprintf(`isolation: off
executors:
  - name: hpc
    kind: slurm
    partition: %s
    env: [SLURM_CONF=%s]
    name_prefix: %s
    poll_interval: 200ms
    memory_limits: %v
pools:
  - name: hpc
    executor: hpc
`, c.Partition, c.Conf, prefix, c.MemoryLimits)
	return startServer(t, serverOpts{extra: extra}), c
}

// twoNodes is the cluster of TestSlurmPool and TestSlurmRestart: two
// nodes (two slurmd on this machine), memory not enforced.
var twoNodes = slurmtest.Options{Nodes: 2}

// squeueNames lists the names of the jobs Slurm still lists (any state).
func squeueNames(t *testing.T, c *slurmtest.Cluster) string {
	t.Helper()
	out, err := c.Command(context.Background(), "squeue", "--noheader", "--format=%j").Output()
	if err != nil {
		t.Fatalf("squeue: %v", err)
	}
	return string(out)
}

// TestSlurmPool: a server runs a pool on a Slurm cluster of two nodes.
// The pool has the cluster's nodes; the smoke job succeeds with its log,
// its progress and its outputs through the API; a failing job's exit
// code reaches show; a GPU job sees the GPU Slurm gave it; a job past its
// timeout ends Timeout; a 2-node job runs a rank on each node, each
// writing its rank environment into the job's outputs; a job Slurm holds
// (both nodes taken by a job outside Trainyard) says Slurm's reason in
// why, then runs when the nodes free; cancel of a running job ends it
// canceled and Slurm no longer lists it.
func TestSlurmPool(t *testing.T) {
	prefix := fmt.Sprintf("ty-e2e-%d", time.Now().UnixNano()%1_000_000)
	s, c := slurmServer(t, prefix, twoNodes)
	ctx := context.Background()

	var pool apitypes.Pool
	waitFor(t, 30*time.Second, "pool hpc to have the cluster's 2 nodes", func() bool {
		s.api("GET", "/api/v1/pools/hpc", nil, &pool)
		return len(pool.Nodes) == 2
	})
	if pool.Executor != "hpc" || pool.Capacity.CPUs != float64(2*c.CPUs) || pool.Capacity.GPUs != 2*c.GPUs {
		t.Errorf("pool hpc: executor %q, capacity %+v; want hpc with %d CPUs and %d GPUs (2 nodes)", pool.Executor, pool.Capacity, 2*c.CPUs, 2*c.GPUs)
	}

	// The smoke job, a failing one, a GPU one, one past its timeout and
	// one of two nodes, all at once.
	out := s.mustCLI("submit", filepath.Join(repoRoot(), "examples", "smoke.yaml"), "--set", "pool=hpc")
	smokeID, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatalf("submit printed %q, want the new job id", out)
	}
	fail := s.submit("name: crash\npool: hpc\nresources: {cpus: 1, memory: 256MiB}\npolicy: {retries: 0}\nentrypoint: [sh, -c, \"echo bye; exit 3\"]\n")
	gpu := s.submit("name: gpu\npool: hpc\nresources: {cpus: 1, memory: 256MiB, gpus: 1}\n" +
		"entrypoint: [sh, -c, 'echo \"gpus=$CUDA_VISIBLE_DEVICES\"; printf %s \"$CUDA_VISIBLE_DEVICES\" > \"$TRAINYARD_OUTPUT_DIR/gpus\"']\n")
	late := s.submit("name: late\npool: hpc\nresources: {cpus: 1, memory: 256MiB}\npolicy: {timeout: 2s, retries: 0}\nentrypoint: [sleep, \"60\"]\n")
	gang := s.submit("name: gang\npool: hpc\nresources: {nodes: 2, cpus: 1, memory: 256MiB}\n" +
		"entrypoint: [sh, -c, 'echo \"rank=$RANK world=$WORLD_SIZE master=$MASTER_ADDR node=$SLURMD_NODENAME\" > \"$TRAINYARD_OUTPUT_DIR/rank-$RANK.txt\"']\n")

	if got := s.waitState(smokeID, 2*time.Minute, "succeeded", "failed", "canceled"); got.State != "succeeded" {
		t.Fatalf("smoke job on Slurm: %s (%s) %+v", got.State, got.Reason, got.Attempts)
	}
	if out := s.mustCLI("logs", strconv.FormatInt(smokeID, 10)); !strings.Contains(out, `trainyard: {"step": 40`) {
		t.Errorf("log of the smoke job:\n%s\nwant its last progress line (step 40)", out)
	}
	if loss := s.metrics(smokeID, "loss")["loss"]; len(loss) == 0 || loss[len(loss)-1].Step != 40 {
		t.Errorf("loss of the smoke job through the API: %+v; want its progress up to step 40", loss)
	}
	if files := s.outputs(smokeID); !slices.Contains(files, "model.json") {
		t.Errorf("outputs of the smoke job: %v; want model.json", files)
	}

	got := s.waitState(fail.ID, 2*time.Minute, "succeeded", "failed", "canceled")
	if n := len(got.Attempts); got.State != "failed" || n == 0 || got.Attempts[n-1].ExitCode == nil || *got.Attempts[n-1].ExitCode != 3 {
		t.Errorf("failing job on Slurm: %s, attempts %+v; want failed with exit code 3", got.State, got.Attempts)
	}
	if out := s.mustCLI("show", strconv.FormatInt(fail.ID, 10)); !strings.Contains(out, "3") {
		t.Errorf("show of the failed job:\n%s", out)
	}

	// Slurm names the GPU it allocates where its GPUs are devices.
	if got := s.waitState(gpu.ID, 2*time.Minute, "succeeded", "failed", "canceled"); got.State != "succeeded" {
		t.Errorf("GPU job on Slurm: %s (%s) %+v", got.State, got.Reason, got.Attempts)
	} else if v := s.output(gpu.ID, "gpus"); c.GPUDevices && v == "" {
		t.Errorf("GPU job's CUDA_VISIBLE_DEVICES is empty; want the GPU Slurm allocated\nlog:\n%s", s.mustCLI("logs", strconv.FormatInt(gpu.ID, 10)))
	} else if !c.GPUDevices {
		t.Logf("the test cluster's GPUs are plain files (no mknod here): Slurm names none, CUDA_VISIBLE_DEVICES=%q", v)
	}

	got = s.waitState(late.ID, time.Minute, "succeeded", "failed", "canceled")
	if n := len(got.Attempts); got.State != "failed" || got.Reason != "Timeout" || n != 1 || got.Attempts[0].State != "timed_out" {
		t.Errorf("job past its 2s timeout: %s (%s), attempts %+v; want failed, Timeout", got.State, got.Reason, got.Attempts)
	}

	// The 2-node job: a rank on each node, their outputs the job's.
	if got := s.waitState(gang.ID, 2*time.Minute, "succeeded", "failed", "canceled"); got.State != "succeeded" {
		t.Fatalf("2-node job on Slurm: %s (%s) %+v\nlog:\n%s", got.State, got.Reason, got.Attempts, s.mustCLI("logs", strconv.FormatInt(gang.ID, 10)))
	}
	if files := s.outputs(gang.ID); !slices.Equal(files, []string{"rank-0.txt", "rank-1.txt"}) {
		t.Errorf("outputs of the 2-node job: %v; want rank-0.txt and rank-1.txt", files)
	}
	for rank, node := range c.Nodes[:2] {
		want := fmt.Sprintf("rank=%d world=2 master=%s node=%s", rank, c.Nodes[0], node)
		if got := strings.TrimSpace(s.output(gang.ID, fmt.Sprintf("rank-%d.txt", rank))); got != want {
			t.Errorf("rank %d of the 2-node job wrote %q, want %q", rank, got, want)
		}
	}

	// A job outside Trainyard takes every CPU of both nodes: Trainyard's
	// job waits in Slurm, and why says Slurm's reason.
	out2, err := c.Command(ctx, "sbatch", "--parsable", "--partition="+c.Partition, "--nodes="+strconv.Itoa(len(c.Nodes)),
		"--ntasks-per-node=1", "--cpus-per-task="+strconv.Itoa(c.CPUs),
		"--output=/dev/null", "--job-name=blocker-"+prefix, "--wrap=sleep 600").Output()
	if err != nil {
		t.Fatalf("sbatch the blocker: %v", err)
	}
	blocker := strings.TrimSpace(string(out2))
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
		t.Errorf("held job once the nodes freed: %s (%s)", got.State, got.Reason)
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

// outputs lists the paths of a job's outputs through the API, once their
// manifest is recorded.
func (s *server) outputs(id int64) []string {
	s.t.Helper()
	var m apitypes.Manifest
	waitFor(s.t, 30*time.Second, fmt.Sprintf("job %d's outputs manifest", id), func() bool {
		return s.api("GET", fmt.Sprintf("/api/v1/jobs/%d/artifacts", id), nil, &m) == 200
	})
	var paths []string
	for _, f := range m.Files {
		paths = append(paths, f.Path)
	}
	slices.Sort(paths)
	return paths
}

// output reads one of a job's outputs through the API.
func (s *server) output(id int64, path string) string {
	s.t.Helper()
	s.outputs(id)
	var b []byte
	if code := s.apiRaw("GET", fmt.Sprintf("/api/v1/jobs/%d/artifacts/%s", id, path), nil, &b); code != 200 {
		s.t.Fatalf("GET job %d's output %s: status %d: %s", id, path, code, b)
	}
	return string(b)
}

// TestSlurmRestart: a server killed with SIGKILL while its Slurm jobs run
// (three of one node, one of two) reattaches to them once restarted:
// every job succeeds in its first attempt, with its whole log (every
// rank's), and Slurm ran each attempt once (its job id, in the attempt's
// directory, is the one from before the kill, and Slurm lists one job by
// that name).
func TestSlurmRestart(t *testing.T) {
	prefix := fmt.Sprintf("ty-e2e-r%d", time.Now().UnixNano()%1_000_000)
	s, c := slurmServer(t, prefix, twoNodes)
	ctx := context.Background()
	t0 := time.Now()

	var ids []int64
	for i := range 3 {
		j := s.submit(fmt.Sprintf("name: nap-%d\npool: hpc\nresources: {cpus: 1, memory: 256MiB}\n", i) +
			"entrypoint: [sh, -c, \"echo begin; sleep 5; echo end\"]\n")
		ids = append(ids, j.ID)
	}
	gang := s.submit("name: nap-gang\npool: hpc\nresources: {nodes: 2, cpus: 1, memory: 256MiB}\n" +
		"entrypoint: [sh, -c, \"echo begin $RANK; sleep 5; echo end $RANK\"]\n")
	ids = append(ids, gang.ID)
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
	t.Logf("killed the server %v after the first submit, %d of %d jobs still running in Slurm", time.Since(t0).Round(time.Millisecond), running, len(ids))

	s.start()
	for _, id := range ids {
		got := s.waitState(id, 2*time.Minute, "succeeded", "failed", "canceled")
		if got.State != "succeeded" || len(got.Attempts) != 1 {
			t.Errorf("job %d after the restart: %s (%s), %d attempts; want succeeded in its first", id, got.State, got.Reason, len(got.Attempts))
		}
		log := s.mustCLI("logs", strconv.FormatInt(id, 10))
		if !strings.Contains(log, "begin") || !strings.Contains(log, "end") {
			t.Errorf("log of job %d after the restart:\n%s\nwant begin and end", id, log)
		}
		if id == gang.ID && !(strings.Contains(log, "end 0") && strings.Contains(log, "end 1")) {
			t.Errorf("log of the 2-node job after the restart:\n%s\nwant the end of ranks 0 and 1", log)
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

// TestSlurmOOM: on a cluster that enforces --mem (task/cgroup; the
// other tests' cluster does not confine jobs), a job that allocates past
// its resources.memory is killed by Slurm and ends OOMKilled; the
// supervisor, which saw only its job killed, does not have the last word.
func TestSlurmOOM(t *testing.T) {
	prefix := fmt.Sprintf("ty-e2e-m%d", time.Now().UnixNano()%1_000_000)
	s, _ := slurmServer(t, prefix, slurmtest.Options{MemoryLimits: true})
	// Every page written: memory counts once touched.
	hog := s.submit("name: hog\npool: hpc\nresources: {cpus: 1, memory: 128MiB}\npolicy: {retries: 0}\n" +
		`entrypoint: [python3, -c, "b = bytearray(1 << 30); b[::4096] = b'x' * len(b[::4096]); print('survived')"]` + "\n")
	got := s.waitState(hog.ID, 2*time.Minute, "succeeded", "failed", "canceled")
	if got.State != "failed" || got.Reason != "OOMKilled" {
		t.Errorf("job over its 128MiB: %s (%s: %s); want failed, OOMKilled\nlog:\n%s", got.State, got.Reason, got.Message,
			s.mustCLI("logs", strconv.FormatInt(hog.ID, 10)))
	}
}
