package local

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/local/cgroup"
)

// Files in an attempt directory. The executor writes stop; the shim writes
// the rest. What to run (with its secrets) never touches the disk: the shim
// reads it from a pipe (launchFD).
const (
	shimPIDFile  = "shim.pid"  // the claim (claimRecord): the owning shim and what it holds, created exclusively
	childPIDFile = "child.pid" // "<pid>": the user's process, once started
	exitFile     = "exit.json" // how the attempt ended; written atomically, last
	stopFile     = "stop"      // a stop request (stopRecord), written before SIGTERM
	shimLogFile  = "shim.log"  // the shim's own stdout and stderr
	procsFile    = "procs"     // "<pid> <start time>" lines: the attempt's processes, without cgroups
)

// Files of attempts started by earlier versions, which recorded in them
// what the claim now holds: read when the claim lacks it, removed on
// release.
const (
	legacyCgroupFile = "cgroup.json" // the attempt's cgroups (cgroup.Attempt)
	legacyPortFile   = "master_port" // "<port>\n"
)

// exitOwned is the shim's exit status when another shim already owns the
// attempt; the executor then watches that one instead.
const exitOwned = 75

// defaultGrace is used when neither the launch nor the stop request gives one.
const defaultGrace = 10 * time.Second

// launchRecord is everything the shim needs, sent on its launch pipe.
type launchRecord struct {
	// Dir is the attempt's directory, for a shim started without --dir
	// (a spare, started before the attempt was known).
	Dir     string   `json:"dir,omitempty"`
	JobID   int64    `json:"job_id"`
	Attempt int      `json:"attempt"`
	Argv    []string `json:"argv"`
	Env     []string `json:"env"`
	WorkDir string   `json:"workdir"`
	LogPath string   `json:"log_path"`
	// Port is the MASTER_PORT the executor reserved (also in Env), which
	// the shim records in its claim; 0: none.
	Port int `json:"port,omitempty"`
	// LogLimit bounds the log (see executor.Launch.LogLimit); 0: none.
	LogLimit int64         `json:"log_limit,omitempty"`
	Timeout  time.Duration `json:"timeout_ns,omitempty"`
	Grace    time.Duration `json:"grace_ns,omitempty"`
	// Warn and StopSignalTo: see executor.Launch.
	Warn         executor.Warn     `json:"warn,omitzero"`
	StopSignalTo domain.StopTarget `json:"stop_signal_to,omitempty"`
	// CheckpointDir is the job's TRAINYARD_CHECKPOINT_DIR, where the
	// shim removes half-written checkpoints after the attempt; empty: none.
	CheckpointDir string `json:"checkpoint_dir,omitempty"`
	// OutputDir is the job's TRAINYARD_OUTPUT_DIR, whose manifest the shim
	// records when the attempt ends (checkpoints.go); empty: none.
	OutputDir string `json:"output_dir,omitempty"`
	// Resume is the launch's Resume: the checkpoints below CheckpointDir
	// the attempt may resume from, the one to prefer first (checkpoints.go).
	Resume []executor.ResumeFrom `json:"resume,omitempty"`
	Memory int64                 `json:"memory_bytes,omitempty"`
	CPUs   float64               `json:"cpus,omitempty"`
	GPUs   []int                 `json:"gpus,omitempty"`
	// Redact lists the secret values to hide in the log (see
	// executor.Launch.Redact).
	Redact []string `json:"redact,omitempty"`
	// Check is the environment's check command, run before Argv (see
	// executor.Launch.Check); empty: none.
	Check []string `json:"check,omitempty"`
	// CheckEnv and CheckDir, when CheckEnv is not nil, are the check's
	// environment and working directory (see executor.Launch.CheckEnv);
	// nil: Env and WorkDir.
	CheckEnv []string `json:"check_env,omitempty"`
	CheckDir string   `json:"check_dir,omitempty"`
	// CheckNote, when the executor skips the check because it passed
	// recently (envcheck_cache.go), says so, for the log.
	CheckNote string `json:"check_note,omitempty"`
	// InheritEnv names variables that the supervisor takes from its own
	// environment, when set there, over Env's and CheckEnv's: what a
	// batch system decides where the job runs (Slurm's
	// CUDA_VISIBLE_DEVICES for the GPUs it allocated). See BatchRecord.
	InheritEnv []string `json:"inherit_env,omitempty"`
	// Cgroups is where to create the attempt's groups (see
	// cgroup.Attempt); nil: none, so no memory limit, and the attempt's
	// processes are tracked by process group, session and the tracker's
	// record only.
	Cgroups *cgroup.Layout `json:"cgroups,omitempty"`
	// UID and GID, when UID is not 0, are the isolated job's user and group
	// (see Isolation); PrivateTmp mounts TmpDir on /tmp (the shim runs in a
	// mount namespace of its own).
	UID        int    `json:"uid,omitempty"`
	GID        int    `json:"gid,omitempty"`
	PrivateTmp bool   `json:"private_tmp,omitempty"`
	TmpDir     string `json:"tmp_dir,omitempty"`
}

