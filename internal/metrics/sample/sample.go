// Package sample measures what running attempts use right now: CPU seconds
// and resident memory of each attempt's process tree (from /proc, or from the
// attempt's memory cgroup when it has one), and the utilisation, memory and
// temperature of the GPUs assigned to it (through a GPUReader, normally
// nvidia-smi).
//
// A Sampler reads every running attempt at a fixed interval and keeps only the
// latest sample of each; readers (the metrics collector) take a copy with
// Latest. Samples of attempts that are no longer running disappear at the
// next round. It also keeps a bounded history of each attempt's readings
// (History, history.go), for charts.
package sample

import (
	"context"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultInterval is how often a Sampler reads its targets when
// Config.Interval is zero.
const DefaultInterval = 15 * time.Second

// Target is one running attempt to sample.
type Target struct {
	JobID   int64
	Attempt int
	Project string
	Pool    string
	// GPUs are the attempt's assigned GPU indices (nvidia-smi's index).
	GPUs []int
	// Dir is the attempt's directory, where the local executor's supervisor
	// writes child.pid (the user's process) and shim.pid (itself).
	Dir string
	// MemoryLimit is the attempt's memory request in bytes (0: none).
	MemoryLimit int64
}

// Sample is the latest measurement of one attempt.
type Sample struct {
	Target
	At time.Time
	// OK is false when no process of the attempt could be read (it has not
	// started yet, or just ended); the resource fields are then zero.
	OK bool
	// CPUSeconds is the user+system CPU time of the attempt's processes so
	// far, reaped descendants included.
	CPUSeconds float64
	// RSSBytes is the resident memory of the attempt: the sum over its live
	// processes, or the cgroup's current usage when Source is "cgroup".
	RSSBytes int64
	// Processes is how many live processes the attempt has.
	Processes int
	// Source says where CPU and memory came from: "proc" or "cgroup".
	Source string
	// GPUs holds one reading per assigned GPU that the reader reported.
	GPUs []GPUStat
	// GPUSeconds is how much of its GPUs the attempt used since this
	// sampler first read them: each interval between two readings counts
	// at their mean utilisation, summed over its GPUs (2 GPUs busy half the
	// time for 10 s: 10). Intervals longer than two rounds count as two.
	GPUSeconds float64
}

// Config configures a Sampler.
type Config struct {
	// Interval between rounds (default DefaultInterval).
	Interval time.Duration
	// Targets returns the attempts running now. Required.
	Targets func(ctx context.Context) []Target
	// GPU reads GPU statistics; nil when this machine has no GPUs to read.
	GPU GPUReader
	// ProcRoot is the proc file system (default /proc); CgroupRoot is where
	// cgroup hierarchies are mounted (default /sys/fs/cgroup). Tests point
	// them at fixtures.
	ProcRoot   string
	CgroupRoot string
	Logger     *slog.Logger
	// Now returns the current time (default time.Now).
	Now func() time.Time
	// HistoryLen is how many readings of each attempt History keeps
	// (0: DefaultHistoryLen; negative: none). HistoryGrace is how long
	// those of an ended attempt are kept (0: DefaultHistoryGrace), and
	// HistoryEnded how many ended attempts' are kept at most (0:
	// DefaultHistoryEnded; negative: none once ended).
	HistoryLen   int
	HistoryGrace time.Duration
	HistoryEnded int
}

// Sampler samples running attempts at an interval.
type Sampler struct {
	cfg Config
	mu  sync.Mutex
	// latest holds the last round's samples, by (job, attempt).
	latest []Sample
	gpuErr string // last GPU reader error logged, to log each distinct one once
	// hist holds each attempt's recent readings (history.go); round
	// counts the rounds, to tell the attempts a round did not see.
	hist  map[attemptKey]*ring
	round uint64
}

// New returns a Sampler; call Run to start it.
func New(cfg Config) *Sampler {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.CgroupRoot == "" {
		cfg.CgroupRoot = "/sys/fs/cgroup"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.HistoryLen == 0 {
		cfg.HistoryLen = DefaultHistoryLen
	}
	if cfg.HistoryGrace <= 0 {
		cfg.HistoryGrace = DefaultHistoryGrace
	}
	switch {
	case cfg.HistoryEnded == 0:
		cfg.HistoryEnded = DefaultHistoryEnded
	case cfg.HistoryEnded < 0:
		cfg.HistoryEnded = 0
	}
	if cfg.Targets == nil {
		cfg.Targets = func(context.Context) []Target { return nil }
	}
	return &Sampler{cfg: cfg}
}

// Interval is the time between two rounds.
func (s *Sampler) Interval() time.Duration { return s.cfg.Interval }

// Run samples at once and then every Interval until ctx ends.
func (s *Sampler) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.SampleOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// SampleOnce runs one round: it reads every target and the GPUs, replaces
// the latest samples and adds the readable ones to the history. Safe for concurrent use.
func (s *Sampler) SampleOnce(ctx context.Context) {
	targets := s.cfg.Targets(ctx)
	var gpus map[int]GPUStat
	if s.cfg.GPU != nil && slices.ContainsFunc(targets, func(t Target) bool { return len(t.GPUs) > 0 }) {
		stats, err := s.cfg.GPU.ReadGPUs(ctx)
		s.noteGPUError(err)
		gpus = make(map[int]GPUStat, len(stats))
		for _, g := range stats {
			gpus[g.Index] = g
		}
	}
	var procs *procTable
	if len(targets) > 0 {
		procs = readProcTable(s.cfg.ProcRoot)
	}
	s.mu.Lock()
	prev := make(map[[2]int64]*Sample, len(s.latest))
	for i := range s.latest {
		p := &s.latest[i]
		prev[[2]int64{p.JobID, int64(p.Attempt)}] = p
	}
	s.mu.Unlock()
	out := make([]Sample, 0, len(targets))
	for _, t := range targets {
		smp := Sample{Target: t, At: s.cfg.Now()}
		if u, ok := s.readAttempt(procs, t.Dir); ok {
			smp.OK, smp.CPUSeconds, smp.RSSBytes, smp.Processes, smp.Source = true, u.cpu, u.rss, u.procs, u.source
		}
		for _, idx := range t.GPUs {
			if g, ok := gpus[idx]; ok {
				smp.GPUs = append(smp.GPUs, g)
			}
		}
		if p, ok := prev[[2]int64{t.JobID, int64(t.Attempt)}]; ok {
			smp.GPUSeconds = p.GPUSeconds + gpuSecondsBetween(*p, smp, 2*s.cfg.Interval)
		}
		out = append(out, smp)
	}
	s.mu.Lock()
	s.latest = out
	s.recordHistory(out, s.cfg.Now())
	s.mu.Unlock()
}

// gpuSecondsBetween is what an attempt used of its GPUs between two of its
// samples: for each GPU read in both, its mean utilisation times the time
// between them, at most limit. A GPU without a reading in either counts
// nothing.
func gpuSecondsBetween(a, b Sample, limit time.Duration) float64 {
	d := min(b.At.Sub(a.At), limit).Seconds()
	if d <= 0 {
		return 0
	}
	var sum float64
	for _, g := range b.GPUs {
		for _, h := range a.GPUs {
			if h.Index == g.Index && !math.IsNaN(g.Utilization) && !math.IsNaN(h.Utilization) {
				sum += (g.Utilization + h.Utilization) / 200 * d
			}
		}
	}
	return sum
}

func (s *Sampler) noteGPUError(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg != "" && msg != s.gpuErr {
		s.cfg.Logger.Warn("read GPU statistics; GPU series are missing until it works", "err", err)
	}
	s.gpuErr = msg
}

// Latest returns a copy of the last round's samples.
func (s *Sampler) Latest() []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.latest)
}

