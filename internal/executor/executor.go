// Package executor defines how the control loop runs attempts on machines:
// the Executor interface, the events executors report, and the inventory they
// offer. Implementations (local, slurm, kubernetes) never touch the store; they
// report events and the control loop records them.
//
// The contract has two sides: running attempts (Launch, Stop, Events,
// Release, Inventory) and reading what they leave (Files: Logs, Outputs),
// which is its own interface so that a server that only reads (an API
// replica) needs no executor that runs anything; see files.go. The
// conformance suite, which every executor and the in-memory fake pass, is
// package executortest.
//
// This package imports domain and the standard library only.
package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"trainyard/internal/domain"
)

// Ref names one attempt of one job.
type Ref struct {
	JobID   int64
	Attempt int
}

func (r Ref) String() string { return fmt.Sprintf("%d/%d", r.JobID, r.Attempt) }

// Launch is everything needed to start one attempt.
type Launch struct {
	Ref
	// Project owns the job and Pool is where it runs. An executor that
	// isolates jobs runs the attempt as the project's own unprivileged user
	// (or one its configuration names for the project or pool).
	Project string
	Pool    string
	// Executor names the executor the pool runs its jobs on (the pool's
	// executor, e.g. "local" or a configured Kubernetes cluster), for a
	// router that drives several; empty means the only one.
	Executor string
	// Image is the container image of the job's environment (pinned at
	// submit), for executors that run containers; empty: the executor's
	// default image. Executors that run processes ignore it.
	Image   string
	Argv    []string // Argv[0] is looked up in PATH of Env when it has no slash
	Env     []string // the environment, "KEY=value"; secrets included, so never written to disk
	WorkDir string   // the process's working directory; created if missing
	// Dir is the attempt's own directory (supervisor state, exit record). It
	// is unique per attempt and created if missing. The attempt's HOME and
	// TMPDIR are its subdirectories home and tmp, unless Env sets them.
	Dir string
	// Writable lists directories the attempt must be able to write (its
	// outputs and checkpoints). The executor creates those missing
	// (failing the launch with ErrOutputs when it cannot); one that
	// isolates jobs gives them to the attempt's user.
	Writable []string
	// LogPath is the attempt's log file (see package logs for the format).
	LogPath string
	// LogLimit, when positive (at least domain.MinLogLimit), bounds the
	// log's size on disk: beyond it the log keeps its head and a rolling
	// tail (logs.Writer).
	LogLimit int64
	// Timeout, when positive, bounds the attempt's run time: at expiry the
	// attempt gets SIGTERM (see StopSignalTo), then, once Grace has passed,
	// SIGKILL for every process of it still running. Grace also applies to
	// Stop requests that give none; zero means 10s.
	Timeout time.Duration
	Grace   time.Duration
	// Warn, when its Signal is set and Timeout positive, is sent Warn.Before
	// the timeout, to the processes the stop signal goes to.
	Warn Warn
	// StopSignalTo says who gets the stop and warning signals: the whole
	// process group (domain.StopGroup, also when empty) or the main process
	// only (domain.StopMain), the rest getting SIGTERM once it has exited.
	StopSignalTo domain.StopTarget
	// Resources and Placement are what the scheduler assigned. Executors
	// enforce limits where they can (memory and CPUs via cgroups) and set
	// the device and rank environment from the placement themselves
	// (Placement.Env): CUDA_VISIBLE_DEVICES, WORLD_SIZE, RANK, MASTER_ADDR…
	// Env never needs to carry them.
	Resources domain.Resources
	Placement Placement
	// Redact lists secret values the supervisor replaces with [redacted]
	// in every line it writes to the log (values under 4 bytes are left
	// alone). Like Env, it is never written to disk.
	Redact []string // secrets: values to hide in logs
	// Code, when set, is the job's code package (submit --context): the
	// executor unpacks a fresh copy of it for the attempt before anything
	// runs. A failed unpack fails the launch.
	Code *Code
	// Check, when not empty, is the environment's check command (an argv;
	// Check[0] is looked up like Argv[0]): the executor runs it before Argv,
	// with the same Env, WorkDir and log. If it cannot start or exits
	// non-zero, Argv never starts and the attempt ends failed with reason
	// EnvironmentCheckFailed (no Started event).
	Check []string
	// CheckEnv, when not nil, is the environment the check runs in
	// instead of Env: the server's own variables with the environment's
	// PATH prefix and variables, never the job's env_vars or secrets. The
	// executor adds to it what it adds to Env (placement, HOME, TMPDIR,
	// USER) and runs the check in a directory the job cannot write, not
	// WorkDir, so that nothing of the job can make a check pass.
	CheckEnv []string
	// EnvRef and EnvDigest name the environment version Check belongs to
	// ("py3@1" and its domain.Environment.Digest). With CheckEnv, an
	// executor may skip a check that passed recently on the same node for
	// the same digest (see the local executor's Config.EnvCheckTTL); the
	// Started event's CheckNote then says so.
	EnvRef    string
	EnvDigest string
	// Resume lists the checkpoints the attempt may resume from, the one to
	// prefer first. The executor hands the attempt the first whose digest
	// still matches its SHA256 (one without a SHA256 only needs to be
	// complete) as TRAINYARD_RESUME_FROM, its location as the job sees it,
	// and names it in the Started event (Resumed); those it skips it says
	// why in the attempt's log and in ResumeNote. None matching: the
	// variable is empty, and the attempt starts afresh.
	Resume []ResumeFrom
	// OutputDir, when set, is the job's output location
	// (TRAINYARD_OUTPUT_DIR): when the attempt ends, the executor's in-job
	// agent records its manifest and, if the attempt succeeded, makes it
	// read-only (OutputsSealed). Empty: TRAINYARD_OUTPUT_DIR of Env.
	OutputDir string
	// CheckpointDir, when set, is the job's checkpoint directory: the
	// executor's in-job agent registers each checkpoint the job completes
	// there while it runs, and once more when it ends, as Checkpointed
	// events (with digests), and Resume's names are below it.
	CheckpointDir string
}

