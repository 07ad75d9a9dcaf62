package local

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"trainyard/internal/executor"
	"trainyard/internal/logs"
)

// This file is what an executor that starts the supervisor elsewhere
// (the batch step of a Slurm job, on a node that shares the attempt's
// directory) needs of it: the launch record, the stop request and the
// files that say how far the attempt got. The supervisor there runs as
// "trainyard-shim --dir DIR" with the record on descriptor 4 and no
// events pipe; everything else (log, progress, checkpoints, outputs,
// exit record) is as on this executor.

// Batch is how a supervisor started elsewhere runs its attempt (see
// BatchRecord).
type Batch struct {
	// Port is MASTER_PORT. The record's rank variables are a single
	// node's (MASTER_ADDR=127.0.0.1, RANK=0): an executor that runs
	// several nodes sets each node's in the program it starts.
	Port int
	// User is USER and LOGNAME, unless the launch's Env sets them: the
	// user the job runs as.
	User string
	// InheritEnv names variables the supervisor takes from its own
	// environment where it has them, over the launch's: what the batch
	// system decided on the node (Slurm's CUDA_VISIBLE_DEVICES, for the
	// GPUs it allocated, whatever the placement's indices).
	InheritEnv []string
}

// BatchRecord prepares l's directories (its attempt directory with HOME
// and tmp, its working directory, its Writable ones and its log's) as a
// launch here does, and returns its launch record: what the supervisor
// reads on descriptor 4. It holds the job's secrets (Env, Redact):
// whoever stores it keeps it private and removes it once read. The
// attempt runs as the batch job's user, without cgroups (the batch
// system confines it).
func BatchRecord(l executor.Launch, b Batch) ([]byte, error) {
	if err := validate(l); err != nil {
		return nil, err
	}
	if err := makeDir(filepath.Dir(l.LogPath), 0o755); err != nil {
		return nil, fmt.Errorf("create directory: %w", err)
	}
	if err := prepareDirs(l.Dir, l.WorkDir, l.Writable, nil); err != nil {
		return nil, err
	}
	port, userName := b.Port, b.User
	rec := launchRecord{
		Dir: l.Dir, JobID: l.JobID, Attempt: l.Attempt, Port: port,
		Argv: l.Argv, Env: withDefaults(launchEnv(l, port), l.Dir, userName), WorkDir: l.WorkDir, LogPath: l.LogPath,
		LogLimit: l.LogLimit, Timeout: l.Timeout, Grace: l.Grace,
		Memory: int64(l.Resources.Memory), CPUs: l.Resources.CPUs, GPUs: l.Placement.GPUs(0),
		Redact: l.Redact, Check: l.Check,
		Warn: l.Warn, StopSignalTo: l.StopSignalTo,
		CheckpointDir: l.CheckpointDir, Resume: l.Resume, OutputDir: l.OutputDir,
		InheritEnv: b.InheritEnv,
	}
	if rec.CheckpointDir == "" {
		rec.CheckpointDir, _ = getenv(l.Env, "TRAINYARD_CHECKPOINT_DIR")
	}
	if rec.OutputDir == "" {
		rec.OutputDir, _ = getenv(l.Env, "TRAINYARD_OUTPUT_DIR")
	}
	if len(l.Check) > 0 && l.CheckEnv != nil {
		cl := l
		cl.Env = l.CheckEnv
		rec.CheckEnv = withDefaults(launchEnv(cl, port), l.Dir, userName)
		rec.CheckDir = checkDir
	}
	return json.Marshal(rec)
}

// RequestStop records req in the attempt directory dir for its
// supervisor, which reads it when it gets SIGTERM (and before it starts
// the job's process): the stop's grace, reason and message.
func RequestStop(dir string, req executor.StopRequest) error {
	return writeFileAtomic(filepath.Join(dir, stopFile), encodeStop(req), 0o600)
}

// StopRequested reports whether a stop was requested in the attempt
// directory dir (RequestStop, or this executor's Stop).
func StopRequested(dir string) bool { return exists(filepath.Join(dir, stopFile)) }

// StartedProcess reports whether the supervisor in the attempt
// directory dir has started the job's process: its PID, and when
// (the PID file's time).
func StartedProcess(dir string) (pid int, at time.Time, ok bool) {
	path := filepath.Join(dir, childPIDFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, time.Time{}, false
	}
	pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, time.Time{}, false
	}
	at = time.Now().UTC()
	if st, err := os.Stat(path); err == nil {
		at = st.ModTime().UTC()
	}
	return pid, at, true
}

// SupervisorLog is the supervisor's own diagnostics file in an attempt
// directory.
func SupervisorLog(dir string) string { return filepath.Join(dir, shimLogFile) }

// Reports reads what a supervisor records in an attempt directory while
// the attempt runs (its metric points and completed checkpoints), from
// where the last read stopped, for an executor that does not hold the
// supervisor's event pipe. Not safe for concurrent use.
type Reports struct {
	ref                executor.Ref
	dir                string
	pointsOff, ckptOff int64
}

// NewReports reads the records of ref's attempt directory dir from their
// start (a consumer skips what it has).
func NewReports(ref executor.Ref, dir string) *Reports { return &Reports{ref: ref, dir: dir} }

// Read returns the Progress and Checkpointed events recorded since the
// last Read, in the order the local executor reports them.
func (r *Reports) Read() []executor.Event {
	var evs []executor.Event
	if f, err := logs.OpenFile(filepath.Join(r.dir, metricsFile)); err == nil {
		var ms []logs.Metric
		for {
			points, n, step, at := readPoints(f, r.pointsOff, r.ref, ms)
			r.pointsOff += n
			if len(points) > 0 {
				evs = append(evs, executor.Event{Ref: r.ref, Kind: executor.Progress, Step: step, At: at, Points: points})
			}
			if n == 0 || (n < maxReadBytes && len(points) < executor.MaxPoints) {
				break
			}
		}
		f.Close()
	}
	if f, err := logs.OpenFile(filepath.Join(r.dir, checkpointsFile)); err == nil {
		ck, n := readCheckpoints(f, r.ckptOff, r.ref)
		r.ckptOff += n
		evs = append(evs, ck...)
		f.Close()
	}
	return evs
}

// Resumed is what the supervisor in dir recorded of the attempt's resume:
// the checkpoint it handed over (empty: none) and why it skipped others,
// for the Started event.
func Resumed(dir string) (name, note string) {
	r := readResume(dir)
	return r.Name, r.Note
}

// inherit sets the variables of InheritEnv that the supervisor's own
// environment has in Env and CheckEnv.
func (r *launchRecord) inherit() {
	var kvs []string
	for _, k := range r.InheritEnv {
		if v, ok := os.LookupEnv(k); ok {
			kvs = append(kvs, k+"="+v)
		}
	}
	if len(kvs) == 0 {
		return
	}
	r.Env = setEnv(r.Env, kvs)
	if r.CheckEnv != nil {
		r.CheckEnv = setEnv(r.CheckEnv, kvs)
	}
}
