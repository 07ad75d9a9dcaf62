// Package local runs attempts as processes on this machine.
//
// Each attempt runs under a supervisor, the shim ("trainyard shim", see
// ShimMain), in a new session, so that it survives the server: by default
// one shim process for all attempts (the shared supervisor: see
// supervisor.go and shared.go), which runs the per-attempt logic described
// here for each on the same pipes and files; else (Config.Supervisor, or
// without a cgroup hierarchy to track attempts in) a shim per attempt. The
// executor starts the shim and hands it the launch record (which holds the
// job's secrets) through a pipe, never a file; the shim claims the attempt (shim.pid, created exclusively), starts the user's
// process in its own process group with exactly the given environment, writes
// the log (package logs), enforces the timeout and stop requests (SIGTERM to
// the group, then SIGKILL for what is left when the grace period ends: see
// stop.go), starts the job's processes in
// a cgroup of their own where one is writable (package cgroup: the memory
// limit, and every process held together) while it stays beside it, and
// finally records the outcome in exit.json. A shim that dies without one
// leaves an attempt the executor ends entirely before it reports it Lost
// (see watchdog.go). A launched shim reports "started" and "exited" on a
// pipe; a shim found already running (after a server restart) is watched by
// polling its directory. With a shim per attempt, launching costs two
// process executions: the shim and the user's process; once an attempt
// started, the executor starts the next attempt's shim (a spare, which
// learns its attempt from the launch record), so a launch that finds it
// waits for no shim to start. The shared supervisor costs one, the user's.
//
// A zero Launch.Grace means a grace period of 10s.
//
// Files in an attempt directory: shim.pid (the claim: the owning shim, the
// attempt's rendezvous port and cgroups), child.pid, exit.json, shim.log
// (the shim's own diagnostics), stop (a pending stop request: its grace and
// reason), metrics.jsonl, procs (its processes, without cgroups), and the
// attempt's home and tmp directories.
//
// Each attempt gets the device and rank environment of its placement
// (executor.Placement.Env) with a MASTER_PORT of its own from Config.Ports
// (rendezvous.go; recorded in the claim), and OMP_NUM_THREADS and
// MKL_NUM_THREADS from resources.cpus, which a writable cgroup cpu
// controller also enforces as a quota.
//
// With Config.Isolation the attempt runs as its project's own unprivileged
// user (see Isolation); the shim stays root, so that it can write the log,
// manage the memory group and end every process of the attempt.
//
// Progress: a stdout line `trainyard: {"step": N, "loss": 0.5}` (one JSON
// object with an integer step and numeric metrics) stays in the log and is
// also appended to metrics.jsonl unparsed, as {"t": unix ns, "p": <the
// report>} (logs.AppendMetricRecords); the controller parses it. The shim
// notifies the executor ("progress <step> <unix ns>") at most once
// per second, and the executor reports executor.Progress. For a reattached
// shim, a change of metrics.jsonl is reported instead.
//
// Log limit: when the attempt's log reaches Launch.LogLimit, the shim
// notifies the executor once ("loglimit <limit> <unix ns>"), which reports
// executor.LogLimited. For a reattached shim the executor looks for the
// log's limit record (logs.CapReached) at each poll until it finds it.
package local

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/local/cgroup"
	"trainyard/internal/logs"
)

var _ executor.Executor = (*Executor)(nil)

// The server restores checkpoints into a job's outputs on this disk, and
// writes the files an in-job agent uploads there (making the tree of a job
// that runs elsewhere).
var (
	_ executor.Writer         = (*outputs)(nil)
	_ executor.OutputsCreator = (*Executor)(nil)
)

