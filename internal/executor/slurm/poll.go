package slurm

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/local"
)

// missingPolls is how many polls in a row must miss an attempt's job,
// with no outcome recorded, before it is reported lost: squeue may
// answer from a controller that has not yet seen a fresh submission.
const missingPolls = 3

// endWait bounds how long an attempt whose supervisor recorded a failure
// waits for its job to end in Slurm, whose state may say more (see
// observe).
const endWait = 10 * time.Second

// queued is one job as squeue shows it.
type queued struct {
	id, name, state, reason string
	submitted               time.Time // zero: unknown
}

// queueFormat asks squeue for id, name, state (long), reason and
// submission time (the reason last: it is free text).
const queueFormat = "%i|%j|%T|%V|%r"

// queue lists the jobs of this executor's user that Slurm still knows
// (every state: ended jobs stay for the cluster's MinJobAge), in one call.
func (e *Executor) queue(ctx context.Context) ([]queued, error) {
	out, err := e.command(ctx, "squeue", "--noheader", "--me", "--states=all", "--format="+queueFormat)
	if err != nil {
		return nil, fmt.Errorf("ask Slurm for its jobs (is slurmctld reachable?): %w", err)
	}
	return parseQueue(string(out)), nil
}

// parseQueue parses squeue's output in queueFormat.
func parseQueue(out string) []queued {
	var jobs []queued
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.SplitN(strings.TrimSpace(line), "|", 5)
		if len(f) != 5 {
			continue
		}
		// Slurm prints its local time, without a zone.
		at, _ := time.ParseInLocation("2006-01-02T15:04:05", f[3], time.Local)
		jobs = append(jobs, queued{id: f[0], name: f[1], state: f[2], submitted: at, reason: f[4]})
	}
	return jobs
}

// accounted asks accounting (sacct) how the jobs ids ended, in one call.
func (e *Executor) accounted(ctx context.Context, ids []string) ([]queued, error) {
	out, err := e.command(ctx, "sacct", "--noheader", "--parsable2", "--allocations",
		"--jobs="+strings.Join(ids, ","), "--format=JobID,JobName,State")
	if err != nil {
		return nil, fmt.Errorf("ask Slurm's accounting how jobs ended: %w", err)
	}
	return parseAccounting(string(out)), nil
}

// parseAccounting parses sacct's --parsable2 output of JobID, JobName
// and State ("CANCELLED by 1000": the state is its first word).
func parseAccounting(out string) []queued {
	var jobs []queued
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) != 3 {
			continue
		}
		state, _, _ := strings.Cut(f[2], " ")
		jobs = append(jobs, queued{id: f[0], name: f[1], state: state})
	}
	return jobs
}

// hasAccounting says whether the cluster keeps accounting (sacct can
// answer for jobs that have left squeue), from `scontrol show config`.
func (e *Executor) hasAccounting(ctx context.Context) (bool, error) {
	out, err := e.command(ctx, "scontrol", "show", "config")
	if err != nil {
		return false, fmt.Errorf("read Slurm's configuration: %w", err)
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if ok && strings.TrimSpace(k) == "AccountingStorageType" {
			v = strings.TrimSpace(v)
			return v != "" && v != "accounting_storage/none", nil
		}
	}
	return false, nil
}

// ended says whether a job in state has ended.
func ended(state string) bool {
	switch state {
	case "PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
		"RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD":
		return false
	}
	return true
}

// poll is the poller: one squeue per interval for every attempt, then
// each attempt's files.
func (e *Executor) poll() {
	defer close(e.done)
	t := time.NewTicker(e.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
		case <-e.wake:
		}
		e.pollOnce()
	}
}

