// Package scheduler decides which queued jobs start now and where, and why the
// others wait. It is a pure function of its input: Schedule performs no I/O, reads
// no clock, starts no goroutines, and returns the same plan for the same
// snapshot whatever the order of the snapshot's slices.
package scheduler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"trainyard/internal/domain"
)

// Snapshot is the state the scheduler decides on.
type Snapshot struct {
	Now     time.Time    // cycle time, supplied by the caller
	Nodes   []Node       // what the executor offers
	Pending []Pending    // queued jobs
	Running []Allocation // resources held by starting and running attempts
}

// Node is one machine's capacity.
type Node struct {
	Name   string
	CPUs   float64
	Memory domain.ByteSize
	GPUs   []int // GPU indices
}

// Pending is a queued job.
type Pending struct {
	JobID       int64
	Priority    domain.Priority
	SubmittedAt time.Time
	Resources   domain.Resources
	NotBefore   time.Time // retry backoff: not to start before this time
}

// Allocation is what one active attempt holds on one node.
type Allocation struct {
	JobID     int64
	Node      string
	Resources domain.Resources
	GPUs      []int
}

// Plan is the scheduler's decision.
type Plan struct {
	Start   []Placement // in the order they were decided
	Waiting []Waiting   // every pending job not started, with why
}

// Placement starts one job on one node with specific GPUs.
type Placement struct {
	JobID int64
	Node  string
	GPUs  []int
}

// Waiting says why one job stays queued.
type Waiting struct {
	JobID   int64
	Reason  domain.Reason
	Message string
}

// Order is the queue order: higher priority first, then earlier submit, then
// lower id — a total order, so equal inputs never depend on slice order.
func Order(a, b Pending) int {
	if c := cmp.Compare(b.Priority.Rank(), a.Priority.Rank()); c != 0 {
		return c
	}
	if c := a.SubmittedAt.Compare(b.SubmittedAt); c != 0 {
		return c
	}
	return cmp.Compare(a.JobID, b.JobID)
}

// free is the unallocated capacity of one node during a cycle.
type free struct {
	name   string
	total  Node
	cpus   float64
	memory domain.ByteSize
	gpus   []int // free GPU indices, ascending
}

// Schedule decides which pending jobs start. Jobs are considered in Order. A job
// that cannot fit now reserves what it needs on the node closest to fitting
// it, so jobs behind it may only use capacity it would not need: a large job
// is never starved by a stream of small ones.
func Schedule(s Snapshot) Plan {
	nodes := make([]*free, 0, len(s.Nodes))
	byName := map[string]*free{}
	for _, n := range slices.SortedFunc(slices.Values(s.Nodes), func(a, b Node) int { return cmp.Compare(a.Name, b.Name) }) {
		f := &free{name: n.Name, total: n, cpus: n.CPUs, memory: n.Memory, gpus: slices.Sorted(slices.Values(n.GPUs))}
		nodes = append(nodes, f)
		byName[n.Name] = f
	}
	for _, a := range s.Running {
		f := byName[a.Node]
		if f == nil {
			continue // a node that left the inventory: nothing to subtract from
		}
		f.cpus -= a.Resources.CPUs
		f.memory -= a.Resources.Memory
		f.gpus = slices.DeleteFunc(f.gpus, func(g int) bool { return slices.Contains(a.GPUs, g) })
	}

	pending := slices.Clone(s.Pending)
	slices.SortFunc(pending, Order)

	var p Plan
	for _, j := range pending {
		if j.NotBefore.After(s.Now) {
			p.Waiting = append(p.Waiting, Waiting{JobID: j.JobID, Reason: domain.ReasonBackoff,
				Message: fmt.Sprintf("retry backoff: may start in %s", domain.FormatDuration(j.NotBefore.Sub(s.Now).Round(time.Second)))})
			continue
		}
		r := perNode(j.Resources)
		if msg, ok := neverFits(r, j.Resources.Nodes, nodes); !ok {
			p.Waiting = append(p.Waiting, Waiting{JobID: j.JobID, Reason: domain.ReasonNoCapacity, Message: msg})
			continue
		}
		chosen := place(r, j.Resources.Nodes, nodes)
		if chosen == nil {
			p.Waiting = append(p.Waiting, Waiting{JobID: j.JobID, Reason: domain.ReasonWaitingForCapacity, Message: shortage(r, nodes)})
			reserve(r, nodes)
			continue
		}
		for _, f := range chosen {
			gpus := slices.Clone(f.gpus[:r.GPUs])
			f.gpus = f.gpus[r.GPUs:]
			f.cpus -= r.CPUs
			f.memory -= r.Memory
			p.Start = append(p.Start, Placement{JobID: j.JobID, Node: f.name, GPUs: gpus})
		}
	}
	return p
}

