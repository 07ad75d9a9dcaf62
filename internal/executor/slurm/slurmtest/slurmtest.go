// Package slurmtest runs a private Slurm for tests: munged on a socket of
// its own, slurmctld and slurmd started by hand (no systemd) from a
// generated slurm.conf in a temporary directory, on free ports, without
// accounting. The node is this machine (`hostname -s`, reached at
// 127.0.0.1); a cluster of several nodes (Options.Nodes) runs one slurmd
// per node on it, each on a port of its own (slurmd -N NAME). Each node
// declares Cluster.CPUs CPUs and Cluster.GPUs fake
// GPUs: character devices standing in for /dev/nvidiaN in gres.conf
// where device files can be made (Cluster.GPUDevices), plain files
// elsewhere, which Slurm counts but does not name to jobs.
// TRAINYARD_TEST_SLURM_NO_DEVICES=1 makes plain files, as in a container
// without CAP_MKNOD. Jobs are not confined (task/none) unless
// Options.MemoryLimits asks the nodes to enforce --mem.
//
// Starting one takes a few seconds, so a test package shares one
// (Shared) and stops it in TestMain (Main). It needs Debian's slurm-wlm
// and munge, and root: slurmd runs jobs as their submitter and munged
// checks its key's ownership.
package slurmtest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Binaries are the programs a cluster needs.
var Binaries = []string{"munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "sinfo"}

// InstallHint says how to get them.
const InstallHint = "sudo apt-get install -y slurm-wlm munge"

// StartTimeout bounds the wait for the daemons to be ready. Generous: a
// busy two-core machine takes seconds.
var StartTimeout = 60 * time.Second

// Cluster is a running Slurm.
type Cluster struct {
	// Dir holds the configuration, state, spool and the daemons' logs.
	Dir string
	// Conf is the slurm.conf: clients find the cluster through
	// SLURM_CONF=Conf (Env).
	Conf string
	// Node and Partition name the first node and the only partition.
	Node      string
	Partition string
	// Nodes names every node, Node first: this machine's name, then
	// Node-2, Node-3…, all this machine.
	Nodes []string
	// CPUs, MemoryMiB and GPUs are what each node declares.
	CPUs      int
	MemoryMiB int
	GPUs      int
	// MemoryLimits: the nodes enforce --mem (Options.MemoryLimits).
	MemoryLimits bool
	// GPUDevices: the GPUs are device files (Dir/dev/nvidiaN), so Slurm
	// assigns them by index and sets CUDA_VISIBLE_DEVICES in the batch
	// step. Where device files cannot be made (no CAP_MKNOD, as in many
	// containers) they are plain files: jobs can ask for GPUs, and Slurm
	// names none (a count alone in gres.conf makes slurmd report none).
	GPUDevices bool

	procs []*exec.Cmd // munged, slurmctld, slurmd (one per node)
}

// Env is the environment of a Slurm client for this cluster: the test's
// own, with SLURM_CONF set.
func (c *Cluster) Env() []string { return append(os.Environ(), "SLURM_CONF="+c.Conf) }

// Command is a Slurm client command for this cluster.
func (c *Cluster) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = c.Env()
	return cmd
}

// shared holds the package's clusters, one per Options.
var shared struct {
	mu       sync.Mutex
	clusters map[Options]*sharedCluster
}

type sharedCluster struct {
	once sync.Once
	c    *Cluster
	err  error
}