// Config configures an Executor.
type Config struct {
	// ShimCommand starts the supervisor, e.g. ["/usr/bin/trainyard", "shim"];
	// the executor appends "--dir", <attempt dir>. Required.
	ShimCommand []string
	// Inventory is what the executor offers; nil: this machine, detected on
	// first use (hostname, CPUs, /proc/meminfo, nvidia-smi when installed).
	Inventory *executor.Inventory
	// CgroupRoot is the cgroup mount to create memory groups in (a v2 mount
	// or a v1 memory mount); empty: detect; "none": no memory groups. Every
	// attempt's processes are held in one, which measures their peak and
	// enforces resources.memory. When none is writable, attempts run
	// without memory limits.
	CgroupRoot string
	// CgroupTrackRoot is the cgroup mount to hold each attempt's processes
	// in, to end them all when its shim dies (a v2 mount, or a v1 freezer or
	// pids mount); empty: detect (cgroup.DetectTracking); "none": do not
	// track with cgroups. Without one, attempts are tracked by process
	// group, session and the shim's record of its descendants.
	CgroupTrackRoot string
	// Logger receives the executor's own notes; nil: discarded.
	Logger *slog.Logger
	// PollInterval is how often a reattached shim is checked; default 100ms.
	PollInterval time.Duration
	// Isolation, when set, runs each project's attempts as its own
	// unprivileged user; the executor must run as root. Nil: attempts run
	// as the server's own user, not isolated from it or from each other.
	Isolation *Isolation
	// Users is this machine's user database (userdb.System): it resolves
	// Isolation's users and names the server's own user for USER and
	// LOGNAME. Required with Isolation; nil otherwise: USER and LOGNAME
	// are left as the job sets them.
	Users Users
	// CgroupCPURoot is the cgroup mount to enforce resources.cpus in (a v2
	// mount or a v1 cpu mount); empty: detect (cgroup.DetectCPU); "none":
	// no CPU limits.
	CgroupCPURoot string
	// Ports is where each attempt's MASTER_PORT comes from (see
	// rendezvous.go); zero: DefaultPorts.
	Ports PortRange
	// Unpack unpacks a code package (Launch.Code) into dest, an empty
	// directory, with every check of codepkg.Unpack: the server passes
	// codepkg.Unpack with its limits. The executor takes it from its
	// caller so that package local, which the attempt supervisor links,
	// links no archive code (archive/tar links os/user). Nil: launches
	// with a code package fail.
	Unpack func(r io.Reader, dest string) error
	// Runs, when set, is the root of the attempt directories
	// (logs.Layout): Logs and Release find there the attempts this
	// executor has not launched (after a restart, or on a server that
	// only reads). Empty: only launched attempts are known (files.go).
	Runs string
	// EnvCheckTTL is how long a passing environment check is trusted on
	// this machine: an attempt of the same environment version (digest),
	// run as the same user, skips its check while the check's fingerprint
	// is unchanged and its last pass is younger than this (see
	// envcheck_cache.go). Only launches with a CheckEnv and an EnvDigest
	// qualify. Zero: every attempt runs its check.
	EnvCheckTTL time.Duration
	// EnvCheckCache is the file that keeps the passes across restarts,
	// written by the executor only (0600); empty: memory only.
	EnvCheckCache string
	// Now tells the time for EnvCheckTTL; nil: time.Now.
	Now func() time.Time
	// Supervisor is how attempts are supervised: SupervisorShared (the
	// default, "") runs them all under one supervisor process, started
	// with the first launch (supervisor.go); SupervisorPerAttempt starts
	// a supervisor process for each attempt. Without a cgroup hierarchy
	// to track attempts in (see CgroupTrackRoot), each attempt has its
	// own: a shared supervisor could not tell whose its orphaned
	// descendants are.
	Supervisor string
}

// Supervisor modes (Config.Supervisor).
const (
	SupervisorShared     = "shared"
	SupervisorPerAttempt = "per-attempt"
)

// eventBuffer is the capacity of the Events channel.
const eventBuffer = 4096

// Executor is the local executor. Its methods are safe for concurrent use.
type Executor struct {
	shimPath string
	shimArgs []string
	cfg      Config
	log      *slog.Logger
	cgroups  *cgroup.Layout // nil: no cgroups at all
	users    *users         // nil: attempts run as the server's user
	selfName string         // the server's user name, for USER without isolation
	ports    *ports         // MASTER_PORT per attempt
	// noMountNS is set once starting a shim in a mount namespace of its
	// own failed: private /tmp is then off.
	noMountNS atomic.Bool

	events chan executor.Event
	done   chan struct{} // closed by Close

	mu       sync.Mutex
	closed   bool
	attempts map[executor.Ref]*attempt
	wg       sync.WaitGroup // watchers that may still emit

	invMu sync.Mutex
	inv   *executor.Inventory

	checks *checkCache // passing environment checks (envcheck_cache.go)

	// spare is a shim started ahead of the next launch (shim); nil: none.
	// spareStarting: refill is starting one.
	spareMu       sync.Mutex
	spare         *spareShim
	spareStarting bool
	spareNS       atomic.Bool // the kind of shim the last launch wanted

	// shared is the shared supervisor (supervisor.go) when attempts run
	// under one; nil: none started yet, or attempts run under shims of
	// their own (sharedMode false).
	sharedMode bool
	sharedMu   sync.Mutex
	shared     *sharedSup
}