type usage struct {
	cpu    float64
	rss    int64
	procs  int
	source string
}

// sharedSupervisor reports whether the attempt's claim (shim.pid) names a
// supervisor shared by many attempts: a line "shared".
func sharedSupervisor(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "shim.pid"))
	return err == nil && slices.Contains(strings.Split(string(b), "\n"), "shared")
}

// readAttempt measures the attempt whose supervisor writes into dir: its
// cgroup when the user's process is in a Trainyard memory group, else the
// process tree under the supervisor (the user's process, its descendants and
// orphans re-parented to the supervisor). Under a supervisor shared by many
// attempts (its claim says "shared"), whose children are every attempt's,
// the tree under the user's process only.
func (s *Sampler) readAttempt(procs *procTable, dir string) (usage, bool) {
	child, ok := readPIDFile(dir, "child.pid")
	if !ok {
		return usage{}, false
	}
	roots := []int{child}
	if shim, ok := readPIDFile(dir, "shim.pid"); ok && procs.alive(shim) && !sharedSupervisor(dir) {
		roots = procs.childrenOf(shim)
	}
	u := procs.tree(roots)
	if u.procs == 0 {
		return usage{}, false
	}
	u.source = "proc"
	if cg, ok := readCgroup(s.cfg.ProcRoot, s.cfg.CgroupRoot, child); ok {
		u.rss, u.source = cg.memory, "cgroup"
		if cg.cpu > 0 {
			u.cpu = cg.cpu
		}
	}
	return u, true
}