// missingEngine skips the test for want of what msg names, except in CI
// (CI=true), where it fails: a test whose engine is missing must not pass
// there.
func missingEngine(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Require skips the test when a binary of Binaries is missing, except in
// CI (CI=true), where it fails: a test whose engine is missing must not
// pass there. It fails when the test does not run as root.
func Require(t testing.TB) {
	t.Helper()
	var missing []string
	for _, b := range Binaries {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("Slurm is not installed here (missing %s); install it: %s", strings.Join(missing, ", "), InstallHint)
		missingEngine(t, msg)
	}
	if os.Getuid() != 0 {
		msg := "a private Slurm needs root (slurmd runs jobs as their submitter, munged checks its key's owner); run the tests as root"
		missingEngine(t, msg)
	}
}

// memoryCgroup is where Options.MemoryLimits needs cgroup v1's memory
// controller, writable.
const memoryCgroup = "/sys/fs/cgroup/memory"

// requireMemoryLimits skips the test (fails it in CI, as Require) when
// opts ask for memory limits and this machine cannot enforce them.
func requireMemoryLimits(t testing.TB, opts Options) {
	t.Helper()
	if !opts.MemoryLimits {
		return
	}
	_, err := os.Stat(filepath.Join(memoryCgroup, "memory.limit_in_bytes"))
	if err == nil {
		err = syscall.Access(memoryCgroup, 2 /* W_OK */)
	}
	if err == nil {
		return
	}
	msg := fmt.Sprintf("a Slurm that enforces --mem needs cgroup v1's memory controller, writable, at %s: %v", memoryCgroup, err)
	missingEngine(t, msg)
}

// Shared returns the package's cluster, starting it on first use (see
// Require for when it skips).
func Shared(t testing.TB) *Cluster { t.Helper(); return SharedWith(t, Options{}) }

// SharedWith returns the package's cluster with opts, starting it on
// first use; tests that ask for the same options share it.
func SharedWith(t testing.TB, opts Options) *Cluster {
	t.Helper()
	Require(t)
	requireMemoryLimits(t, opts)
	shared.mu.Lock()
	if shared.clusters == nil {
		shared.clusters = map[Options]*sharedCluster{}
	}
	sc := shared.clusters[opts]
	if sc == nil {
		sc = &sharedCluster{}
		shared.clusters[opts] = sc
	}
	shared.mu.Unlock()
	sc.once.Do(func() {
		dir, err := os.MkdirTemp("", "trainyard-slurm-")
		if err != nil {
			sc.err = err
			return
		}
		sc.c, sc.err = StartWith(dir, opts)
	})
	if sc.err != nil {
		t.Fatalf("start Slurm: %v", sc.err)
	}
	return sc.c
}

// Main runs a test package's tests, then stops the shared cluster: call
// it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// Stop stops the shared clusters that were started and removes their
// directories (kept, and named, with TRAINYARD_TEST_SLURM_KEEP=1: the
// daemons' logs are there).
func Stop() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	for _, sc := range shared.clusters {
		if sc.c == nil {
			continue
		}
		sc.c.Stop()
		if os.Getenv("TRAINYARD_TEST_SLURM_KEEP") == "1" {
			fmt.Fprintln(os.Stderr, "slurmtest: kept", sc.c.Dir)
			continue
		}
		_ = os.RemoveAll(sc.c.Dir)
	}
}

// Options change what a cluster's nodes declare; zero values keep the
// defaults.
type Options struct {
	// CPUs each node declares; default 8. A benchmark that runs many
	// one-CPU jobs at once asks for more (the node's real CPUs do not
	// limit what Slurm places: jobs are not confined).
	CPUs int
	// Nodes is how many nodes the cluster has; default 1. Each is a
	// slurmd of its own on this machine, so that multi-node jobs (srun)
	// run here; their fake GPUs are the same files.
	Nodes int
	// MemoryLimits makes the nodes enforce --mem: task/cgroup on the
	// cgroup v1 memory controller (ConstrainRAMSpace), so that a job
	// past its memory is killed and ends OUT_OF_MEMORY. It needs cgroup
	// v1's memory controller mounted at /sys/fs/cgroup/memory, writable
	// (SharedWith and NewWith skip the test without it, as Require). Its
	// job ids start at a random number: clusters on one machine share
	// the cgroup tree (slurm/).
	MemoryLimits bool
}

// New starts a cluster for one test, stopped when it ends.
func New(t testing.TB) *Cluster { return NewWith(t, Options{}) }