// attempt is what the executor knows about one attempt it watches.
type attempt struct {
	ref     executor.Ref
	dir     string
	logPath string

	mu          sync.Mutex
	proc        *os.Process // the shim, when this executor started it
	shim        procID      // the shim, when found through shim.pid
	pipe        *os.File    // read end of the shim's event pipe
	ready       bool        // the shim handles SIGTERM
	stopPending bool        // Stop was called before the shim was ready
	startedSent bool
	limitSent   bool // LogLimited was reported
	done        bool // Exited or Lost was reported

	// The environment check (envcheck_cache.go): checkKey is its
	// fingerprint when it runs and a pass will be remembered on Started;
	// skipKey when it was skipped, forgotten if the attempt fails;
	// checkNote says why it was skipped.
	checkKey, skipKey, checkEnv, checkNode, checkNote string

	pointsMu  sync.Mutex // serializes reportPoints and reportCheckpoints
	pointsOff int64      // how much of metrics.jsonl was reported
	ckptOff   int64      // how much of checkpoints.jsonl was reported
}

// New returns an executor. It checks the shim command and looks for a
// writable cgroup hierarchy for memory limits.
func New(cfg Config) (*Executor, error) {
	if len(cfg.ShimCommand) == 0 || cfg.ShimCommand[0] == "" {
		return nil, errors.New("local executor: ShimCommand is empty; set it to the trainyard binary and \"shim\"")
	}
	path, err := exec.LookPath(cfg.ShimCommand[0])
	if err != nil {
		return nil, fmt.Errorf("local executor: shim command: %w", err)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 100 * time.Millisecond
	}
	if cfg.Ports == (PortRange{}) {
		cfg.Ports = DefaultPorts
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := cfg.Ports.check(); err != nil {
		return nil, fmt.Errorf("local executor: rendezvous ports: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Executor{
		shimPath: path,
		shimArgs: append([]string(nil), cfg.ShimCommand...),
		cfg:      cfg,
		log:      log,
		events:   make(chan executor.Event, eventBuffer),
		done:     make(chan struct{}),
		attempts: make(map[executor.Ref]*attempt),
		ports:    newPorts(cfg.Ports),
		checks:   newCheckCache(cfg.EnvCheckTTL, cfg.EnvCheckCache, cfg.Now),
	}
	if cfg.Isolation != nil {
		if os.Geteuid() != 0 {
			return nil, errors.New("local executor: isolating jobs needs root, to run them as other users; run the server as root, or turn isolation off")
		}
		if cfg.Users == nil {
			return nil, errors.New("local executor: isolating jobs needs Config.Users, this machine's user database")
		}
		if e.users, err = newUsers(*cfg.Isolation, cfg.Users); err != nil {
			return nil, fmt.Errorf("local executor: %w", err)
		}
	} else if cfg.Users != nil {
		if name, err := cfg.Users.Current(); err == nil {
			e.selfName = name
		}
	}
	var layout cgroup.Layout
	if cfg.CgroupRoot == "none" {
		log.Warn("memory limits are not enforced, only accounted", "why", "CgroupRoot is none")
	} else if h, err := cgroup.Detect(cfg.CgroupRoot); err != nil {
		log.Warn("memory limits are not enforced, only accounted", "why", err)
	} else {
		layout.Memory = &h
		log.Debug("memory limits via cgroup", "version", h.Version, "parent", h.Parent)
	}
	if cfg.CgroupTrackRoot != "none" {
		if h, err := cgroup.DetectTracking(cfg.CgroupTrackRoot); err != nil {
			log.Warn("attempts are tracked by process group and session only: a process that leaves both may outlive a lost attempt", "why", err)
		} else {
			layout.Track = &h
			log.Debug("attempts tracked via cgroup", "version", h.Version, "parent", h.Parent)
		}
	}
	if cfg.CgroupCPURoot != "none" {
		if h, err := cgroup.DetectCPU(cfg.CgroupCPURoot); err != nil {
			log.Warn("CPU limits are not enforced (resources.cpus only sets OMP_NUM_THREADS)", "why", err)
		} else {
			layout.CPU = &h
			log.Debug("CPU limits via cgroup", "version", h.Version, "parent", h.Parent)
		}
	}
	if layout.Track != nil || layout.Memory != nil || layout.CPU != nil {
		e.cgroups = &layout
	}
	switch cfg.Supervisor {
	case "", SupervisorShared:
		e.sharedMode = layout.Track != nil
		if !e.sharedMode {
			log.Info("each attempt runs under a supervisor process of its own", "why", "no cgroup hierarchy to track attempts in")
		}
	case SupervisorPerAttempt:
	default:
		return nil, fmt.Errorf("local executor: supervisor %q: want %q or %q", cfg.Supervisor, SupervisorShared, SupervisorPerAttempt)
	}
	return e, nil
}

// Capabilities: one node (this machine), no containers; memory limits
// (with OOM detection) and CPU limits where writable cgroup controllers
// were found; the warning before a timeout; NVIDIA GPUs, assigned
// through CUDA_VISIBLE_DEVICES.
func (e *Executor) Capabilities() executor.Capabilities {
	c := executor.Capabilities{Warn: true, GPUKinds: []string{"nvidia"}}
	if e.cgroups != nil {
		c.MemoryLimits = e.cgroups.Memory != nil
		c.CPULimits = e.cgroups.CPU != nil
	}
	return c
}

// Isolated reports whether attempts run as their projects' own users.
func (e *Executor) Isolated() bool { return e.users != nil }

// LimitsEnforced reports whether memory limits apply (a writable cgroup
// memory controller was found) and where groups are created.
func (e *Executor) LimitsEnforced() (parent string, ok bool) {
	if e.cgroups == nil || e.cgroups.Memory == nil {
		return "", false
	}
	return e.cgroups.Memory.Parent, true
}

// Tracked reports whether each attempt's processes are held in a cgroup of
// their own (see Config.CgroupTrackRoot) and where those groups are made.
func (e *Executor) Tracked() (parent string, ok bool) {
	if e.cgroups == nil || e.cgroups.Track == nil {
		return "", false
	}
	return e.cgroups.Track.Parent, true
}

// Events delivers observations. It is closed by Close.
func (e *Executor) Events() <-chan executor.Event { return e.events }

// Close stops watching attempts and closes Events. Running shims and their
// processes are left alone: they outlive the server, and a new executor's
// Launch reattaches to them.
func (e *Executor) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	close(e.done)
	var pipes []*os.File
	for _, a := range e.attempts {
		a.mu.Lock()
		if a.pipe != nil {
			pipes = append(pipes, a.pipe)
		}
		a.mu.Unlock()
	}
	e.mu.Unlock()
	for _, p := range pipes {
		p.Close() // wakes the watcher's read
	}
	e.spareMu.Lock()
	sp := e.spare
	e.spare = nil
	e.spareMu.Unlock()
	if sp != nil {
		sp.retire()
	}
	e.sharedMu.Lock()
	if e.shared != nil {
		e.shared.ctl.Close() // it exits after its last attempt
		e.shared = nil
	}
	e.sharedMu.Unlock()
	e.wg.Wait()
	close(e.events)
	return nil
}

func (e *Executor) isClosed() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// emit delivers ev unless the executor is closing.
func (e *Executor) emit(ev executor.Event) {
	select {
	case <-e.done:
		return
	default:
	}
	select {
	case e.events <- ev:
	case <-e.done:
	}
}

func validate(l executor.Launch) error {
	var es domain.FieldErrors
	if len(l.Argv) == 0 || l.Argv[0] == "" {
		es.Add("argv", "is empty; give the program to run")
	}
	for _, f := range []struct{ name, v string }{{"dir", l.Dir}, {"workdir", l.WorkDir}, {"log_path", l.LogPath}} {
		if !filepath.IsAbs(f.v) {
			es.Add(f.name, "must be an absolute path, got %q", f.v)
		}
	}
	return es.Err()
}

// Launch starts the attempt under a new shim, or reattaches to the shim that
// already owns it (see the package doc). A second Launch while this executor
// already watches the attempt does nothing.
func (e *Executor) Launch(ctx context.Context, l executor.Launch) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("launch %s: %w", l.Ref, err)
	}
	if err := validate(l); err != nil {
		return fmt.Errorf("launch %s: %w", l.Ref, err)
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return fmt.Errorf("launch %s: executor is closed", l.Ref)
	}
	if a := e.attempts[l.Ref]; a != nil && !a.isDone() {
		e.mu.Unlock()
		return nil
	}
	a := &attempt{ref: l.Ref, dir: l.Dir, logPath: l.LogPath}
	e.attempts[l.Ref] = a
	e.wg.Add(1)
	e.mu.Unlock()

	if exists(filepath.Join(l.Dir, exitFile)) || exists(filepath.Join(l.Dir, shimPIDFile)) {
		if c, err := readClaim(l.Dir); err == nil && c.Port > 0 {
			e.ports.hold(l.Ref, c.Port) // released with the attempt's end
		}
		go e.reattach(a)
		return nil
	}
	if err := e.start(ctx, a, l); err != nil {
		e.ports.release(l.Ref)
		e.mu.Lock()
		if e.attempts[l.Ref] == a {
			delete(e.attempts, l.Ref)
		}
		e.mu.Unlock()
		e.wg.Done()
		return fmt.Errorf("launch %s: %w", l.Ref, err)
	}
	return nil
}

