package local

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
)

// Inventory reports this machine as one node: the configured inventory, or
// the detected one (cached after the first success).
func (e *Executor) Inventory(ctx context.Context) (executor.Inventory, error) {
	if e.cfg.Inventory != nil {
		return cloneInventory(*e.cfg.Inventory), nil
	}
	e.invMu.Lock()
	defer e.invMu.Unlock()
	if e.inv == nil {
		inv, err := e.detectInventory(ctx)
		if err != nil {
			return executor.Inventory{}, err
		}
		e.inv = &inv
	}
	return cloneInventory(*e.inv), nil
}

func cloneInventory(inv executor.Inventory) executor.Inventory {
	out := executor.Inventory{Nodes: make([]executor.Node, len(inv.Nodes))}
	for i, n := range inv.Nodes {
		n.GPUs = append([]int(nil), n.GPUs...)
		out.Nodes[i] = n
	}
	return out
}

func (e *Executor) detectInventory(ctx context.Context) (executor.Inventory, error) {
	n, err := Detect(ctx, e.log)
	if err != nil {
		return executor.Inventory{}, err
	}
	return executor.Inventory{Nodes: []executor.Node{n}}, nil
}

// Detect reports this machine's hardware: hostname, CPUs, memory
// (/proc/meminfo) and GPUs (nvidia-smi, when installed), whatever the
// executor is configured to offer. A failing nvidia-smi is logged and
// counts as no GPUs.
func Detect(ctx context.Context, log *slog.Logger) (executor.Node, error) {
	host, err := os.Hostname()
	if err != nil {
		return executor.Node{}, fmt.Errorf("detect inventory: hostname: %w", err)
	}
	mem, err := memTotal("/proc/meminfo")
	if err != nil {
		return executor.Node{}, fmt.Errorf("detect inventory: %w", err)
	}
	gpus, err := detectGPUs(ctx)
	if err != nil {
		// A broken driver must not keep the CPUs idle: offer no GPUs and say why.
		log.Warn("no GPUs offered: nvidia-smi failed", "err", err)
	}
	return executor.Node{Name: host, CPUs: float64(runtime.NumCPU()), Memory: mem, GPUs: gpus}, nil
}

// memTotal reads MemTotal from a meminfo file.
func memTotal(path string) (domain.ByteSize, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("read memory size: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "MemTotal:       24684092 kB"
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("read memory size: bad MemTotal %q in %s", f[1], path)
			}
			return domain.ByteSize(kb * 1024), nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read memory size: %w", err)
	}
	return 0, fmt.Errorf("read memory size: no MemTotal in %s", path)
}

// detectGPUs lists GPU indices with nvidia-smi; none when it is not installed.
func detectGPUs(ctx context.Context) ([]int, error) {
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--query-gpu=index", "--format=csv,noheader").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
			return nil, fmt.Errorf("%s: %w: %s", path, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return parseGPUIndices(out)
}

func parseGPUIndices(out []byte) ([]int, error) {
	var gpus []int
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		i, err := strconv.Atoi(line)
		if err != nil || i < 0 {
			return nil, fmt.Errorf("nvidia-smi: unexpected GPU index %q", line)
		}
		gpus = append(gpus, i)
	}
	sort.Ints(gpus)
	return gpus, nil
}