// pollOnce asks squeue about every attempt being followed, then reads
// their directories.
func (e *Executor) pollOnce() {
	e.mu.Lock()
	var active []*attempt
	for _, a := range e.attempts {
		if !a.done && (a.jobID != "" || a.recorded) {
			active = append(active, a)
		}
	}
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jobs, err := e.queue(ctx)
	if err != nil {
		e.log.Warn("poll Slurm", "err", err)
		return
	}
	e.mu.Lock()
	e.last = jobs
	e.mu.Unlock()
	byID := make(map[string]queued, len(jobs))
	for _, j := range jobs {
		byID[j.id] = j
	}
	if e.accounting {
		// Jobs that have left squeue (older than the cluster's MinJobAge):
		// how they ended, from accounting, in one more call.
		var gone []string
		for _, a := range active {
			if _, ok := byID[a.jobID]; !ok && a.jobID != "" {
				gone = append(gone, a.jobID)
			}
		}
		if len(gone) > 0 {
			acct, err := e.accounted(ctx, gone)
			if err != nil {
				e.log.Warn("poll Slurm accounting", "err", err)
			}
			for _, j := range acct {
				byID[j.id] = j
			}
		}
	}
	// The files after squeue: a job squeue saw ended had its outcome
	// recorded, if any, before squeue answered. Those of a job it saw
	// pending hold nothing new yet: reading them would make each poll cost
	// the whole queue, not what changed.
	for _, a := range active {
		if j, ok := byID[a.jobID]; ok && j.state == "PENDING" && !a.started {
			e.mu.Lock()
			if !a.done {
				a.pending(j)
			}
			e.mu.Unlock()
			continue
		}
		e.observe(a, byID)
	}
}

// pending records what squeue says of the attempt's job while it has not
// ended: its state and, where Slurm gives one, why it waits; e.mu is held.
func (a *attempt) pending(j queued) {
	a.missing = 0
	a.state, a.why = j.state, ""
	if j.reason != "" && j.reason != "None" {
		a.why = "waiting in Slurm (job " + j.id + "): " + j.reason
	}
}