// start prepares the attempt's directories and starts a shim for a, which
// reads the launch record from a pipe.
func (e *Executor) start(ctx context.Context, a *attempt, l executor.Launch) error {
	var id *identity
	userName := e.selfName
	if e.users != nil {
		v, err := e.users.forProject(l.Project, l.Pool)
		if err != nil {
			return err
		}
		id, userName = &v, v.Name
	}
	if l.Code != nil {
		if err := e.unpackCode(ctx, l.Code); err != nil {
			return err
		}
	}
	if err := makeDir(filepath.Dir(l.LogPath), 0o755); err != nil {
		return fmt.Errorf("create directory: %w", err)
	}
	if l.Code != nil {
		if err := writeFileAtomic(filepath.Join(l.Dir, codeDirFile), []byte(l.Code.Dir), 0o600); err != nil {
			return fmt.Errorf("record where the code package is: %w", err)
		}
	}
	if err := prepareDirs(l.Dir, l.WorkDir, l.Writable, id); err != nil {
		return err
	}
	port, err := e.ports.reserve(l.Ref)
	if err != nil {
		return err
	}
	rec := launchRecord{
		JobID: l.JobID, Attempt: l.Attempt, Port: port,
		Argv: l.Argv, Env: withDefaults(launchEnv(l, port), l.Dir, userName), WorkDir: l.WorkDir, LogPath: l.LogPath,
		LogLimit: l.LogLimit, Timeout: l.Timeout, Grace: l.Grace,
		Memory: int64(l.Resources.Memory), CPUs: l.Resources.CPUs, GPUs: l.Placement.GPUs(0),
		Redact: l.Redact, Check: l.Check,
	}
	rec.Cgroups = e.cgroups
	rec.Warn, rec.StopSignalTo = l.Warn, l.StopSignalTo
	rec.CheckpointDir, rec.Resume = l.CheckpointDir, l.Resume
	if rec.CheckpointDir == "" {
		rec.CheckpointDir, _ = getenv(l.Env, "TRAINYARD_CHECKPOINT_DIR")
	}
	if rec.OutputDir = l.OutputDir; rec.OutputDir == "" {
		rec.OutputDir, _ = getenv(l.Env, "TRAINYARD_OUTPUT_DIR")
	}
	if id != nil {
		rec.UID, rec.GID, rec.TmpDir = id.UID, id.GID, filepath.Join(l.Dir, tmpDir)
	}
	e.planCheck(a, l, &rec, port, userName) // envcheck_cache.go
	newNS := id != nil && !e.noMountNS.Load() && !underSharedTmp(slices.Concat([]string{l.Dir, l.WorkDir}, l.Writable))
	if e.sharedMode {
		rec.Dir, rec.PrivateTmp = l.Dir, newNS
		return e.startShared(a, &rec)
	}
	sp, err := e.shim(newNS)
	if err != nil {
		return err
	}
	rec.Dir, rec.PrivateTmp = l.Dir, sp.newNS
	// The record holds the job's secrets: it goes through the pipe only.
	b, err := json.Marshal(rec)
	if err == nil {
		_, err = sp.launch.Write(b)
	}
	sp.launch.Close()
	if err != nil {
		e.log.Warn("send the launch record", "attempt", l.Ref.String(), "err", err) // the shim records the failure
	}
	a.mu.Lock()
	a.proc, a.pipe = sp.cmd.Process, sp.events
	a.mu.Unlock()
	if e.isClosed() {
		sp.events.Close() // Close may have missed this pipe; the watcher must not block it
	}
	go e.watchPipe(a, sp.cmd, sp.events)
	return nil
}