// perNode is the request of one node of a (possibly multi-node) job.
func perNode(r domain.Resources) domain.Resources {
	r.Nodes = 1
	return r
}

func fits(r domain.Resources, f *free) bool {
	return r.CPUs <= f.cpus+1e-9 && r.Memory <= f.memory && r.GPUs <= len(f.gpus)
}

// place picks n distinct nodes that fit r now (first fit by node name), or nil.
func place(r domain.Resources, n int, nodes []*free) []*free {
	var chosen []*free
	for _, f := range nodes {
		if fits(r, f) {
			chosen = append(chosen, f)
			if len(chosen) == n {
				return chosen
			}
		}
	}
	return nil
}

// neverFits reports why r can never be placed on n nodes of this inventory.
func neverFits(r domain.Resources, n int, nodes []*free) (string, bool) {
	if n < 1 {
		n = 1
	}
	if n > len(nodes) {
		return fmt.Sprintf("requests %d nodes; the inventory has %d", n, len(nodes)), false
	}
	capable := 0
	var maxCPU float64
	var maxMem domain.ByteSize
	maxGPU := 0
	for _, f := range nodes {
		maxCPU, maxMem, maxGPU = max(maxCPU, f.total.CPUs), max(maxMem, f.total.Memory), max(maxGPU, len(f.total.GPUs))
		if r.CPUs <= f.total.CPUs+1e-9 && r.Memory <= f.total.Memory && r.GPUs <= len(f.total.GPUs) {
			capable++
		}
	}
	if capable >= n {
		return "", true
	}
	var over []string
	if r.GPUs > maxGPU {
		over = append(over, fmt.Sprintf("%d GPUs (largest node has %d)", r.GPUs, maxGPU))
	}
	if r.CPUs > maxCPU+1e-9 {
		over = append(over, fmt.Sprintf("%s CPUs (largest node has %s)", fmtCPU(r.CPUs), fmtCPU(maxCPU)))
	}
	if r.Memory > maxMem {
		over = append(over, fmt.Sprintf("%s memory (largest node has %s)", r.Memory, maxMem))
	}
	if len(over) == 0 {
		return fmt.Sprintf("requests %d nodes that each fit its request; only %d do", n, capable), false
	}
	return "requests " + strings.Join(over, ", ") + "; lower the request or submit to a larger pool", false
}

// shortage describes what is missing on the node closest to fitting r.
func shortage(r domain.Resources, nodes []*free) string {
	best := closest(r, nodes)
	if best == nil {
		return "no node is available"
	}
	return fmt.Sprintf("needs %s; free on %s: %s CPUs of %s, %s memory of %s, %d GPUs of %d",
		describe(r), best.name,
		fmtCPU(max(best.cpus, 0)), fmtCPU(best.total.CPUs),
		max(best.memory, 0), best.total.Memory,
		len(best.gpus), len(best.total.GPUs))
}

// closest is the node with the smallest shortfall for r (ties: first by name).
func closest(r domain.Resources, nodes []*free) *free {
	var best *free
	bestScore := 0.0
	for _, f := range nodes {
		if r.CPUs > f.total.CPUs+1e-9 || r.Memory > f.total.Memory || r.GPUs > len(f.total.GPUs) {
			continue
		}
		score := 0.0
		if f.total.CPUs > 0 {
			score += max(r.CPUs-f.cpus, 0) / f.total.CPUs
		}
		if f.total.Memory > 0 {
			score += float64(max(r.Memory-f.memory, 0)) / float64(f.total.Memory)
		}
		if n := len(f.total.GPUs); n > 0 {
			score += float64(max(r.GPUs-len(f.gpus), 0)) / float64(n)
		}
		if best == nil || score < bestScore {
			best, bestScore = f, score
		}
	}
	return best
}

// reserve holds back, on the node closest to fitting r, the capacity r would
// use, so that jobs behind it in the queue cannot take it.
func reserve(r domain.Resources, nodes []*free) {
	f := closest(r, nodes)
	if f == nil {
		return
	}
	f.cpus -= r.CPUs
	f.memory -= r.Memory
	f.gpus = f.gpus[min(r.GPUs, len(f.gpus)):]
}

func describe(r domain.Resources) string {
	s := fmt.Sprintf("%s CPUs, %s memory", fmtCPU(r.CPUs), r.Memory)
	if r.GPUs > 0 {
		s += fmt.Sprintf(", %d GPUs", r.GPUs)
	}
	return s
}

func fmtCPU(c float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", c), "0"), ".")
}