// NewWith starts a cluster with opts for one test, stopped when it ends.
func NewWith(t testing.TB, opts Options) *Cluster {
	t.Helper()
	Require(t)
	requireMemoryLimits(t, opts)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := StartWith(dir, opts)
	if err != nil {
		t.Fatalf("start Slurm: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

// Start starts munged, slurmctld and slurmd with their state in dir and
// returns once the node is idle. On failure nothing is left running and
// the error quotes the daemons' logs.
func Start(dir string) (c *Cluster, err error) { return StartWith(dir, Options{}) }

// StartWith is Start with opts.
func StartWith(dir string, opts Options) (c *Cluster, err error) {
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("this machine's name (the node's): %w", err)
	}
	host, _, _ = strings.Cut(host, ".")
	c = &Cluster{Dir: dir, Conf: filepath.Join(dir, "slurm.conf"), Node: host, Nodes: []string{host}, Partition: "test", CPUs: cmp.Or(opts.CPUs, 8), MemoryMiB: 16384,
		MemoryLimits: opts.MemoryLimits}
	for i := 2; i <= opts.Nodes; i++ {
		c.Nodes = append(c.Nodes, host+"-"+strconv.Itoa(i))
	}
	defer func() {
		if err != nil {
			c.Stop()
			c = nil
		}
	}()
	dirs := []string{"munge", "state", "spool", "dev"}
	if len(c.Nodes) > 1 {
		for _, n := range c.Nodes {
			dirs = append(dirs, "spool-"+n)
		}
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return c, err
		}
	}
	// Job output goes wherever the test says; the directory itself must
	// be reachable by slurmd's children.
	if err := os.Chmod(dir, 0o755); err != nil {
		return c, err
	}
	key := "/etc/munge/munge.key"
	if _, err := os.Stat(key); err != nil {
		key = filepath.Join(dir, "munge", "munge.key")
		if out, err := exec.Command("mungekey", "--create", "--keyfile="+key).CombinedOutput(); err != nil {
			return c, fmt.Errorf("create a munge key (mungekey --create): %v: %s", err, out)
		}
	}
	m := filepath.Join(dir, "munge")
	sock := filepath.Join(m, "munge.sock")
	if err := c.start(filepath.Join(m, "munged.out"), "munged", "--foreground", "--force", "--socket="+sock,
		"--pid-file="+filepath.Join(m, "munged.pid"), "--log-file="+filepath.Join(m, "munged.log"),
		"--seed-file="+filepath.Join(m, "munged.seed"), "--key-file="+key, "--num-threads=2"); err != nil {
		return c, err
	}
	if err := waitFor(StartTimeout, "munged's socket", func() bool { _, err := os.Stat(sock); return err == nil }); err != nil {
		return c, c.withLogs(err)
	}
	// slurmctld's, then one per slurmd.
	ports, err := freePorts(1 + len(c.Nodes))
	if err != nil {
		return c, err
	}
	c.GPUs = 4
	c.GPUDevices = c.makeGPUs(c.GPUs)
	if err := os.WriteFile(c.Conf, []byte(c.config(sock, ports)), 0o644); err != nil {
		return c, err
	}
	var files []string
	for i := range c.GPUs {
		f := filepath.Join(dir, "dev", "nvidia"+strconv.Itoa(i))
		if !c.GPUDevices {
			// Plain files: slurmd counts them, and names none.
			if err := os.WriteFile(f, nil, 0o666); err != nil {
				return c, err
			}
		}
		files = append(files, f)
	}
	var gres strings.Builder
	for _, n := range c.Nodes {
		fmt.Fprintf(&gres, "NodeName=%s Name=gpu File=%s\n", n, strings.Join(files, ","))
	}
	if err := os.WriteFile(filepath.Join(dir, "gres.conf"), []byte(gres.String()), 0o644); err != nil {
		return c, err
	}
	if c.MemoryLimits {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.conf"), []byte(cgroupConf), 0o644); err != nil {
			return c, err
		}
	}
	if err := c.start(filepath.Join(dir, "slurmctld.out"), "slurmctld", "-D", "-c", "-f", c.Conf); err != nil {
		return c, err
	}
	if len(c.Nodes) == 1 {
		if err := c.start(filepath.Join(dir, "slurmd.out"), "slurmd", "-D", "-f", c.Conf); err != nil {
			return c, err
		}
	} else {
		for _, n := range c.Nodes {
			if err := c.start(filepath.Join(dir, "slurmd-"+n+".out"), "slurmd", "-D", "-N", n, "-f", c.Conf); err != nil {
				return c, err
			}
		}
	}
	if err := waitFor(StartTimeout, "the nodes to be idle (sinfo)", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := c.Command(ctx, "sinfo", "-h", "-N", "-o", "%T").Output()
		states := strings.Fields(string(out))
		return err == nil && len(states) == len(c.Nodes) && !slices.ContainsFunc(states, func(s string) bool { return s != "idle" })
	}); err != nil {
		return c, c.withLogs(err)
	}
	return c, nil
}

