package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/service"
)

// hardware compares what the config declares for this machine (the
// inventory block, the nodes of local pools) with what it has. Every local
// pool is a slice of this one machine, so "simulated" is said once, for the
// machine, on the inventory block: inventory: {simulated: true}.
type hardware struct {
	detected  executor.Node // this machine, detected
	simulated bool          // the config says declaring beyond it is intended
}

// beyond says what nodes declare beyond the detected hardware, e.g.
// "declares 4 GPUs, 16 CPUs; this machine has 0 GPUs, 2 CPUs"; "" when
// they fit. GPUs are device indices, so an index the machine lacks counts;
// CPUs and memory are summed, a pool's nodes being slices of this machine.
func (h hardware) beyond(nodes []domain.Node) string {
	var gpus int
	var cpus float64
	var mem domain.ByteSize
	var missingGPU bool
	for _, n := range nodes {
		gpus += len(n.GPUs)
		cpus += n.CPUs
		mem += n.Memory
		for _, g := range n.GPUs {
			if !slices.Contains(h.detected.GPUs, g) {
				missingGPU = true
			}
		}
	}
	var declared, has []string
	if missingGPU {
		declared = append(declared, fmt.Sprintf("%d GPUs (indices %s)", gpus, gpuIndices(nodes)))
		has = append(has, fmt.Sprintf("%d GPUs", len(h.detected.GPUs)))
	}
	if cpus > h.detected.CPUs {
		declared = append(declared, fmt.Sprintf("%g CPUs", cpus))
		has = append(has, fmt.Sprintf("%g CPUs", h.detected.CPUs))
	}
	if h.detected.Memory > 0 && mem > h.detected.Memory {
		declared = append(declared, mem.String()+" memory")
		has = append(has, h.detected.Memory.String()+" memory")
	}
	if len(declared) == 0 {
		return ""
	}
	return "declares " + strings.Join(declared, ", ") + "; this machine has " + strings.Join(has, ", ")
}

func gpuIndices(nodes []domain.Node) string {
	var out []string
	for _, n := range nodes {
		for _, g := range n.GPUs {
			out = append(out, fmt.Sprint(g))
		}
	}
	return strings.Join(out, ",")
}

// pool is api.Config.PoolHardware: local pools only (other executors' nodes
// are other machines).
func (h hardware) pool(p domain.Pool) (string, bool) {
	if p.Executor != "" && p.Executor != service.ExecutorLocal {
		return "", false
	}
	b := h.beyond(p.Nodes)
	return b, b != "" && h.simulated
}

// silence is how to say the excess is intended.
const silenceHardware = "if this is a test setup, set inventory: {simulated: true} in the server config (docs/operator.md)"

// summary is trainyard status's hardware line: "" when every local pool
// fits this machine.
func (h hardware) summary(pools []domain.Pool) string {
	var names []string
	for _, p := range pools {
		if b, _ := h.pool(p); b != "" {
			names = append(names, p.Name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	has := fmt.Sprintf("%d GPUs, %g CPUs, %s memory", len(h.detected.GPUs), h.detected.CPUs, h.detected.Memory)
	if h.simulated {
		return fmt.Sprintf("simulated: pool(s) %s declare more than this machine has (%s); jobs there get devices that do not exist", strings.Join(names, ", "), has)
	}
	return fmt.Sprintf("pool(s) %s declare more than this machine has (%s), so jobs there are placed on devices that do not exist; %s", strings.Join(names, ", "), has, silenceHardware)
}

// warn logs, at start, every declaration beyond this machine's hardware,
// unless the config says it is simulated.
func (h hardware) warn(log *slog.Logger, inventory *executor.Node, pools []domain.Pool) {
	if h.simulated {
		return
	}
	if inventory != nil {
		if b := h.beyond([]domain.Node{{CPUs: inventory.CPUs, Memory: inventory.Memory, GPUs: inventory.GPUs}}); b != "" {
			log.Warn("the server config's inventory exceeds this machine's hardware; "+silenceHardware, "inventory", b)
		}
	}
	for _, p := range pools {
		if b, _ := h.pool(p); b != "" {
			log.Warn("pool declares more than this machine's hardware: jobs placed there get GPUs, CPUs or memory that do not exist; "+silenceHardware, "pool", p.Name, "hardware", b)
		}
	}
}

// poolsNow lists the pools for status; an error leaves the line out.
func poolsNow(ctx context.Context, svc *service.Service) []domain.Pool {
	pools, err := svc.Pools.ListPools(ctx, system)
	if err != nil {
		return nil
	}
	return pools
}
