package control

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/store"
	"trainyard/internal/tier"
)

// checkpointsDir is where a job's checkpoints live, under its outputs.
const checkpointsDir = executor.CheckpointsDir

// outputsPending is the directory, under Config.StateDir, of markers
// named JOB-ATTEMPT for attempts whose outputs are still to be recorded.
const outputsPending = "outputs-pending"

// pendingDir is the directory of the markers of owed outputs.
func (c *Controller) pendingDir() string {
	dir := c.cfg.StateDir
	if dir == "" {
		dir = filepath.Join(filepath.Dir(c.cfg.Logs.Root), "state")
	}
	return filepath.Join(dir, outputsPending)
}

// resumeOutputs records the outputs a previous run of the server left
// owed (see outputs).
func (c *Controller) resumeOutputs() {
	ents, _ := os.ReadDir(c.pendingDir())
	for _, e := range ents {
		js, as, ok := strings.Cut(e.Name(), "-")
		job, err1 := strconv.ParseInt(js, 10, 64)
		n, err2 := strconv.Atoi(as)
		if !ok || err1 != nil || err2 != nil {
			continue
		}
		c.log.Info("recording the outputs of an attempt that ended before the last stop", "job", job, "attempt", n)
		c.outputs(executor.Ref{JobID: job, Attempt: n})
	}
}

// outputsFirst reports whether the attempt end end is to be stored only
// after the attempt's outputs are recorded (recordThenEnd), and marks the
// attempt finishing if so. False: the job has no output directory, and
// end is stored at once.
func (c *Controller) outputsFirst(ctx context.Context, end store.Change) bool {
	ji, err := c.info(ctx, end.JobID)
	if err != nil || ji.outputDir == "" {
		return false
	}
	c.finishing[executor.Ref{JobID: end.JobID, Attempt: end.Attempt.Number}] = true
	return true
}

// recordThenEnd reads, off the loop, the outputs of the attempt whose end
// is end, and only then hands end, carrying their manifest, back to the
// loop (recorded) to be stored: the end and the manifest are stored in one
// write, so whoever sees the job terminal (or queued again) can list its
// outputs. Until then the attempt stays active in the store; a server that
// stops in between reattaches to it at its next start, the executor
// reports the end again, and the outputs are read again.
func (c *Controller) recordThenEnd(end store.Change) {
	ref := executor.Ref{JobID: end.JobID, Attempt: end.Attempt.Number}
	sealed := c.sealed[ref]
	delete(c.sealed, ref)
	var job *domain.Job // the job the end was decided on, whose immutable fields the lineage reads
	if j, ok := c.endJobs[ref]; ok {
		job = &j
	}
	parent := c.runCtx
	if parent == nil {
		parent = context.Background()
	}
	c.outputsWG.Add(1)
	go func() {
		defer c.outputsWG.Done()
		select {
		case c.outputSem <- struct{}{}:
		case <-parent.Done():
			return
		}
		rctx, cancel := context.WithTimeout(parent, outputsTimeout)
		err := c.recordOutputs(rctx, ref, job, &end, sealed)
		cancel()
		<-c.outputSem
		if err != nil {
			if parent.Err() != nil {
				return // stopped: the end is reported again after the restart
			}
			// The end is recorded all the same: a job must not stay
			// running because its outputs could not be read.
			c.log.Warn("record outputs", "attempt", ref.String(), "err", err)
		}
		select {
		case c.recorded <- end:
		case <-parent.Done():
		}
	}()
}

// applyEnds stores the attempt ends whose outputs are recorded; those the
// store could not take are tried again at the next turn of the loop.
func (c *Controller) applyEnds(ctx context.Context) {
	if len(c.ends) == 0 || !c.apply(ctx, c.ends, false) {
		return
	}
	for _, ch := range c.ends {
		delete(c.finishing, executor.Ref{JobID: ch.JobID, Attempt: ch.Attempt.Number})
	}
	c.ends = c.ends[:0]
}

// outputsTimeout bounds the recording of one attempt's outputs.
const outputsTimeout = 10 * time.Minute

// outputs records, off the loop, what an ended attempt left behind: its
// complete checkpoints (keeping the newest checkpoint.keep), the manifest
// of the output directory with the lineage that produced it, and, for a
// job that succeeded, makes its outputs read-only. It serves attempts
// whose end is already stored (one that never launched, and markers a
// previous server left); an attempt that ran goes through recordThenEnd.
func (c *Controller) outputs(ref executor.Ref) {
	// A marker says the work is owed, so a server that stops before it is
	// done does it after its restart (recover).
	dir := c.pendingDir()
	pending := filepath.Join(dir, strconv.FormatInt(ref.JobID, 10)+"-"+strconv.Itoa(ref.Attempt))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.log.Warn("mark outputs to record", "attempt", ref.String(), "err", err)
	} else if err := os.WriteFile(pending, nil, 0o644); err != nil {
		c.log.Warn("mark outputs to record", "attempt", ref.String(), "err", err)
	}
	c.outputsWG.Add(1)
	go func() {
		defer c.outputsWG.Done()
		c.outputSem <- struct{}{}
		defer func() { <-c.outputSem }()
		parent := c.runCtx
		if parent == nil {
			parent = context.Background()
		}
		ctx, cancel := context.WithTimeout(parent, outputsTimeout)
		defer cancel()
		if err := c.recordOutputs(ctx, ref, nil, nil, nil); err != nil {
			c.log.Warn("record outputs", "attempt", ref.String(), "err", err)
			if ctx.Err() != nil {
				return // stopped: the marker stays for the next start
			}
		}
		_ = os.Remove(pending)
	}()
}

