// Package slurm runs attempts on a Slurm cluster: one batch job per
// attempt, submitted with sbatch, followed by one poller that asks squeue
// about every attempt at once, and stopped with scancel.
//
// # The batch step is the local executor's supervisor
//
// Slurm's nodes share the attempts' directories with the server (the
// cluster's shared filesystem), so the job's batch step runs the same
// supervisor the local executor runs (trainyard-shim --dir DIR, see
// package local): it starts the job's program with its environment and
// working directory, writes its log in package logs' format, enforces the
// timeout and the stop's grace, and records the outcome in DIR/exit.json.
// Logs, progress, checkpoints and outputs thus behave exactly as on the
// local executor, and the server reads them with the local reader
// (Config.Files). This executor only submits, polls and cancels. Slurm's
// own view (squeue) decides what the supervisor could not record (a job
// cancelled before it started, a node lost with its supervisor) and
// names what the supervisor only saw as a signal or a kill that
// Trainyard did not ask for (Slurm's time limit, preemption, memory
// cgroup, an scancel).
//
// The launch record the supervisor reads holds the job's secrets. It is
// written to DIR/launch.json (mode 0600) and removed by the batch script
// as soon as it has opened it; the script itself, which Slurm keeps,
// holds no secret. sbatch runs with an environment of its own, not the
// server's (sbatchEnv), and exports it to the job (--export=ALL), so that
// nothing of the server's environment reaches the batch step. Not
// --export=NONE: with it slurmd builds the step's environment from a
// login shell of the user (su - USER), which cut throughput threefold on
// Slurm 22.05 (BenchmarkThousandJobs).
//
// Attempts are named NamePrefix-JOB-ATTEMPT in Slurm; the Slurm job id is
// also kept in DIR/slurm-job. A new executor finds the jobs it owns by
// name (one squeue at start) and reattaches when the server launches
// their attempts again.
//
// The job's --output is the batch step's own (DIR/slurm.out: what the
// supervisor says of itself), not the attempt's log: the supervisor
// writes that, in package logs' format, as the local executor's does.
//
// Slurm's state comes from squeue's text output (every version has it;
// --json needs plugins that not every build ships), and, on clusters
// that keep accounting, from sacct for the jobs that have left squeue:
// one call of each per poll for all attempts, the second only when a job
// is missing from the first.
//
// # Multi-node attempts
//
// An attempt of N nodes is one job of N nodes, one task per node
// (--nodes=N --ntasks-per-node=1, with the CPUs, memory and GPUs asked
// for each node). Its batch step, on the job's first node, runs the
// supervisor as above, which starts a launcher (multinode.go) instead
// of the job's program: srun runs the program once on every node, with
// RANK and NODE_RANK from its task's SLURM_PROCID, WORLD_SIZE=N,
// LOCAL_RANK=0, LOCAL_WORLD_SIZE=1, MASTER_ADDR the job's first node as
// Slurm names it (scontrol show hostnames), the same MASTER_PORT on
// every node, and CUDA_VISIBLE_DEVICES as Slurm sets it for each task.
// The log is every rank's output, as srun gathers it. A rank that fails
// ends the others (srun --kill-on-bad-exit), and the attempt ends with
// srun's exit code: the highest of its ranks' (128+N for one ended by
// signal N); srun's line in the log names the rank that failed first.
// A stop reaches every process of every rank (Slurm signals the tasks),
// and ends the attempt as on one node. srun, scancel and scontrol must
// be at the same path on the nodes as on the server.
//
// Not yet: MASTER_PORT is a port free on the server's machine, not
// checked on the node.
package slurm

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/local"
)