// spareShim is a shim started before its attempt is known, waiting for its
// launch record (ShimMain without --dir).
type spareShim struct {
	cmd    *exec.Cmd
	events *os.File // read end of its event pipe
	launch *os.File // write end of its launch pipe
	newNS  bool     // it runs in a mount namespace of its own
}

// shim returns a shim for an attempt to launch: the spare, when there is
// one and the attempt needs no mount namespace of its own (newNS), else one
// started now. A spare saves the attempt the supervisor's start (its exec
// and runtime start, most of the time from launch to started); the next
// one is started once this attempt has started (refill), off its path.
//
// A shim in a mount namespace of its own is never kept in advance: its
// namespace is a private copy of the host's mounts when it starts, so a
// spare kept for long would give its job a stale view of them (missing
// later mounts) and keep unmounted filesystems alive meanwhile.
func (e *Executor) shim(newNS bool) (*spareShim, error) {
	e.spareNS.Store(newNS)
	if !newNS {
		e.spareMu.Lock()
		sp := e.spare
		e.spare = nil
		e.spareMu.Unlock()
		if sp != nil {
			return sp, nil
		}
	}
	sp, err := e.startShim(newNS)
	if err != nil && newNS && (errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL)) {
		e.noMountNS.Store(true)
		e.log.Warn("jobs share /tmp: cannot create a mount namespace for a private /tmp (TMPDIR still points to each attempt's own)", "err", err)
		sp, err = e.startShim(false)
	}
	if err != nil {
		return nil, fmt.Errorf("start supervisor %s: %w", e.shimPath, err)
	}
	return sp, nil
}