// config is the cluster's slurm.conf. Its nodes are this machine; with
// more than one, each slurmd has its own port, spool directory, PID file
// and log (%n: the node's name).
func (c *Cluster) config(sock string, ports []int) string {
	gres, gresTypes := fmt.Sprintf(" Gres=gpu:%d", c.GPUs), "GresTypes=gpu\n"
	d := c.Dir
	perNode := ""
	nodes := fmt.Sprintf("NodeName=%s NodeAddr=127.0.0.1 CPUs=%d RealMemory=%d%s State=UNKNOWN\n", c.Node, c.CPUs, c.MemoryMiB, gres)
	if len(c.Nodes) > 1 {
		perNode = "-%n"
		nodes = ""
		for i, n := range c.Nodes {
			nodes += fmt.Sprintf("NodeName=%s NodeHostname=%s NodeAddr=127.0.0.1 Port=%d CPUs=%d RealMemory=%d%s State=UNKNOWN\n",
				n, c.Node, ports[1+i], c.CPUs, c.MemoryMiB, gres)
		}
	}
	task := "TaskPlugin=task/none\n"
	if c.MemoryLimits {
		task = fmt.Sprintf("TaskPlugin=task/cgroup\nFirstJobId=%d\n", 1000+rand.IntN(50_000_000))
	}
	return fmt.Sprintf(`ClusterName=trainyardtest
SlurmctldHost=%[1]s(127.0.0.1)
SlurmctldPort=%[2]d
SlurmdPort=%[3]d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=%[4]s
CredType=cred/munge
StateSaveLocation=%[5]s/state
SlurmdSpoolDir=%[5]s/spool%[10]s
SlurmctldPidFile=%[5]s/slurmctld.pid
SlurmdPidFile=%[5]s/slurmd%[10]s.pid
SlurmctldLogFile=%[5]s/slurmctld.log
SlurmdLogFile=%[5]s/slurmd%[10]s.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
%[11]sMpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
KillWait=5
MinJobAge=600
DefMemPerCPU=256
%[6]s%[7]sPartitionName=%[8]s Nodes=%[9]s Default=YES MaxTime=INFINITE State=UP
`, c.Node, ports[0], ports[1], sock, d, gresTypes, nodes, c.Partition, strings.Join(c.Nodes, ","), perNode, task)
}

// cgroupConf is the cgroup.conf of a cluster with MemoryLimits: --mem
// confines each job's memory, swap included, and nothing else.
const cgroupConf = `CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
ConstrainRAMSpace=yes
ConstrainSwapSpace=yes
ConstrainCores=no
ConstrainDevices=no
`

// makeGPUs makes n character devices standing in for NVIDIA GPUs (major
// 195, as the driver's) in Dir/dev, and reports whether it could (not
// without CAP_MKNOD).
func (c *Cluster) makeGPUs(n int) bool {
	if os.Getenv("TRAINYARD_TEST_SLURM_NO_DEVICES") == "1" {
		return false // as in a container without CAP_MKNOD
	}
	for i := range n {
		p := filepath.Join(c.Dir, "dev", "nvidia"+strconv.Itoa(i))
		if err := syscall.Mknod(p, syscall.S_IFCHR|0o666, int(195<<8|i)); err != nil {
			return false
		}
	}
	return true
}

// start starts a daemon in the foreground, its stdout and stderr in out.
func (c *Cluster) start(out, name string, args ...string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "SLURM_CONF="+c.Conf)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group: a ^C to the test reaches the test, which
	// stops the daemons in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	c.procs = append(c.procs, cmd)
	go func() { _ = cmd.Wait() }()
	return nil
}

// Stop cancels every job still there, waits for them to go (so that no
// job step outlives its slurmd), then stops slurmd, slurmctld and munged
// (SIGTERM, SIGKILL after 10 s).
func (c *Cluster) Stop() {
	if len(c.procs) >= 2+len(c.Nodes) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = c.Command(ctx, "scancel", "--full", "--partition="+c.Partition).Run()
		cancel()
		_ = waitFor(30*time.Second, "the jobs to end", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			out, err := c.Command(ctx, "squeue", "-h", "-t", "PD,R,CG,S,CF", "-o", "%i").Output()
			return err != nil || len(bytes.TrimSpace(out)) == 0
		})
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		stopProc(c.procs[i])
	}
	c.procs = nil
}

// stopProc ends a daemon this package started, by its PID.
func stopProc(cmd *exec.Cmd) {
	p := cmd.Process
	_ = p.Signal(syscall.SIGTERM)
	gone := func() bool { return syscall.Kill(p.Pid, 0) != nil }
	if waitFor(10*time.Second, "", gone) != nil {
		_ = p.Kill()
		_ = waitFor(10*time.Second, "", gone)
	}
}

// withLogs adds the ends of the daemons' logs to err.
func (c *Cluster) withLogs(err error) error {
	var b strings.Builder
	files := []string{"munge/munged.log", "munge/munged.out", "slurmctld.log", "slurmctld.out", "slurmd.log", "slurmd.out"}
	if len(c.Nodes) > 1 {
		for _, n := range c.Nodes {
			files = append(files, "slurmd-"+n+".log", "slurmd-"+n+".out")
		}
	}
	for _, f := range files {
		data, rerr := os.ReadFile(filepath.Join(c.Dir, f))
		if rerr != nil || len(data) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		fmt.Fprintf(&b, "\n--- %s (last lines):\n%s", f, strings.Join(lines[max(len(lines)-8, 0):], "\n"))
	}
	return fmt.Errorf("%w%s", err, b.String())
}

// freePorts returns n TCP ports free on 127.0.0.1 now.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out after " + timeout.String() + " waiting for " + what)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}