// Config configures a Slurm executor.
type Config struct {
	// ShimCommand starts the supervisor on the node, e.g.
	// ["/usr/local/bin/trainyard-shim"] or ["/usr/local/bin/trainyard",
	// "shim"]; its first word is an absolute path (the batch step has no
	// PATH of the server's), or a name this machine finds in PATH, which
	// must then be the same on the nodes.
	ShimCommand []string
	// Env is added to the environment of the Slurm commands this
	// executor runs (sbatch, squeue, scancel, scontrol), e.g.
	// SLURM_CONF=/etc/slurm/other.conf.
	Env []string
	// Partition, Account and QoS go on every job when set, unless Pools
	// names others for the job's pool; Partition is also the inventory's.
	Partition string
	Account   string
	QoS       string
	// Pools gives a Trainyard pool (Launch.Pool) its own partition,
	// account or QoS; what a pool leaves empty is the executor's.
	Pools map[string]Target
	// NamePrefix starts the name of every job this executor submits;
	// default "trainyard". Two servers sharing a cluster need different
	// ones.
	NamePrefix string
	// PollInterval is how often squeue is asked; default 1s.
	PollInterval time.Duration
	// KillAfter is how long after a stop's grace the job is cancelled
	// outright if its supervisor has not ended it; default 10s.
	KillAfter time.Duration
	// MemoryLimits says the cluster enforces --mem (task/cgroup), so that
	// Capabilities reports it.
	MemoryLimits bool
	// Files is the read side (logs, outputs) of the shared filesystem.
	Files executor.Files
	Log   *slog.Logger

	// onCommand, when set, is told the name of every Slurm command the
	// executor runs, before it runs (tests count them).
	onCommand func(name string, args []string)
}

// Target is where in the cluster a pool's jobs go.
type Target struct {
	Partition, Account, QoS string
}

// target is where l's job goes: its pool's, else the executor's.
func (c Config) target(pool string) Target {
	p := c.Pools[pool]
	return Target{Partition: cmp.Or(p.Partition, c.Partition), Account: cmp.Or(p.Account, c.Account), QoS: cmp.Or(p.QoS, c.QoS)}
}

// Files in an attempt directory besides the supervisor's.
const (
	launchFile = "launch.json" // the launch record, until the batch step reads it
	scriptFile = "batch.sh"    // the batch script
	jobIDFile  = "slurm-job"   // the Slurm job id
	outFile    = "slurm.out"   // the batch step's stdout and stderr (the supervisor's diagnostics)
)

// Executor runs attempts as Slurm batch jobs.
type Executor struct {
	executor.Files
	cfg    Config
	shim   []string
	user   string // who the jobs run as: the user that submits them
	events *executor.EventQueue
	stop   chan struct{}
	done   chan struct{} // the poller has returned
	wake   chan struct{} // poll now
	log    *slog.Logger

	mu       sync.Mutex
	attempts map[executor.Ref]*attempt
	owned    map[string]string // job name → Slurm job id, found at start
	last     []queued          // the last poll's jobs
	// accounting: the cluster keeps accounting, so sacct says how jobs
	// that left squeue ended.
	accounting bool
	closed     bool
}

// attempt is what the executor remembers of an attempt.
type attempt struct {
	ref       executor.Ref
	dir       string
	jobID     string
	grace     time.Duration
	started   bool // Started sent
	startedAt time.Time
	done      bool
	missing   int       // polls that did not find its job
	endWait   time.Time // since when its recorded failure waits for its job's end
	state     string
	why       string // the pending reason, in Slurm's words
	stopping  *executor.StopRequest
	stopAt    time.Time // when stopping was asked
	// recorded: its outcome was recorded before this executor launched
	// it; the poller reports it again.
	recorded bool
	// reports reads its supervisor's records; the poller's only.
	reports *local.Reports
}

var _ executor.Executor = (*Executor)(nil)