// startShim starts a shim without an attempt: it waits for its launch
// record, which names the attempt's directory.
func (e *Executor) startShim(newNS bool) (*spareShim, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("create event pipe: %w", err)
	}
	lr, lw, err := os.Pipe()
	if err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("create launch pipe: %w", err)
	}
	cmd := &exec.Cmd{
		Path:        e.shimPath,
		Args:        append([]string(nil), e.shimArgs...),
		Env:         shimEnviron(),
		ExtraFiles:  []*os.File{w, lr}, // fd 3 (eventsFD), fd 4 (launchFD)
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if newNS {
		// A mount namespace of its own, for the private /tmp.
		cmd.SysProcAttr.Unshareflags = syscall.CLONE_NEWNS
	}
	err = cmd.Start()
	w.Close()
	lr.Close()
	if err != nil {
		r.Close()
		lw.Close()
		return nil, err
	}
	return &spareShim{cmd: cmd, events: r, launch: lw, newNS: newNS}, nil
}

// refill starts a spare shim, unless the last launch wanted a mount
// namespace of its own (see shim), there is one, one is starting, or the
// executor is closing.
func (e *Executor) refill(newNS bool) {
	if newNS {
		return
	}
	e.spareMu.Lock()
	if e.spare != nil || e.spareStarting || e.isClosed() {
		e.spareMu.Unlock()
		return
	}
	e.spareStarting = true
	e.spareMu.Unlock()
	sp, err := e.startShim(false)
	e.spareMu.Lock()
	e.spareStarting = false
	if err == nil && e.spare == nil && !e.isClosed() {
		e.spare, sp = sp, nil
	}
	e.spareMu.Unlock()
	if err != nil {
		e.log.Debug("start a spare supervisor", "err", err) // the next launch starts its own
	}
	if sp != nil {
		sp.retire()
	}
}

// retire ends a spare shim that is not needed: its launch pipe closes
// empty, so it exits.
func (sp *spareShim) retire() {
	sp.launch.Close()
	sp.events.Close()
	go func() { _ = sp.cmd.Wait() }()
}

// shimEnviron is the environment a shim starts with: the server's, with the Go
// runtime of the shim held to one processor. A shim mostly waits; one P
// (and the fewer threads, stacks and caches that come with it) costs about
// a fifth less memory per running attempt than one per CPU. The job's own
// environment comes from its launch record, never from this one.
func shimEnviron() []string {
	return append(os.Environ(), "GOMAXPROCS=1")
}

// watchPipe follows a shim this executor started.
func (e *Executor) watchPipe(a *attempt, cmd *exec.Cmd, r *os.File) {
	defer e.wg.Done()
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if line == "exited\n" && !e.isClosed() {
			// The outcome is recorded; report it without waiting for the
			// shim to finish exiting.
			e.finishFromRecord(a, "ended")
		} else if strings.HasSuffix(line, "\n") {
			e.handleLine(a, strings.TrimSuffix(line, "\n"))
		}
		if err != nil {
			break
		}
	}
	r.Close()
	if e.isClosed() || a.isDone() {
		// Nothing more to report; still reap the shim once it ends.
		go func() { _ = cmd.Wait() }()
		return
	}
	_ = cmd.Wait()
	status := cmd.ProcessState.String()
	if cmd.ProcessState.ExitCode() == exitOwned {
		// Another shim got the attempt first; watch that one.
		e.reattach0(a)
		return
	}
	e.finishFromRecord(a, "ended ("+status+")")
}