// ResumeFrom is a registered checkpoint an attempt may resume from.
type ResumeFrom struct {
	Name   string // directly below Launch.CheckpointDir
	SHA256 string // its digest when registered; empty: not checked
}

// ErrOutputs is wrapped by the error of a Launch that could not prepare
// the attempt's Writable directories: the job's outputs cannot be written.
var ErrOutputs = errors.New("cannot prepare the job's output directories")

// Code is a code package to unpack for an attempt.
type Code struct {
	// SHA256 names the package (hex).
	SHA256 string
	// Dir is where the package's files go. A directory that already
	// exists there holds an earlier unpack of this attempt (a launch that
	// reattaches) and is left alone.
	Dir string
	// Open returns the package's archive. Its reader fails once it has
	// read bytes that do not match SHA256, so the executor reads it to
	// the end.
	Open func(ctx context.Context) (io.ReadCloser, error)
}

// Warn is an advance warning signal before the timeout.
type Warn struct {
	Signal string // a name from domain.WarnSignals, SIG prefix optional; empty: none
	Before time.Duration
}

// StopRequest says how and why to stop an attempt.
type StopRequest struct {
	// Grace is the time between the stop signal and SIGKILL; zero: the
	// launch's Grace.
	Grace time.Duration
	// Reason is why the attempt is stopped: CanceledByUser (also when
	// empty), Preempted, HealthCheckFailed or Stalled. It becomes the
	// Reason of the attempt's Exited event.
	Reason domain.Reason
	// Message says more, in words, for the attempt's log and its Exited
	// event: "canceled by alice", "preempted for job 12".
	Message string
}

// Placement is where an attempt runs: all nodes of its gang, in node-rank
// order (the first node is rank 0 and hosts the rendezvous).
type Placement struct {
	Nodes []PlacedNode
}

// PlacedNode is one node of a placement and the GPU indices assigned there.
type PlacedNode struct {
	Name string
	GPUs []int
}

// Local returns the placement of a single-node attempt on node with gpus.
func Local(node string, gpus []int) Placement {
	return Placement{Nodes: []PlacedNode{{Name: node, GPUs: gpus}}}
}

// GPUs returns the GPU indices assigned on the node of rank nodeRank (none
// when out of range).
func (p Placement) GPUs(nodeRank int) []int {
	if nodeRank < 0 || nodeRank >= len(p.Nodes) {
		return nil
	}
	return p.Nodes[nodeRank].GPUs
}

