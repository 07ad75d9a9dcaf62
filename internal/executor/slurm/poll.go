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
	return e.squeue(ctx, "--me", "--states=all")
}

// activeQueue lists the jobs of this executor's user that have not ended
// (squeue's default states), in one call: what a poll asks, so that what
// squeue prints and the poller parses follows the jobs in Slurm's queue,
// not those that ended within the cluster's MinJobAge. (slurmctld sends
// squeue every job it keeps either way: squeue filters.)
func (e *Executor) activeQueue(ctx context.Context) ([]queued, error) {
	return e.squeue(ctx, "--me")
}

// endedJobs asks squeue how the jobs ids ended (they have left the active
// list), in one call. Jobs older than the cluster's MinJobAge are not
// listed. squeue leaves unknown ids out of its answer, but refuses a
// request for a single one: that is an empty answer too.
func (e *Executor) endedJobs(ctx context.Context, ids []string) ([]queued, error) {
	jobs, err := e.squeue(ctx, "--states=all", "--jobs="+strings.Join(ids, ","))
	if err != nil && len(ids) == 1 && strings.Contains(err.Error(), "Invalid job id") {
		return nil, nil
	}
	return jobs, err
}

func (e *Executor) squeue(ctx context.Context, args ...string) ([]queued, error) {
	args = append([]string{"--noheader", "--format=" + queueFormat}, args...)
	out, err := e.command(ctx, "squeue", args...)
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

// squeueShare bounds the poller's load on slurmctld: after a poll whose
// squeue took d, the next waits at least squeueShare×d, so that squeue
// runs at most 1/(1+squeueShare) of the time. slurmctld packs every job
// it keeps for each call, whatever the filters, so a busy cluster (or a
// loaded controller) makes each call slower: the poller then asks less
// often instead of keeping slurmctld busy answering it.
const squeueShare = 4

// poll is the poller: one squeue per interval for every attempt, then
// each attempt's files. The interval stretches while squeue is slow
// (squeueShare); a poke (a stop, a relaunch of an ended attempt) polls
// at once.
func (e *Executor) poll() {
	defer close(e.done)
	t := time.NewTimer(e.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
		case <-e.wake:
		}
		took := e.pollOnce()
		t.Reset(pollWait(e.cfg.PollInterval, took))
	}
}

// maxStretch caps how far a slow squeue stretches the interval: an
// attempt's end is still seen within half a minute.
const maxStretch = 30 * time.Second

// pollWait is how long the poller waits after a poll whose squeue took
// took: the interval, or squeueShare times took if longer, up to
// maxStretch.
func pollWait(interval, took time.Duration) time.Duration {
	return max(interval, min(squeueShare*took, maxStretch))
}

// pollOnce asks squeue which of this user's jobs have not ended, then
// reads the directories of the attempts followed. Only for jobs that left
// that list without a successful outcome recorded does it ask how they
// ended (squeue, then accounting for jobs older than MinJobAge): one more
// call, and only when some job failed, was killed or vanished. It
// returns how long squeue took to list the active jobs.
func (e *Executor) pollOnce() time.Duration {
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
	asked := time.Now()
	jobs, err := e.activeQueue(ctx)
	took := time.Since(asked)
	if err != nil {
		e.log.Warn("poll Slurm", "err", err)
		return took
	}
	e.mu.Lock()
	e.last = jobs
	e.mu.Unlock()
	byID := make(map[string]queued, len(jobs))
	for _, j := range jobs {
		byID[j.id] = j
	}
	// The files after squeue: a job that left the active list had its
	// outcome recorded, if any, before squeue answered. Those of a job it
	// saw pending hold nothing new yet: reading them would make each poll
	// cost the whole queue, not what changed.
	reads := make(map[*attempt]attemptFiles)
	var gone []string
	for _, a := range active {
		if _, ok := byID[a.jobID]; ok {
			continue
		}
		f := readAttempt(a)
		reads[a] = f
		if a.jobID != "" && !(f.recorded && f.ev.State == domain.AttemptSucceeded) {
			gone = append(gone, a.jobID)
		}
	}
	if len(gone) > 0 {
		e.howEnded(ctx, gone, byID)
	}
	for _, a := range active {
		if j, ok := byID[a.jobID]; ok && j.state == "PENDING" && !a.started {
			e.mu.Lock()
			if !a.done {
				a.pending(j)
			}
			e.mu.Unlock()
			continue
		}
		f, ok := reads[a]
		if !ok {
			f = readAttempt(a)
		}
		e.observe(a, f, byID)
	}
	return took
}

// howEnded adds to byID how the jobs ids ended: from squeue while Slurm
// still lists them, from accounting (when the cluster keeps it) for those
// older than its MinJobAge. A job neither knows stays out of byID.
func (e *Executor) howEnded(ctx context.Context, ids []string, byID map[string]queued) {
	ended, err := e.endedJobs(ctx, ids)
	if err != nil {
		e.log.Warn("poll Slurm for ended jobs", "err", err)
	}
	for _, j := range ended {
		byID[j.id] = j
	}
	if !e.accounting {
		return
	}
	var older []string
	for _, id := range ids {
		if _, ok := byID[id]; !ok {
			older = append(older, id)
		}
	}
	if len(older) == 0 {
		return
	}
	acct, err := e.accounted(ctx, older)
	if err != nil {
		e.log.Warn("poll Slurm accounting", "err", err)
	}
	for _, j := range acct {
		byID[j.id] = j
	}
}

// attemptFiles is what one poll read of an attempt's directory.
type attemptFiles struct {
	ev       executor.Event // its outcome, when recorded
	started  time.Time      // when its program started, from the outcome
	recorded bool
	err      error
	pid      int       // its program, while it runs (before Started)
	at       time.Time // when that started
	running  bool
	resumed  string // the checkpoint it resumed from (before Started)
	note     string
	reports  []executor.Event // progress and checkpoints since the last read
}

// readAttempt reads what the attempt's supervisor recorded since the last
// poll. a.started is the poller's own: no lock is needed to read it.
func readAttempt(a *attempt) attemptFiles {
	var f attemptFiles
	f.ev, f.started, f.recorded, f.err = local.Outcome(a.dir)
	if !a.started {
		f.pid, f.at, f.running = local.StartedProcess(a.dir)
		f.resumed, f.note = local.Resumed(a.dir)
	}
	f.reports = a.reports.Read()
	return f
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
func (e *Executor) observe(a *attempt, f attemptFiles, byID map[string]queued) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if a.done {
		return
	}
	if f.err != nil {
		e.log.Warn("read an attempt's outcome", "attempt", a.ref.String(), "err", f.err)
		return
	}
	ev := f.ev
	if (f.running || !f.started.IsZero()) && !a.started {
		a.started = true
		pid, at := f.pid, f.at
		if !f.running {
			pid, at = 1, f.started
		}
		a.startedAt = at
		e.emit(executor.Event{Ref: a.ref, Kind: executor.Started, At: at, PID: pid, Resumed: f.resumed, ResumeNote: f.note})
	}
	for _, r := range f.reports {
		e.emit(r)
	}
	if f.recorded {
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