func (e *Executor) handleLine(a *attempt, line string) {
	f := strings.Fields(line)
	if len(f) == 3 && f[0] == "progress" {
		e.reportPoints(a) // the line's step and time are the last point's
		return
	}
	if len(f) == 1 && f[0] == "checkpoint" {
		e.reportCheckpoints(a)
		return
	}
	if len(f) == 3 && f[0] == "loglimit" {
		limit, err1 := strconv.ParseInt(f[1], 10, 64)
		ns, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 == nil && err2 == nil {
			e.sendLimited(a, limit, time.Unix(0, ns).UTC())
		}
		return
	}
	if len(f) < 2 || f[0] != "started" {
		return
	}
	pid, err := strconv.Atoi(f[1])
	if err != nil {
		return
	}
	at := time.Now().UTC()
	if len(f) > 2 {
		if ns, err := strconv.ParseInt(f[2], 10, 64); err == nil {
			at = time.Unix(0, ns).UTC()
		}
	}
	a.mu.Lock()
	a.ready = true
	stop := a.stopPending
	proc := a.proc
	a.mu.Unlock()
	e.sendStarted(a, pid, at)
	if stop && proc != nil {
		_ = proc.Signal(syscall.SIGTERM)
	}
	if e.sharedMode {
		return // no spares: the shared supervisor takes every attempt
	}
	// This attempt is past its start: time for the next one's spare.
	e.wg.Add(1) // the watcher's count is held: Close has not reached Wait
	go func() {
		defer e.wg.Done()
		e.refill(e.spareNS.Load())
	}()
}

func (e *Executor) sendStarted(a *attempt, pid int, at time.Time) {
	a.mu.Lock()
	sent := a.startedSent
	a.startedSent = true
	a.mu.Unlock()
	if !sent {
		r := readResume(a.dir)
		e.checkPassed(a)
		e.emit(executor.Event{Ref: a.ref, Kind: executor.Started, At: at, PID: pid, Resumed: r.Name, ResumeNote: r.Note, CheckNote: a.checkNote})
	}
}

// reattach follows an attempt that some shim already owns.
func (e *Executor) reattach(a *attempt) {
	defer e.wg.Done()
	e.reattach0(a)
}

func (e *Executor) reattach0(a *attempt) {
	if exists(filepath.Join(a.dir, exitFile)) {
		e.finishFromRecord(a, "")
		return
	}
	id, err := readProcID(filepath.Join(a.dir, shimPIDFile))
	if err != nil {
		e.finishFromRecord(a, fmt.Sprintf("cannot be found (%v)", err))
		return
	}
	a.mu.Lock()
	a.proc, a.shim, a.ready = nil, id, true
	stop := a.stopPending
	a.mu.Unlock()
	if stop {
		_ = id.signal(syscall.SIGTERM)
	}
	e.poll(a, id)
}

// poll watches a shim this executor did not start, until it records an
// outcome or dies.
func (e *Executor) poll(a *attempt, id procID) {
	t := time.NewTicker(e.cfg.PollInterval)
	defer t.Stop()
	var seen, seenCk time.Time // metrics.jsonl's and checkpoints.jsonl's modification times last reported
	for {
		if exists(filepath.Join(a.dir, exitFile)) {
			e.finishFromRecord(a, "")
			return
		}
		e.checkStarted(a)
		seen = e.checkProgress(a, seen)
		seenCk = e.checkCheckpoints(a, seenCk)
		e.checkLimited(a)
		if !id.alive() {
			e.finishFromRecord(a, fmt.Sprintf("(pid %d) died", id.PID))
			return
		}
		select {
		case <-t.C:
		case <-e.done:
			return
		}
	}
}

// checkProgress reports the new points of a reattached shim's metric log
// when it changed since seen, at most once per second, and returns the
// modification time it read at.
func (e *Executor) checkProgress(a *attempt, seen time.Time) time.Time {
	st, err := os.Stat(filepath.Join(a.dir, metricsFile))
	if err != nil || !st.ModTime().After(seen) || (!seen.IsZero() && st.ModTime().Sub(seen) < notifyEvery) {
		return seen
	}
	e.reportPoints(a)
	return st.ModTime()
}

// sendLimited reports LogLimited once per watch of an attempt.
func (e *Executor) sendLimited(a *attempt, limit int64, at time.Time) {
	a.mu.Lock()
	sent := a.limitSent
	a.limitSent = true
	a.mu.Unlock()
	if !sent {
		e.emit(executor.Event{Ref: a.ref, Kind: executor.LogLimited, At: at, Limit: limit})
	}
}