// Env returns the device and rank environment of the process started on the
// node of rank nodeRank: one process per node, which is what torchrun
// expects of its launcher (it starts the node's workers itself and gives
// each its own RANK, LOCAL_RANK and LOCAL_WORLD_SIZE, overriding these).
//
//	CUDA_VISIBLE_DEVICES  the node's GPUs, comma-separated ("" hides all)
//	WORLD_SIZE            the number of nodes
//	RANK, NODE_RANK       nodeRank
//	LOCAL_RANK            0
//	LOCAL_WORLD_SIZE      1
//	MASTER_ADDR           masterAddr (the rank-0 node)
//	MASTER_PORT           masterPort, a port the executor reserved for the attempt
//
// A single process on one node gets WORLD_SIZE=1, RANK=0.
func (p Placement) Env(nodeRank int, masterAddr string, masterPort int) []string {
	world := max(len(p.Nodes), 1)
	gpus := make([]string, 0, len(p.GPUs(nodeRank)))
	for _, g := range p.GPUs(nodeRank) {
		gpus = append(gpus, strconv.Itoa(g))
	}
	return []string{
		"CUDA_VISIBLE_DEVICES=" + strings.Join(gpus, ","),
		"WORLD_SIZE=" + strconv.Itoa(world),
		"RANK=" + strconv.Itoa(nodeRank),
		"NODE_RANK=" + strconv.Itoa(nodeRank),
		"LOCAL_RANK=0",
		"LOCAL_WORLD_SIZE=1",
		"MASTER_ADDR=" + masterAddr,
		"MASTER_PORT=" + strconv.Itoa(masterPort),
	}
}

// Capabilities is what an executor can do, for callers to ask instead of
// assuming (admission, the control loop).
type Capabilities struct {
	// MultiNode: it runs jobs whose resources.nodes is above 1.
	MultiNode bool
	// Containers: it runs jobs in container images.
	Containers bool
	// MemoryLimits: resources.memory is enforced, and an attempt killed
	// for exceeding it ends with reason OOMKilled.
	MemoryLimits bool
	// CPULimits: resources.cpus is enforced (a CPU-time quota).
	CPULimits bool
	// Warn: Launch.Warn is sent (policy.warn).
	Warn bool
	// GPUKinds lists the kinds of GPU it can assign, e.g. "nvidia"; empty:
	// none.
	GPUKinds []string
}

// EventKind says what happened to an attempt.
type EventKind string

const (
	// Started: the user's process is running.
	Started EventKind = "started"
	// Exited: the attempt ended; State, Reason, ExitCode and Message say how.
	Exited EventKind = "exited"
	// Lost: the attempt's supervisor vanished without an exit record.
	Lost EventKind = "lost"
	// Progress: the attempt reported training progress. Points are the
	// metric points reported since the previous Progress event, in order;
	// Step is the latest step and At when it was reported. Executors send
	// it at most about once per second per attempt, plus once with the
	// last points before the attempt's Exited or Lost. An executor that
	// reattaches may report points again: their consumer skips those it
	// has (the store does).
	Progress EventKind = "progress"
	// LogLimited: the attempt's log reached its limit (Launch.LogLimit);
	// from now on it keeps its head and a rolling tail. Limit is the
	// limit; At when it was reached. Sent at most once per attempt by a
	// watching executor (again after a reattach). (Contract addition.)
	LogLimited EventKind = "log_limited"
	// Checkpointed: the attempt completed a checkpoint (Checkpoint, with
	// its digest), found by the executor's in-job agent while the attempt
	// ran or when it ended. Every such event of an attempt comes before
	// its Exited event. A name may come again with another digest when the
	// job saves it again; a reattached executor may report one again.
	Checkpointed EventKind = "checkpoint"
	// OutputsSealed: the attempt's agent recorded the job's outputs as the
	// attempt left them (Outputs: their manifest, and whether they were
	// made read-only because the attempt succeeded). Sent once per attempt
	// that ran, after its last Checkpointed and before its Exited; not
	// sent when the attempt has no output location or the agent could not
	// read it, nor for a lost attempt: the consumer then reads Outputs
	// itself.
	OutputsSealed EventKind = "outputs"
)