// recordOutputs records the outputs of the attempt ref. known is its job
// with at least its immutable fields right (knownJob); nil: it is read
// here. end is the attempt's end when it is not stored yet
// (recordThenEnd), which then carries the manifest to be stored with it
// (store.Change.Manifest); nil: the end is stored, the job is read, and
// the manifest is recorded here. sealed is what the executor's agent
// recorded of them (OutputsSealed); nil: they are read here, through the
// executor.
func (c *Controller) recordOutputs(ctx context.Context, ref executor.Ref, known *domain.Job, end *store.Change, sealed *executor.SealedOutputs) error {
	var job domain.Job
	if known != nil && end != nil { // the job's state, which may be stale in known, comes from end
		job = *known
	} else {
		var err error
		if job, err = c.cfg.Store.GetJob(ctx, ref.JobID); err != nil {
			return err
		}
	}
	if job.OutputDir == "" {
		return nil
	}
	atts, err := c.cfg.Store.ListAttempts(ctx, ref.JobID)
	if err != nil {
		return err
	}
	var att domain.Attempt
	for _, a := range atts {
		if a.Number == ref.Attempt {
			att = a
		}
	}
	lin := domain.Lineage{JobID: job.ID, Attempt: ref.Attempt, Name: job.Name, Project: job.Project, Submitter: job.Submitter,
		SpecHash: job.SpecHash, Inputs: job.Spec.Inputs, Env: job.Spec.Env, StartedAt: att.StartedAt, FinishedAt: att.FinishedAt,
		State: string(att.State)}
	succeeded := job.State == domain.JobSucceeded
	if end != nil {
		lin.FinishedAt, lin.State = end.At, string(end.Attempt.To)
		succeeded = end.To() == domain.JobSucceeded
	}
	lin.ResumedFrom = job.Spec.Resume // resumefrom.go
	c.lineageExtras(ctx, job, &lin)
	// Read through the executor: it owns the job's files, and below the
	// output directory everything is the job's (see executor.Outputs).
	o, err := c.cfg.Executor.Outputs(ctx, job.OutputDir)
	var files []domain.ArtifactFile
	switch {
	case errors.Is(err, fs.ErrNotExist): // removed: no files, no checkpoints
		c.reconcileCheckpoints(ctx, nil, job, ref.Attempt)
	case err != nil:
		return err
	default:
		defer o.Close()
		c.reconcileCheckpoints(ctx, o, job, ref.Attempt) // checkpoints.go
		c.copyCheckpoints(ctx, o, job, ref.Attempt)
		if sealed == nil || succeeded && !sealed.ReadOnly {
			// No agent sealed them: sealed here, so that a recorded
			// manifest always describes outputs that can no longer change.
			s, err := executor.Seal(ctx, o, succeeded)
			if err != nil {
				return err
			}
			sealed = &s
		}
		files = sealed.Files
	}
	m := domain.Manifest{JobID: job.ID, Attempt: ref.Attempt, At: c.cfg.Clock.Now(), Files: files, Lineage: lin}
	if end != nil {
		end.Manifest = &m // stored with the end
		return nil
	}
	return c.cfg.Store.RecordManifest(ctx, m)
}

// lineageExtras adds what other registries know of the job to its lineage
// (environment digest, code package, re-run origin).
func (c *Controller) lineageExtras(ctx context.Context, job domain.Job, lin *domain.Lineage) {
	if job.Code != nil {
		lin.Code, lin.GitCommit, lin.GitDirty = job.Code.SHA256, job.Code.Commit, job.Code.Dirty
	}
	lin.RerunOf = job.RerunOf
	if name, version, err := domain.ParseEnvRef(lin.Env); err == nil {
		if env, err := c.envs.get(ctx, c.cfg.Store, name, version); err == nil {
			lin.Env = env.Name + "@" + strconv.Itoa(env.Version)
			lin.EnvDigest = env.Digest
		}
	}
}

// copyCheckpoints copies the kept checkpoints the attempt wrote to the
// object store, when the server is configured to (CopyCheckpoints), and
// records each copy once it is read back intact (tier.go).
func (c *Controller) copyCheckpoints(ctx context.Context, o executor.Outputs, job domain.Job, attempt int) {
	if !c.cfg.CopyCheckpoints || c.cfg.Blobs == nil {
		return
	}
	recs, err := c.cfg.Store.ListCheckpoints(ctx, job.ID, false)
	if err != nil {
		return
	}
	for _, r := range recs {
		if r.Attempt != attempt || r.OnObject() || !r.OnLocal() {
			continue
		}
		c.copyToObject(ctx, o, r)
	}
}

// CheckpointKey is where a checkpoint's file rel is copied in the object
// store.
func CheckpointKey(jobID int64, name, rel string) string { return tier.Key(jobID, name, rel) }