// New checks that the cluster answers and lists the jobs this executor
// owns (by name), then starts the poller.
func New(ctx context.Context, cfg Config) (*Executor, error) {
	if len(cfg.ShimCommand) == 0 || cfg.ShimCommand[0] == "" {
		return nil, errors.New("slurm executor: ShimCommand is empty; set it to the trainyard-shim binary (or trainyard and \"shim\") as the nodes see it")
	}
	shim := slices.Clone(cfg.ShimCommand)
	if !filepath.IsAbs(shim[0]) {
		p, err := exec.LookPath(shim[0])
		if err != nil {
			return nil, fmt.Errorf("slurm executor: the supervisor %q: %w; give its absolute path as the nodes see it", shim[0], err)
		}
		if shim[0], err = filepath.Abs(p); err != nil {
			return nil, err
		}
	}
	cfg.NamePrefix = cmp.Or(cfg.NamePrefix, "trainyard")
	cfg.PollInterval = cmp.Or(cfg.PollInterval, time.Second)
	cfg.KillAfter = cmp.Or(cfg.KillAfter, 10*time.Second)
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	e := &Executor{
		Files: cfg.Files, cfg: cfg, shim: shim, log: cfg.Log,
		stop: make(chan struct{}), done: make(chan struct{}), wake: make(chan struct{}, 1),
		attempts: map[executor.Ref]*attempt{}, owned: map[string]string{},
	}
	e.events = executor.NewEventQueue(e.stop)
	if u, err := user.Current(); err == nil {
		e.user = u.Username
	}
	jobs, err := e.queue(ctx)
	if err != nil {
		return nil, fmt.Errorf("slurm executor: %w", err)
	}
	for _, j := range jobs {
		if _, ok := e.refOf(j.name); ok {
			e.owned[j.name] = j.id
		}
	}
	e.last = jobs
	if e.accounting, err = e.hasAccounting(ctx); err != nil {
		return nil, fmt.Errorf("slurm executor: %w", err)
	}
	go e.events.Run()
	go e.poll()
	return e, nil
}

// Close stops the poller. Jobs keep running in Slurm; a new executor
// reattaches when the server launches their attempts again.
func (e *Executor) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	close(e.stop)
	e.mu.Unlock()
	<-e.done
	return nil
}

// Capabilities: multi-node attempts (srun), processes (no containers),
// memory limits where the cluster enforces them, the warning before a
// timeout (the supervisor sends it), NVIDIA GPUs as GRES.
func (e *Executor) Capabilities() executor.Capabilities {
	return executor.Capabilities{MultiNode: true, MemoryLimits: e.cfg.MemoryLimits, Warn: true, GPUKinds: []string{"nvidia"}}
}

// Events delivers the attempts' observations.
func (e *Executor) Events() <-chan executor.Event { return e.events.Events() }

// Waiting says why Slurm has not started the attempt's job yet, with
// Slurm's reason ("Resources", "Priority"…), as the last poll saw it; ""
// when it runs, has ended, or Slurm gives no reason.
func (e *Executor) Waiting(ref executor.Ref) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if a := e.attempts[ref]; a != nil && !a.done && a.state == "PENDING" {
		return a.why
	}
	return ""
}

// JobName is the Slurm job name of an attempt.
func (e *Executor) JobName(ref executor.Ref) string {
	return fmt.Sprintf("%s-%d-%d", e.cfg.NamePrefix, ref.JobID, ref.Attempt)
}

// refOf is the attempt a job of this executor's name belongs to.
func (e *Executor) refOf(name string) (executor.Ref, bool) {
	rest, ok := strings.CutPrefix(name, e.cfg.NamePrefix+"-")
	if !ok {
		return executor.Ref{}, false
	}
	job, att, ok := strings.Cut(rest, "-")
	id, err1 := strconv.ParseInt(job, 10, 64)
	n, err2 := strconv.Atoi(att)
	if !ok || err1 != nil || err2 != nil {
		return executor.Ref{}, false
	}
	ref := executor.Ref{JobID: id, Attempt: n}
	return ref, e.JobName(ref) == name
}

// Strays lists the attempts whose Slurm jobs have not ended but that
// this executor neither launched nor reattached to, submitted more than
// minAge ago (as the last poll saw them): jobs of attempts that a server
// crashed before stopping, or that ended in its store while no server
// watched. The caller releases those its store no longer counts as
// active (Release cancels them).
func (e *Executor) Strays(minAge time.Duration) []executor.Ref {
	cutoff := time.Now().Add(-minAge)
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []executor.Ref
	for _, j := range e.last {
		ref, ok := e.refOf(j.name)
		if !ok || ended(j.state) || e.attempts[ref] != nil || j.submitted.IsZero() || j.submitted.After(cutoff) {
			continue
		}
		out = append(out, ref)
	}
	slices.SortFunc(out, func(a, b executor.Ref) int {
		return cmp.Or(cmp.Compare(a.JobID, b.JobID), cmp.Compare(a.Attempt, b.Attempt))
	})
	return out
}