// exitRecord is exit.json: the attempt's outcome as the shim saw it.
type exitRecord struct {
	State    domain.AttemptState `json:"state"`
	Reason   domain.Reason       `json:"reason"`
	ExitCode *int                `json:"exit_code"`
	Signal   string              `json:"signal,omitempty"`
	Message  string              `json:"message"`
	// PID is the user's process; 0 when it never started.
	PID        int       `json:"pid,omitempty"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at"`
	// MaxRSS is the peak resident memory of the largest process of the tree
	// (from rusage), MemoryPeak the peak of the job's memory cgroup (every
	// process together; 0 without one).
	MaxRSS     int64   `json:"max_rss_bytes,omitempty"`
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
	MemoryPeak int64   `json:"memory_peak_bytes,omitempty"`
	// Outputs is the job's outputs as the attempt left them (see
	// sealOutputs); nil when it has none or they could not be read.
	Outputs *executor.SealedOutputs `json:"outputs,omitempty"`
}

// started reports whether the user's process ran.
func (r *exitRecord) started() bool { return r.PID > 0 }

// writeFileAtomic writes data to path through a uniquely named temporary
// file and a rename, so readers see either nothing or the whole file, and
// concurrent writers never trip over each other's temporary file.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	var tmp string
	var fd int
	var err error
	for range 100 {
		tmp = filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"."+strconv.FormatUint(uint64(rand.Uint32()), 10))
		fd, err = openRaw(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return err
	}
	err = writeAll(fd, tmp, data)
	if err == nil && perm != 0o600 { // as os.CreateTemp, 0600 whatever the umask
		if err = unix.Fchmod(fd, uint32(perm.Perm())); err != nil {
			err = &fs.PathError{Op: "chmod", Path: tmp, Err: err}
		}
	}
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = &fs.PathError{Op: "close", Path: tmp, Err: cerr}
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// writeFile writes data to the file path, created (mode perm, less the
// umask) or truncated, never through a link. Files of an attempt's
// directory are written with plain system calls: an os.File would first
// try the runtime's poller (four more system calls, for each of the files
// a shared supervisor writes for every attempt).
func writeFile(path string, data []byte, perm os.FileMode) error {
	fd, err := openRaw(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, uint32(perm.Perm()))
	if err != nil {
		return err
	}
	err = writeAll(fd, path, data)
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = &fs.PathError{Op: "close", Path: path, Err: cerr}
	}
	return err
}

// openRaw opens path with flags (and O_CLOEXEC, O_NOFOLLOW), retrying on
// EINTR.
func openRaw(path string, flags int, perm uint32) (int, error) {
	for {
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC|unix.O_NOFOLLOW, perm)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
}

// writeAll writes data to fd, the file path.
func writeAll(fd int, path string, data []byte) error {
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &fs.PathError{Op: "write", Path: path, Err: err}
		}
		if n == 0 {
			return &fs.PathError{Op: "write", Path: path, Err: io.ErrShortWrite}
		}
		data = data[n:]
	}
	return nil
}

func readExit(dir string) (*exitRecord, error) {
	b, err := os.ReadFile(filepath.Join(dir, exitFile))
	if err != nil {
		return nil, err
	}
	var r exitRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, exitFile), err)
	}
	return &r, nil
}

// procID identifies a process across pid reuse: its pid and its start time
// in clock ticks since boot (field 22 of /proc/<pid>/stat).
type procID struct {
	PID   int
	Start uint64
}

func (p procID) String() string { return strconv.Itoa(p.PID) + " " + strconv.FormatUint(p.Start, 10) }

// parseProcID reads "<pid> <start>" from the first line of b.
func parseProcID(b []byte) (procID, error) {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return procID{}, fmt.Errorf("want \"<pid> <start>\", got %q", b)
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return procID{}, fmt.Errorf("want \"<pid> <start>\", got %q", b)
	}
	return procID{PID: pid, Start: start}, nil
}