// observe reports what changed for one attempt: Started once its
// supervisor started the job's process, the progress and checkpoints
// it recorded since the last poll, and its end.
func (e *Executor) observe(a *attempt, byID map[string]queued) {
	// a.started is the poller's own: no lock needed to read it here.
	ev, started, recorded, err := local.Outcome(a.dir)
	var pid int
	var at time.Time
	var running bool
	var resumed, note string
	if !a.started {
		pid, at, running = local.StartedProcess(a.dir)
		resumed, note = local.Resumed(a.dir)
	}
	reports := a.reports.Read()
	e.mu.Lock()
	defer e.mu.Unlock()
	if a.done {
		return
	}
	if err != nil {
		e.log.Warn("read an attempt's outcome", "attempt", a.ref.String(), "err", err)
		return
	}
	if (running || !started.IsZero()) && !a.started {
		a.started = true
		if !running {
			pid, at = 1, started
		}
		a.startedAt = at
		e.emit(executor.Event{Ref: a.ref, Kind: executor.Started, At: at, PID: pid, Resumed: resumed, ResumeNote: note})
	}
	for _, r := range reports {
		e.emit(r)
	}
	if recorded {
		if ev.State != domain.AttemptSucceeded && !local.StopRequested(a.dir) {
			// The supervisor saw its job killed or signalled, and
			// Trainyard asked for no stop: Slurm may have done it (its
			// time limit, the memory cgroup, preemption, scancel). Its
			// job's end says which, once it has ended.
			j, ok := byID[a.jobID]
			if ok && !ended(j.state) {
				if a.endWait.IsZero() {
					a.endWait = time.Now()
				}
				if time.Since(a.endWait) < endWait {
					return
				}
			}
			if out, _ := outcomeOf(j, nil); ok && out != nil && j.state != "COMPLETED" && j.state != "FAILED" {
				ev.State, ev.Reason = out.State, out.Reason
				ev.Message = out.Message + "; its supervisor saw: " + ev.Message
				if err := local.RecordOutcome(a.dir, ev, a.startedAt); err != nil {
					e.log.Warn("record the outcome of an attempt", "attempt", a.ref.String(), "err", err)
				}
			}
		}
		if a.stopping != nil && ev.State != domain.AttemptCanceled && !ev.At.Before(a.stopAt) {
			// It ended after the stop, on a signal that reached the job
			// before its supervisor read the request (Slurm signals every
			// process of a job it cancels): the stop's end, as the
			// supervisor would have recorded it.
			ev.Message = stopMessage(*a.stopping) + "; its supervisor saw: " + ev.Message
			ev.State, ev.Reason = domain.AttemptCanceled, a.stopping.Reason
			if err := local.RecordOutcome(a.dir, ev, a.startedAt); err != nil {
				e.log.Warn("record the outcome of an attempt", "attempt", a.ref.String(), "err", err)
			}
		}
		if ev.Outputs != nil {
			e.emit(executor.Event{Ref: a.ref, Kind: executor.OutputsSealed, At: ev.At, Outputs: ev.Outputs})
		}
		ev.Ref, ev.Kind = a.ref, executor.Exited
		a.done = true
		e.emit(ev)
		return
	}
	j, ok := byID[a.jobID]
	if !ok {
		a.missing++
		if a.missing >= missingPolls {
			e.lost(a, fmt.Sprintf("its Slurm job %s is gone without an outcome recorded", a.jobID))
		}
		return
	}
	a.pending(j)
	out, ended := outcomeOf(j, a.stopping)
	if !ended {
		return
	}
	if out == nil {
		e.lost(a, fmt.Sprintf("its Slurm job %s ended %s without an outcome recorded", a.jobID, j.state))
		return
	}
	out.Ref, out.Kind, out.At = a.ref, executor.Exited, time.Now().UTC()
	if err := local.RecordOutcome(a.dir, *out, a.startedAt); err != nil {
		e.log.Warn("record the outcome of an attempt", "attempt", a.ref.String(), "err", err)
	}
	a.done = true
	e.emit(*out)
}

// lost reports the attempt lost; e.mu is held.
func (e *Executor) lost(a *attempt, msg string) {
	a.done = true
	e.emit(executor.Event{Ref: a.ref, Kind: executor.Lost, At: time.Now().UTC(),
		Message: msg + "; see " + filepath.Join(a.dir, outFile) + " and " + local.SupervisorLog(a.dir)})
}

// outcomeOf maps the state of a job whose supervisor recorded nothing to
// the attempt's outcome: ended is false while the job may still run;
// a nil outcome of an ended job means lost (its supervisor died, or never
// started).
//
//	PENDING, RUNNING, CONFIGURING, COMPLETING, SUSPENDED…  not ended
//	CANCELLED          canceled, the stop's reason (CanceledByUser when none)
//	TIMEOUT, DEADLINE  timed_out, Timeout
//	OUT_OF_MEMORY      failed, OOMKilled
//	NODE_FAIL, BOOT_FAIL  failed, NodeLost
//	PREEMPTED          canceled, Preempted
//	COMPLETED, FAILED  lost
func outcomeOf(j queued, stopping *executor.StopRequest) (out *executor.Event, ended bool) {
	switch j.state {
	case "CANCELLED":
		if stopping != nil {
			return &executor.Event{State: domain.AttemptCanceled, Reason: stopping.Reason, Message: stopMessage(*stopping)}, true
		}
		return &executor.Event{State: domain.AttemptCanceled, Reason: domain.ReasonCanceledByUser,
			Message: "its Slurm job " + j.id + " was cancelled outside Trainyard (scancel)"}, true
	case "TIMEOUT", "DEADLINE":
		return &executor.Event{State: domain.AttemptTimedOut, Reason: domain.ReasonTimeout,
			Message: "Slurm ended job " + j.id + " at its time limit"}, true
	case "OUT_OF_MEMORY":
		return &executor.Event{State: domain.AttemptFailed, Reason: domain.ReasonOOMKilled,
			Message: "Slurm killed job " + j.id + " for exceeding its memory (--mem)"}, true
	case "NODE_FAIL", "BOOT_FAIL":
		return &executor.Event{State: domain.AttemptFailed, Reason: domain.ReasonNodeLost,
			Message: "Slurm job " + j.id + " ended " + j.state + ": its node failed"}, true
	case "PREEMPTED":
		return &executor.Event{State: domain.AttemptCanceled, Reason: domain.ReasonPreempted,
			Message: "Slurm preempted job " + j.id}, true
	case "COMPLETED", "FAILED":
		return nil, true
	}
	return nil, false
}