// checkLimited reports LogLimited for a reattached shim once its log's
// limit record exists (logs.CapReached): one stat per poll until then,
// none after.
func (e *Executor) checkLimited(a *attempt) {
	a.mu.Lock()
	sent := a.limitSent
	a.mu.Unlock()
	if sent || a.logPath == "" {
		return
	}
	if limit, at, ok := logs.CapReached(a.logPath); ok {
		e.sendLimited(a, limit, at.UTC())
	}
}

// checkStarted reports Started once child.pid shows the process started.
func (e *Executor) checkStarted(a *attempt) {
	a.mu.Lock()
	sent := a.startedSent
	a.mu.Unlock()
	if sent {
		return
	}
	path := filepath.Join(a.dir, childPIDFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return
	}
	at := time.Now().UTC()
	if st, err := os.Stat(path); err == nil {
		at = st.ModTime().UTC()
	}
	e.sendStarted(a, pid, at)
}

// finishFromRecord reports the attempt's end: Exited from exit.json, or Lost
// when the shim is gone without one; why says what happened to the shim.
// Before Lost, every process left of the attempt is ended and its cgroups
// removed (reap), so that a retry never runs beside it.
func (e *Executor) finishFromRecord(a *attempt, why string) {
	rec, err := readExit(a.dir)
	if err != nil && !e.reap(a) {
		return // closing: the next executor reaps and reports it
	}
	e.reportPoints(a)      // the last points, before the end
	e.reportCheckpoints(a) // and the last checkpoints
	// Done before the final event is out, so that a Launch prompted by that
	// event reattaches and reports the outcome again.
	a.mu.Lock()
	a.done = true
	a.mu.Unlock()
	e.ports.release(a.ref) // no process of the attempt is left to hold it
	if err != nil {
		msg := fmt.Sprintf("the supervisor of attempt %s %s without recording an outcome", a.ref, why)
		if !errors.Is(err, os.ErrNotExist) {
			msg = fmt.Sprintf("the outcome record of attempt %s is unreadable: %v", a.ref, err)
		}
		e.emit(executor.Event{Ref: a.ref, Kind: executor.Lost, At: time.Now().UTC(),
			Message: msg + "; every process left of it was ended; see " + filepath.Join(a.dir, shimLogFile)})
		return
	}
	if rec.started() {
		e.sendStarted(a, rec.PID, rec.StartedAt)
	}
	e.reportOutputs(a, rec) // checkpoints.go
	if rec.State == domain.AttemptFailed && a.skipKey != "" {
		e.checks.forget(a.skipKey) // the next attempt checks its environment again
	}
	e.emit(executor.Event{
		Ref: a.ref, Kind: executor.Exited, At: rec.FinishedAt,
		State: rec.State, Reason: rec.Reason, ExitCode: rec.ExitCode, Message: rec.Message,
		Usage: rec.usage(),
	})
}

func (a *attempt) isDone() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.done
}

// Stop asks the attempt's shim to end it: the shim sends SIGTERM to the
// process group (or the main process: Launch.StopSignalTo), waits for all of
// the attempt's processes until the grace period (zero: the launch's) ends,
// and SIGKILLs what is left. The request's reason and message go into the
// attempt's log and exit record. The attempt must have been launched (or
// relaunched, to reattach) through this executor; stopping an attempt that
// already ended is not an error.
func (e *Executor) Stop(ctx context.Context, ref executor.Ref, req executor.StopRequest) error {
	e.mu.Lock()
	a := e.attempts[ref]
	e.mu.Unlock()
	if a == nil {
		return fmt.Errorf("stop %s: this executor has not launched the attempt; call Launch first (it reattaches to a running attempt): %w", ref, domain.ErrNotFound)
	}
	if a.isDone() || exists(filepath.Join(a.dir, exitFile)) {
		return nil
	}
	// The shim reads the request from the stop file when it gets SIGTERM,
	// and checks for the file before it starts the process.
	if err := writeFileAtomic(filepath.Join(a.dir, stopFile), encodeStop(req), 0o600); err != nil {
		return fmt.Errorf("stop %s: %w", ref, err)
	}
	a.mu.Lock()
	a.stopPending = true
	ready, proc, id := a.ready, a.proc, a.shim
	a.mu.Unlock()
	if !ready {
		return nil // signalled as soon as the shim reports (see handleLine)
	}
	var err error
	if proc != nil {
		if err = proc.Signal(syscall.SIGTERM); errors.Is(err, os.ErrProcessDone) {
			err = nil
		}
	} else {
		err = id.signal(syscall.SIGTERM)
	}
	if err != nil {
		return fmt.Errorf("stop %s: signal supervisor: %w", ref, err)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
