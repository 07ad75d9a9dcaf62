package domain

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Spec is a validated, defaulted job specification: what the user asked for,
// after jobspec.Parse, overrides and defaults. Its canonical JSON (see
// jobspec.Canonical) is the job's immutable config snapshot.
type Spec struct {
	Name       string   `json:"name"`
	Project    string   `json:"project"`
	Pool       string   `json:"pool"`
	Env        string   `json:"env"`        // "name@version", or "host"
	Entrypoint []string `json:"entrypoint"` // argv; a shell string is stored as ["/bin/sh", "-c", s]
	Shell      bool     `json:"shell,omitempty"`
	// Workdir is the absolute directory the entrypoint runs in. Empty: a fresh
	// per-attempt directory. The CLI resolves a relative workdir in a spec file
	// against the file's directory before submitting.
	Workdir    string            `json:"workdir,omitempty"`
	Resources  Resources         `json:"resources"`
	Inputs     []Input           `json:"inputs,omitempty"`
	Outputs    Outputs           `json:"outputs"`
	Params     map[string]string `json:"params,omitempty"`
	EnvVars    map[string]string `json:"env_vars,omitempty"`
	Secrets    []string          `json:"secrets,omitempty"`
	Policy     Policy            `json:"policy"`
	Checkpoint Checkpoint        `json:"checkpoint"`
	Health     Health            `json:"health"`
	Labels     map[string]string `json:"labels,omitempty"`
	// After lists the jobs and sweeps this job waits for (workflow.go).
	After []Dependency `json:"after,omitempty"`
	// Sweep, in a submitted spec, makes it a sweep of member jobs; a
	// member's own spec has none (workflow.go).
	Sweep *SweepSpec `json:"sweep,omitempty"`
	// Notify, when set, is whom to tell when the job ends (notify.go).
	Notify *Notify `json:"notify,omitempty"`
	// Resume, when set, starts the job from another job's checkpoint
	// (resumefrom.go); nil: from its own checkpoints only.
	Resume *ResumeFrom `json:"resume,omitempty"`
}

// Resources is what one job asks for. CPUs are in cores (fractions allowed),
// memory in bytes; Nodes is the gang size (1 for single-node jobs).
type Resources struct {
	GPUs   int      `json:"gpus"`
	CPUs   float64  `json:"cpus"`
	Memory ByteSize `json:"memory"`
	Nodes  int      `json:"nodes"`
}

// Input names a versioned dataset the job reads.
type Input struct {
	Name    string `json:"name"`
	Path    string `json:"path"`
	Version string `json:"version"`
	// FromJob, when set, makes the input another job's outputs: Path is
	// then relative to that job's output directory in the submitted spec,
	// and absolute (resolved at submit) in the snapshot.
	FromJob int64 `json:"from_job,omitempty"`
}

// Outputs says where the job writes its results. Path is empty when the
// platform assigns <artifacts>/<project>/<name>/<job-id>/; a user-given path
// must contain the placeholder {job_id}.
type Outputs struct {
	Path string `json:"path,omitempty"`
}

// Policy is the failure-handling and ordering policy of a job.
type Policy struct {
	Timeout     Duration `json:"timeout"`
	Retries     int      `json:"retries"`
	Reentrant   bool     `json:"reentrant"`
	Priority    Priority `json:"priority"`
	Preemptible bool     `json:"preemptible"`
	// LogLimit bounds the log of one attempt; beyond it the log keeps its
	// head and a rolling tail. 0: the pool's limit (see EffectiveLogLimit).
	LogLimit ByteSize `json:"log_limit,omitempty"`
	// Grace is the time between the stop signal and SIGKILL when the job is
	// stopped (canceled, timed out, preempted, unhealthy). 0: the server's
	// default; a value above the server's maximum is capped at it.
	Grace Duration `json:"grace,omitempty"`
	// Warn, when set, is an advance warning signal sent Warn.Before the
	// timeout ends the attempt.
	Warn *Warn `json:"warn,omitempty"`
	// StopSignalTo is who gets the stop signal: StopGroup (the default when
	// empty) or StopMain.
	StopSignalTo StopTarget `json:"stop_signal_to,omitempty"`
}

// Warn is an advance warning before the timeout: Signal is sent Before the
// timeout, to the processes the stop signal goes to.
type Warn struct {
	// Signal is a signal name without the SIG prefix, as in WarnSignals.
	Signal string   `json:"signal"`
	Before Duration `json:"before"`
}

// WarnSignals are the signals a job may ask to be warned with: those a
// program can catch and that do not stop it by default.
var WarnSignals = []string{"USR1", "USR2", "HUP", "INT", "QUIT", "ALRM", "TERM", "URG", "WINCH", "CONT"}