// SealedOutputs is what an attempt's agent recorded of the job's outputs.
type SealedOutputs struct {
	// Files lists every regular file below the output location except
	// CheckpointsDir, by path, with its size and SHA-256 (Outputs.Manifest).
	Files []domain.ArtifactFile `json:"files"`
	// ReadOnly: the attempt succeeded, and the outputs were made read-only
	// before they were listed (Outputs.MakeReadOnly).
	ReadOnly bool `json:"read_only,omitempty"`
}

// Event is one observation about an attempt.
type Event struct {
	Ref
	Kind EventKind
	At   time.Time
	PID  int // with Started
	// Resumed, with Started, names the checkpoint of Launch.Resume the
	// attempt was handed (empty: none); ResumeNote says why the ones
	// before it were skipped, if any were.
	Resumed    string
	ResumeNote string
	// CheckNote, with Started, says that the environment's check was not
	// run because it passed recently ("environment check py3@1 passed on
	// node n1 at …; not run again until …"); empty when it ran or there is
	// none.
	CheckNote string
	// Checkpoint, with Checkpointed, is the completed checkpoint.
	Checkpoint *Checkpoint
	// Outputs, with OutputsSealed, is what the agent recorded.
	Outputs *SealedOutputs
	// Step, with Progress, is the latest training step reported.
	Step int64
	// Points, with Progress, are the metric points reported (JobID and
	// Attempt set); at most MaxPoints per event.
	Points []domain.MetricPoint
	// Limit, with LogLimited, is the log's limit in bytes.
	Limit int64
	// With Exited: State is one of succeeded, failed, timed_out, canceled;
	// Reason is Completed, ExitCode, EntrypointNotFound, EnvironmentCheckFailed,
	// OOMKilled, Timeout, or a StopRequest's Reason (CanceledByUser,
	// Preempted, HealthCheckFailed, Stalled); ExitCode is nil when the process never ran or was killed
	// by a signal (Message then names the signal).
	State    domain.AttemptState
	Reason   domain.Reason
	ExitCode *int
	Message  string
	// Usage, with Exited, is what the attempt's processes consumed.
	Usage domain.Usage
}

// MaxPoints bounds the metric points one Progress event carries; an
// executor splits more into several events.
const MaxPoints = 50_000

// Node is one machine an executor can run on.
type Node struct {
	Name   string
	CPUs   float64
	Memory domain.ByteSize
	GPUs   []int // GPU indices
}

// Inventory is what an executor offers.
type Inventory struct {
	Nodes []Node
}

// Executor runs attempts, and reads what they leave (Files).
type Executor interface {
	Files
	// Capabilities says what the executor can do. It does not change
	// while the executor runs.
	Capabilities() Capabilities
	// Launch starts the attempt. It is idempotent per Ref: launching an
	// attempt that is already running or has already exited does not start
	// it again, but reattaches and reports its events (Started, then Exited or
	// Lost) as for a fresh launch. The control loop relies on this to recover
	// after a restart: it calls Launch again for every active attempt.
	// A returned error means the attempt could not be started at all.
	Launch(ctx context.Context, l Launch) error
	// Stop asks the attempt to end: SIGTERM (to its process group, or its
	// main process: Launch.StopSignalTo), then SIGKILL for whatever is left
	// when the grace period ends. Its Exited event follows with State
	// canceled and the request's Reason. Stopping an attempt that already
	// ended is not an error.
	Stop(ctx context.Context, ref Ref, req StopRequest) error
	// Events delivers observations. The control loop drains it continuously.
	Events() <-chan Event
	// Inventory reports the nodes and their capacity.
	Inventory(ctx context.Context) (Inventory, error)
	// Release frees what the executor still holds for an ended attempt,
	// once the server has recorded its outcome: its workspace (HOME,
	// temporary files, a working directory made for it, an unpacked code
	// copy: what a job keeps it writes to its outputs, as on a cluster,
	// where the pod's filesystem goes with the pod), its cgroups, the
	// supervisor's private state. It keeps what is read later: the log
	// (Logs), the metric log, and the outcome record, so that a later
	// Launch still reports the attempt's outcome. The job's outputs are
	// the job's, not the attempt's: never touched.
	//
	// It is idempotent; an attempt that never ran is no error. Releasing
	// an attempt that has not ended is an error matching
	// domain.ErrConflict, and releases nothing: stop it first, and release
	// it once its Exited or Lost event is recorded.
	Release(ctx context.Context, ref Ref) error
}