// claimRecord is what shim.pid holds: the owning shim on its first line
// ("<pid> <start>", all that readProcID reads), then what the attempt holds
// that whoever outlives the shim must know, written before the shim makes
// it: "port <n>", the MASTER_PORT the executor reserved (held again after
// a server restart), and "cgroups <json>", the groups the shim is about to
// create (cgroup.Attempt), to end and remove them if it dies. One file,
// written once: an attempt's start creates as few files as it can.
//
// "shared" marks an attempt of a shared supervisor (supervisor.go): Shim
// is that supervisor, which runs other attempts too, so it is never
// signalled but with SIGTERM (which tells it to look for stop requests).
type claimRecord struct {
	Shim    procID
	Port    int
	Cgroups *cgroup.Attempt
	Shared  bool
}

func (c claimRecord) encode() ([]byte, error) {
	b := []byte(c.Shim.String() + "\n")
	if c.Port > 0 {
		b = append(b, "port "+strconv.Itoa(c.Port)+"\n"...)
	}
	if c.Cgroups != nil {
		j, err := json.Marshal(c.Cgroups)
		if err != nil {
			return nil, err
		}
		b = append(append(append(b, "cgroups "...), j...), '\n')
	}
	if c.Shared {
		b = append(b, "shared\n"...)
	}
	return b, nil
}

// readClaim reads the attempt's claim in dir; its error matches
// fs.ErrNotExist when no shim claimed the attempt. Attempts of earlier
// versions have their port and cgroups in files of their own.
func readClaim(dir string) (claimRecord, error) {
	path := filepath.Join(dir, shimPIDFile)
	b, err := readSmall(path)
	if err != nil {
		return claimRecord{}, err
	}
	var c claimRecord
	if c.Shim, err = parseProcID(b); err != nil {
		return claimRecord{}, fmt.Errorf("read %s: %w", path, err)
	}
	legacy := true
	for _, line := range strings.Split(string(b), "\n")[1:] {
		key, val, _ := strings.Cut(line, " ")
		switch key {
		case "port":
			legacy = false
			if c.Port, err = strconv.Atoi(val); err != nil || c.Port <= 0 {
				return claimRecord{}, fmt.Errorf("read %s: bad port %q", path, val)
			}
		case "shared":
			c.Shared = true
		case "cgroups":
			legacy = false
			c.Cgroups = new(cgroup.Attempt)
			if err := json.Unmarshal([]byte(val), c.Cgroups); err != nil {
				return claimRecord{}, fmt.Errorf("read %s: cgroups: %w", path, err)
			}
		}
	}
	if legacy {
		if p, err := readSmall(filepath.Join(dir, legacyPortFile)); err == nil {
			c.Port, _ = strconv.Atoi(strings.TrimSpace(string(p)))
		}
		if j, err := readSmall(filepath.Join(dir, legacyCgroupFile)); err == nil {
			c.Cgroups = new(cgroup.Attempt)
			if err := json.Unmarshal(j, c.Cgroups); err != nil {
				return claimRecord{}, fmt.Errorf("read %s: %w", filepath.Join(dir, legacyCgroupFile), err)
			}
		}
	}
	return c, nil
}

// readSmall reads a record of the attempt's directory without following a
// link a job may have put in its place.
func readSmall(path string) ([]byte, error) {
	fd, err := openRaw(path, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	b := make([]byte, 0, 512)
	for len(b) < 1<<20 {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):min(cap(b), 1<<20)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			break
		}
		b = b[:len(b)+n]
	}
	return b, nil
}

func readProcID(path string) (procID, error) {
	b, err := readSmall(path)
	if err != nil {
		return procID{}, err
	}
	id, err := parseProcID(b)
	if err != nil {
		return procID{}, fmt.Errorf("read %s: %w", path, err)
	}
	return id, nil
}

// procStat returns the state letter and start time of pid.
func procStat(pid int) (state byte, start uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) may contain spaces and parentheses; fields
	// after the last ')' are plain.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: bad start time %q", pid, f[19])
	}
	return f[0][0], start, nil
}

// alive reports whether the process p still runs: same pid, same start
// time, and not a zombie.
func (p procID) alive() bool {
	state, start, err := procStat(p.PID)
	if err != nil {
		return false
	}
	return start == p.Start && state != 'Z' && state != 'X'
}

// signal sends sig to p if it is still the same process.
func (p procID) signal(sig syscall.Signal) error {
	if !p.alive() {
		return nil
	}
	if err := syscall.Kill(p.PID, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// usage is what the record says the attempt consumed: the peak of its
// memory cgroup when it had one (it covers every process), else the
// largest process's peak.
func (r *exitRecord) usage() domain.Usage {
	rss := r.MaxRSS
	if r.MemoryPeak > 0 {
		rss = r.MemoryPeak
	}
	return domain.Usage{CPUSeconds: r.CPUSeconds, MaxRSS: domain.ByteSize(rss)}
}