// StopTarget says which processes of an attempt get its stop (and warning)
// signal.
type StopTarget string

const (
	// StopGroup signals every process in the attempt's process group.
	StopGroup StopTarget = "group"
	// StopMain signals the entrypoint's process only; the rest of the group
	// gets the signal once it has exited, or SIGKILL when the grace ends.
	StopMain StopTarget = "main"
)

// MaxGraceDefault is a server's default ceiling on a job's policy.grace.
const MaxGraceDefault = 10 * time.Minute

// EffectiveGrace is an attempt's grace period: the job's own, capped at
// the server's ceiling (none when 0); a job without one gets the server's
// default, capped likewise.
func EffectiveGrace(job, def, ceiling time.Duration) time.Duration {
	g := job
	if g <= 0 {
		g = def
	}
	if ceiling > 0 && g > ceiling {
		g = ceiling
	}
	return g
}

// MinLogLimit is the smallest log limit: each quarter of it (a rolling tail
// segment) must hold the longest line the supervisor writes.
const MinLogLimit = 1 << 20

// EffectiveLogLimit is the log limit of an attempt: the job's own, capped
// by the ceiling, which is the pool's limit when it has one and the
// server's otherwise; a job without one gets the ceiling. 0 is no limit.
func EffectiveLogLimit(job, pool, server ByteSize) ByteSize {
	ceiling := server
	if pool > 0 {
		ceiling = pool
	}
	switch {
	case job <= 0:
		return ceiling
	case ceiling > 0 && job > ceiling:
		return ceiling
	}
	return job
}

// Checkpoint bounds the checkpoints a job keeps.
type Checkpoint struct {
	Keep int `json:"keep"`
}

// Health holds health-check deadlines; zero disables a check.
type Health struct {
	FirstProgress Duration `json:"first_progress,omitempty"`
	Stall         Duration `json:"stall,omitempty"`
}

// Priority is a named priority class. Higher Rank schedules first.
type Priority string

const (
	PriorityLow    Priority = "low"
	PriorityNormal Priority = "normal"
	PriorityHigh   Priority = "high"
	PriorityUrgent Priority = "urgent"
)

// Priorities lists the priority classes from lowest to highest.
func Priorities() []Priority {
	return []Priority{PriorityLow, PriorityNormal, PriorityHigh, PriorityUrgent}
}

// Rank orders priorities: low 0, normal 1, high 2, urgent 3; unknown -1.
func (p Priority) Rank() int {
	for i, q := range Priorities() {
		if p == q {
			return i
		}
	}
	return -1
}

// Duration is a time.Duration that reads and writes as text ("90s", "24h").
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return FormatDuration(time.Duration(d)) }

// FormatDuration writes d without zero-valued trailing units: 24h, 1h30m, 90s, 1.5s.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// ParseDuration accepts Go durations plus a day unit ("2d", "1d12h").
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if i := strings.Index(s, "d"); i > 0 {
		days, err := strconv.Atoi(s[:i])
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration; use forms like 90s, 30m, 24h or 2d", s)
		}
		rest := time.Duration(0)
		if s[i+1:] != "" {
			rest, err = time.ParseDuration(s[i+1:])
			if err != nil {
				return 0, fmt.Errorf("%q is not a duration; use forms like 90s, 30m, 24h or 2d", s)
			}
		}
		return time.Duration(days)*24*time.Hour + rest, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration; use forms like 90s, 30m, 24h or 2d", s)
	}
	return d, nil
}

// ByteSize is a number of bytes that reads and writes as text with binary or
// decimal units ("32GiB", "512MiB", "1G", "1024").
type ByteSize int64

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
	{"B", 1},
}

// ParseByteSize parses "32GiB", "1.5Gi", "500M", "1024" or "1024B".
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || t == "" || strings.ContainsAny(t, "eExXpP_") {
		return 0, fmt.Errorf("%q is not a size; use a number with a unit such as 512MiB, 32GiB or 1TiB", s)
	}
	if f < 0 {
		return 0, fmt.Errorf("%q is negative; sizes must be zero or more", s)
	}
	v := f * float64(mult)
	if v > float64(1<<62) {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return ByteSize(v), nil
}

func (b ByteSize) String() string {
	if b == 0 {
		return "0"
	}
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if int64(b)%u.mult == 0 {
			return strconv.FormatInt(int64(b)/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

func (b ByteSize) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

func (b *ByteSize) UnmarshalText(t []byte) error {
	v, err := ParseByteSize(string(t))
	if err != nil {
		return err
	}
	*b = v
	return nil
}
