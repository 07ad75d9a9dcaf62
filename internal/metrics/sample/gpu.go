package sample

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// GPUStat is one GPU's reading.
type GPUStat struct {
	Index int
	// Utilization is the percentage of time a kernel ran (0–100); NaN when
	// the GPU does not report it.
	Utilization float64
	// MemoryUsed and MemoryTotal are in bytes; 0 when not reported.
	MemoryUsed  int64
	MemoryTotal int64
	// Temperature is in degrees Celsius; NaN when not reported.
	Temperature float64
}

// GPUReader reads the statistics of every GPU on this machine.
type GPUReader interface {
	ReadGPUs(ctx context.Context) ([]GPUStat, error)
}

// NvidiaSMIQuery is the nvidia-smi invocation NvidiaSMI runs.
var NvidiaSMIQuery = []string{"--query-gpu=index,utilization.gpu,memory.used,memory.total,temperature.gpu", "--format=csv,noheader,nounits"}

// NvidiaSMI reads GPUs with the nvidia-smi tool.
type NvidiaSMI struct {
	// Path is the nvidia-smi executable.
	Path string
	// Timeout bounds one invocation (default 10s): a wedged driver must not
	// stall sampling.
	Timeout time.Duration
}

// FindNvidiaSMI returns a reader for the nvidia-smi on PATH, or nil when
// there is none (no NVIDIA GPUs to read).
func FindNvidiaSMI() GPUReader {
	p, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return nil
	}
	return NvidiaSMI{Path: p}
}

// ReadGPUs runs nvidia-smi once and parses its CSV.
func (n NvidiaSMI) ReadGPUs(ctx context.Context) ([]GPUStat, error) {
	timeout := n.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, n.Path, NvidiaSMIQuery...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(string(out))
		}
		return nil, fmt.Errorf("run %s: %w: %s", n.Path, err, msg)
	}
	return ParseNvidiaSMI(out)
}

// ParseNvidiaSMI parses the output of nvidia-smi with NvidiaSMIQuery: one
// line per GPU, "index, utilization %, memory used MiB, memory total MiB,
// temperature °C". Fields the GPU does not support ("[N/A]", "[Not
// Supported]") read as NaN (utilisation, temperature) or 0 (memory). A line
// without a numeric index is an error naming the line.
func ParseNvidiaSMI(out []byte) ([]GPUStat, error) {
	var stats []GPUStat
	var errs []error
	for n, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Split(line, ",")
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		if len(f) != 5 {
			errs = append(errs, fmt.Errorf("nvidia-smi line %d: want 5 comma-separated fields, got %d: %q", n+1, len(f), line))
			continue
		}
		idx, err := strconv.Atoi(f[0])
		if err != nil || idx < 0 {
			errs = append(errs, fmt.Errorf("nvidia-smi line %d: GPU index %q is not a number", n+1, f[0]))
			continue
		}
		mib := func(s string) int64 {
			v := number(s)
			if math.IsNaN(v) {
				return 0
			}
			return int64(v * (1 << 20))
		}
		stats = append(stats, GPUStat{Index: idx, Utilization: number(f[1]),
			MemoryUsed: mib(f[2]), MemoryTotal: mib(f[3]), Temperature: number(f[4])})
	}
	return stats, errors.Join(errs...)
}

// number parses a field, NaN for "[N/A]" and the like.
func number(s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 {
		return math.NaN()
	}
	return v
}