func stopMessage(r executor.StopRequest) string {
	if r.Message != "" {
		return r.Message
	}
	return "stopped (" + string(r.Reason) + ")"
}

// Inventory lists the nodes of the executor's partition (every node when
// none is configured) that can take jobs, from one `scontrol show nodes`:
// drained, down, failed or unresponsive nodes are left out.
func (e *Executor) Inventory(ctx context.Context) (executor.Inventory, error) {
	out, err := e.command(ctx, "scontrol", "show", "nodes", "--oneliner")
	if err != nil {
		return executor.Inventory{}, fmt.Errorf("slurm inventory: %w", err)
	}
	return parseNodes(string(out), e.cfg.Partition), nil
}

// parseNodes parses `scontrol show nodes --oneliner`.
func parseNodes(out, partition string) executor.Inventory {
	var inv executor.Inventory
	for line := range strings.SplitSeq(out, "\n") {
		kv := fields(line)
		name := kv["NodeName"]
		if name == "" {
			continue
		}
		if partition != "" && !slices.Contains(strings.Split(kv["Partitions"], ","), partition) {
			continue
		}
		if !usable(kv["State"]) {
			continue
		}
		cpus, _ := strconv.ParseFloat(kv["CPUTot"], 64)
		mib, _ := strconv.ParseInt(kv["RealMemory"], 10, 64)
		n := executor.Node{Name: name, CPUs: cpus, Memory: domain.ByteSize(mib << 20)}
		for i := range gpuCount(kv["Gres"]) {
			n.GPUs = append(n.GPUs, i)
		}
		inv.Nodes = append(inv.Nodes, n)
	}
	slices.SortFunc(inv.Nodes, func(a, b executor.Node) int { return strings.Compare(a.Name, b.Name) })
	return inv
}

// fields splits a oneliner's "Key=value" words.
func fields(line string) map[string]string {
	kv := map[string]string{}
	for w := range strings.FieldsSeq(line) {
		if k, v, ok := strings.Cut(w, "="); ok {
			kv[k] = v
		}
	}
	return kv
}

// usable says whether a node in state (IDLE, MIXED+DRAIN, DOWN*…) takes
// jobs.
func usable(state string) bool {
	s := strings.ToUpper(state)
	if strings.HasSuffix(s, "*") { // not responding
		return false
	}
	for _, bad := range []string{"DRAIN", "DOWN", "FAIL", "NOT_RESPONDING", "FUTURE", "REBOOT", "POWER"} {
		if strings.Contains(s, bad) {
			return false
		}
	}
	return s != ""
}

// gpuCount counts the GPUs of a node's Gres: "gpu:4", "gpu:a100:4(S:0-1)",
// several comma-separated; "(null)" is none.
func gpuCount(gres string) int {
	n := 0
	for g := range strings.SplitSeq(gres, ",") {
		g, _, _ = strings.Cut(g, "(")
		parts := strings.Split(g, ":")
		if len(parts) < 2 || parts[0] != "gpu" {
			continue
		}
		if c, err := strconv.Atoi(parts[len(parts)-1]); err == nil {
			n += c
		}
	}
	return n
}