// Launch submits the attempt's batch job, or reattaches: to its recorded
// outcome (reported again), or to its job in Slurm (named in its
// directory, or found by name when the executor started).
func (e *Executor) Launch(ctx context.Context, l executor.Launch) error {
	if len(l.Argv) == 0 || l.Argv[0] == "" {
		return fmt.Errorf("launch %s: argv is empty; give the program to run", l.Ref)
	}
	if !filepath.IsAbs(l.Dir) {
		return fmt.Errorf("launch %s: the attempt directory must be an absolute path, got %q", l.Ref, l.Dir)
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return fmt.Errorf("launch %s: the executor is closed", l.Ref)
	}
	if a := e.attempts[l.Ref]; a != nil && !a.done {
		e.mu.Unlock()
		return nil
	}
	a := &attempt{ref: l.Ref, dir: l.Dir, grace: cmp.Or(l.Grace, 10*time.Second), reports: local.NewReports(l.Ref, l.Dir)}
	e.attempts[l.Ref] = a
	owned := e.owned[e.JobName(l.Ref)]
	e.mu.Unlock()

	if _, _, ok, err := local.Outcome(l.Dir); err != nil {
		e.forget(l.Ref, a)
		return fmt.Errorf("launch %s: %w", l.Ref, err)
	} else if ok {
		e.mu.Lock()
		a.recorded = true
		e.mu.Unlock()
		e.poke()
		return nil
	}
	id := owned
	if b, err := os.ReadFile(filepath.Join(l.Dir, jobIDFile)); err == nil {
		id = strings.TrimSpace(string(b))
	}
	if id == "" {
		var err error
		if id, err = e.submit(ctx, l); err != nil {
			e.forget(l.Ref, a)
			return fmt.Errorf("launch %s: %w", l.Ref, err)
		}
	}
	e.mu.Lock()
	a.jobID = id
	e.mu.Unlock()
	e.poke()
	return nil
}

// forget drops a failed launch's attempt.
func (e *Executor) forget(ref executor.Ref, a *attempt) {
	e.mu.Lock()
	if e.attempts[ref] == a {
		delete(e.attempts, ref)
	}
	e.mu.Unlock()
}

// submit prepares the attempt's directories, writes its launch record
// and batch script, and submits the script; it returns the job id.
func (e *Executor) submit(ctx context.Context, l executor.Launch) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	// The GPUs are those Slurm allocated, which it names in the batch
	// step's CUDA_VISIBLE_DEVICES: with device confinement (cgroups) the
	// job cannot open others, whatever indices the placement gave.
	b := local.Batch{Port: port, User: e.user}
	if gpus(l) > 0 {
		b.InheritEnv = []string{"CUDA_VISIBLE_DEVICES"}
	}
	run := l
	if n := nodes(l); n > 1 {
		c, err := findClients()
		if err != nil {
			return "", err
		}
		run = multiNode(l, n, port, c)
		// srun finds its allocation (and the cluster) through these.
		b.InheritEnv = append(b.InheritEnv, "SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_CONF")
	}
	rec, err := local.BatchRecord(run, b)
	if err != nil {
		return "", err
	}
	recPath := filepath.Join(l.Dir, launchFile)
	if err := os.WriteFile(recPath, rec, 0o600); err != nil {
		return "", fmt.Errorf("write the launch record: %w", err)
	}
	script := filepath.Join(l.Dir, scriptFile)
	if err := os.WriteFile(script, []byte(e.script(l)), 0o700); err != nil {
		return "", fmt.Errorf("write the batch script: %w", err)
	}
	args := append([]string{"--parsable"}, e.sbatchArgs(l)...)
	out, err := e.command(ctx, "sbatch", append(args, script)...)
	if err != nil {
		_ = os.Remove(recPath)
		return "", fmt.Errorf("sbatch refused the attempt's job; check its resources against the nodes of the partition, "+
			"and the executor's partition, account and QoS: %w", err)
	}
	// --parsable prints "id" or "id;cluster".
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	if _, err := strconv.ParseUint(id, 10, 64); err != nil {
		return "", fmt.Errorf("sbatch answered %q, not a job id", out)
	}
	if err := os.WriteFile(filepath.Join(l.Dir, jobIDFile), []byte(id+"\n"), 0o644); err != nil {
		e.log.Warn("record an attempt's Slurm job id", "attempt", l.Ref.String(), "job", id, "err", err)
	}
	return id, nil
}

// sbatchArgs are the options of the attempt's job.
func (e *Executor) sbatchArgs(l executor.Launch) []string {
	args := []string{
		"--job-name=" + e.JobName(l.Ref),
		"--comment=trainyard " + l.Ref.String(),
		"--output=" + filepath.Join(l.Dir, outFile),
		"--chdir=" + l.Dir,
		"--export=ALL", // sbatch's own environment: sbatchEnv
		"--nodes=" + strconv.Itoa(nodes(l)), "--ntasks-per-node=1",
		"--cpus-per-task=" + strconv.Itoa(cpusPerNode(l)),
	}
	if l.Resources.Memory > 0 {
		mib := (int64(l.Resources.Memory) + 1<<20 - 1) >> 20
		args = append(args, "--mem="+strconv.FormatInt(mib, 10)+"M")
	}
	if n := gpus(l); n > 0 {
		args = append(args, "--gres=gpu:"+strconv.Itoa(n))
	}
	if l.Timeout > 0 {
		// Slurm counts whole minutes; the supervisor enforces the timeout
		// itself, and Slurm's limit is the backstop after the grace.
		grace := cmp.Or(l.Grace, 10*time.Second)
		mins := int(math.Ceil((l.Timeout + grace + e.cfg.KillAfter).Minutes()))
		args = append(args, "--time="+strconv.Itoa(mins))
	}
	tg := e.cfg.target(l.Pool)
	for _, o := range [][2]string{{"--partition=", tg.Partition}, {"--account=", tg.Account}, {"--qos=", tg.QoS}} {
		if o[1] != "" {
			args = append(args, o[0]+o[1])
		}
	}
	return args
}

// gpus is how many GPUs l asks for on each node: its placement's (the
// most any of its nodes has: Slurm gives every node of a job the same),
// or its resources'.
func gpus(l executor.Launch) int {
	n := l.Resources.GPUs
	for i := range l.Placement.Nodes {
		n = max(n, len(l.Placement.GPUs(i)))
	}
	return n
}

// cpusPerNode is the CPUs l asks for on each node, whole ones.
func cpusPerNode(l executor.Launch) int { return max(int(math.Ceil(l.Resources.CPUs)), 1) }

// nodes is how many nodes l runs on.
func nodes(l executor.Launch) int { return max(l.Resources.Nodes, len(l.Placement.Nodes), 1) }

// script is the batch script: it becomes the supervisor, which opens the
// launch record and removes it (it holds secrets) before it starts the
// job. A supervisor that cannot start leaves it to Release. The
// supervisor runs on one thread's worth of Go scheduler (GOMAXPROCS=1,
// as the local executor starts its own): it waits on one process, and
// a Go runtime sized to the node spends more CPU at start (threads,
// and reading its cgroup's CPU limit) than the job's own `true`. The
// job gets none of the supervisor's environment, so not that either.
func (e *Executor) script(l executor.Launch) string {
	var cmd []string
	for _, w := range e.shim {
		cmd = append(cmd, quote(w))
	}
	return fmt.Sprintf(`#!/bin/sh
# Trainyard attempt %s: the supervisor runs the job and records its outcome.
PATH=/usr/local/bin:/usr/bin:/bin
export PATH
exec 3>&- 4>&-
GOMAXPROCS=1 exec %s --dir %s --launch %s
`, l.Ref, strings.Join(cmd, " "), quote(l.Dir), quote(filepath.Join(l.Dir, launchFile)))
}

// quote quotes s for the shell.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Stop asks the attempt's supervisor to end it: the request goes into its
// directory, then SIGTERM to the batch step (the supervisor), which
// signals the job and SIGKILLs what is left after the grace. A job still
// pending is cancelled at once; one the supervisor has not ended once the
// grace and KillAfter have passed is cancelled outright.
//
// The signal goes to the batch step only (scancel --batch), not to every
// process of the job (--full): the supervisor decides who gets it
// (Launch.StopSignalTo), records the stop's reason and times the grace,
// as on the local executor.
func (e *Executor) Stop(ctx context.Context, ref executor.Ref, req executor.StopRequest) error {
	req.Reason = cmp.Or(req.Reason, domain.ReasonCanceledByUser)
	e.mu.Lock()
	a := e.attempts[ref]
	if a == nil {
		e.mu.Unlock()
		return fmt.Errorf("stop %s: this executor has not launched the attempt; call Launch first (it reattaches to a running attempt): %w", ref, domain.ErrNotFound)
	}
	if a.done {
		e.mu.Unlock()
		return nil
	}
	if a.stopping == nil {
		a.stopping, a.stopAt = &req, time.Now()
	}
	id, pendingJob := a.jobID, !a.started && (a.state == "PENDING" || a.state == "")
	grace := cmp.Or(req.Grace, a.grace)
	e.mu.Unlock()
	if err := local.RequestStop(a.dir, req); err != nil {
		return fmt.Errorf("stop %s: %w", ref, err)
	}
	if id == "" {
		// Its launch is still submitting (or found the outcome
		// recorded): the supervisor reads the request before it starts
		// the job's program.
		return nil
	}
	if pendingJob {
		// Not started (as far as the last poll knows): a job that starts
		// meanwhile gets SIGTERM from Slurm, and its supervisor reads the
		// request.
		if _, err := e.command(ctx, "scancel", id); err != nil {
			return fmt.Errorf("stop %s: %w", ref, err)
		}
	} else if _, err := e.command(ctx, "scancel", "--batch", "--signal=TERM", id); err != nil {
		return fmt.Errorf("stop %s: %w", ref, err)
	}
	go func() {
		t := time.NewTimer(grace + e.cfg.KillAfter)
		defer t.Stop()
		select {
		case <-e.stop:
			return
		case <-t.C:
		}
		e.mu.Lock()
		done := a.done
		e.mu.Unlock()
		if !done {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := e.command(ctx, "scancel", id); err != nil {
				e.log.Warn("cancel a job whose supervisor did not stop it", "attempt", ref.String(), "job", id, "err", err)
			}
		}
	}()
	e.poke()
	return nil
}

// Release forgets an ended attempt and removes its workspace (HOME, tmp)
// and batch files; the log, the outcome and the batch step's output stay.
// An attempt this executor does not follow (a stray) has its job, if
// any is left, cancelled by name.
func (e *Executor) Release(ctx context.Context, ref executor.Ref) error {
	e.mu.Lock()
	a := e.attempts[ref]
	if a != nil && !a.done {
		e.mu.Unlock()
		return fmt.Errorf("release %s: it has not ended; stop it first: %w", ref, domain.ErrConflict)
	}
	delete(e.attempts, ref)
	e.mu.Unlock()
	if a == nil {
		if _, err := e.command(ctx, "scancel", "--me", "--name="+e.JobName(ref)); err != nil {
			return fmt.Errorf("release %s: %w", ref, err)
		}
		return nil
	}
	for _, p := range []string{"home", "tmp", launchFile, scriptFile} {
		if err := os.RemoveAll(filepath.Join(a.dir, p)); err != nil {
			return fmt.Errorf("release %s: %w", ref, err)
		}
	}
	return nil
}

// poke makes the poller look now.
func (e *Executor) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// emit queues ev for delivery; e.mu is held, so that events go out in
// the order the attempts' state changed.
func (e *Executor) emit(ev executor.Event) { e.events.Push(ev) }

// command runs a Slurm command and returns its stdout; its error quotes
// stderr.
func (e *Executor) command(ctx context.Context, name string, args ...string) ([]byte, error) {
	if e.cfg.onCommand != nil {
		e.cfg.onCommand(name, args)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), e.cfg.Env...)
	if name == "sbatch" {
		cmd.Env = e.sbatchEnv()
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(string(out))
		}
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
	}
	return out, nil
}

// sbatchEnv is the whole environment of sbatch, which --export=ALL hands
// to the batch step: a fixed PATH, the server's SLURM_CONF, and Config.Env;
// never the rest of the server's (a job can read its supervisor's).
func (e *Executor) sbatchEnv() []string {
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	if v, ok := os.LookupEnv("SLURM_CONF"); ok {
		env = append(env, "SLURM_CONF="+v)
	}
	return append(env, e.cfg.Env...)
}

// freePort returns a TCP port free on this machine now, for MASTER_PORT.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("reserve a rendezvous port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
