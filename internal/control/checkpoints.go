package control

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/store"
)

// Checkpoints reach the control loop as the executor's Checkpointed
// events: its in-job agent finds each checkpoint the job completes and
// records its digest. The loop registers them, keeps the newest
// checkpoint.keep, hands the next attempt the registered ones to resume
// from (the executor checks the digest of the one it picks), and sets one
// aside when an attempt fails right after resuming from it, so the next
// attempt falls back to the one before.

// checkpointed registers a checkpoint an attempt completed and prunes the
// job's oldest beyond its keep count.
func (c *Controller) checkpointed(ctx context.Context, ev executor.Event) {
	ck := ev.Checkpoint
	if ck == nil || ck.Name == "" {
		return
	}
	ji, err := c.info(ctx, ev.JobID) // what is read of the job below never changes
	if err != nil {
		c.log.Warn("record checkpoint", "attempt", ev.Ref.String(), "err", err)
		return
	}
	job := ji.job
	added, err := c.cfg.Store.RecordCheckpoint(ctx, ck.Record(ev.JobID, ev.Attempt))
	if err != nil {
		c.log.Warn("record checkpoint", "job", ev.JobID, "checkpoint", ck.Name, "err", err)
		return
	}
	if !added || job.OutputDir == "" {
		return // reported again (a reattach): nothing new
	}
	o, err := c.cfg.Executor.Outputs(ctx, job.OutputDir)
	if err != nil {
		c.log.Warn("prune checkpoints", "job", job.ID, "err", err)
		return
	}
	defer o.Close()
	c.pruneCheckpoints(ctx, o, job)
}

// pruneCheckpoints removes the job's oldest registered checkpoints beyond
// checkpoint.keep (0 keeps every one). Only registered checkpoints are
// ever removed: what else the job keeps in its checkpoint directory is its
// own.
func (c *Controller) pruneCheckpoints(ctx context.Context, o executor.Outputs, job domain.Job) {
	keep := job.Spec.Checkpoint.Keep
	if keep <= 0 {
		return
	}
	recs, err := c.cfg.Store.ListCheckpoints(ctx, job.ID, false)
	if err != nil || len(recs) <= keep {
		return
	}
	now := c.cfg.Clock.Now()
	for _, r := range recs[:len(recs)-keep] {
		rel := executor.CheckpointsDir + "/" + r.Name
		err := c.removeObjectCopy(ctx, r) // tier.go
		if err == nil {
			err = o.Remove(ctx, rel)
		}
		if err == nil {
			err = o.Remove(ctx, rel+domain.CheckpointMarker) // a file's marker beside it
		}
		if err != nil {
			c.log.Warn("remove old checkpoint", "job", job.ID, "checkpoint", r.Name, "err", err)
			continue
		}
		if err := c.cfg.Store.MarkCheckpointDeleted(ctx, job.ID, r.Name, now, nil); err != nil {
			c.log.Warn("record checkpoint removal", "job", job.ID, "checkpoint", r.Name, "err", err)
		}
	}
}

// resumeCandidates are the job's registered checkpoints an attempt may
// resume from, the one to prefer first: the most recently completed,
// except that one named like a best-so-far copy ("model_best.pth.tar")
// comes after the others (it is not where training stopped). Checkpoints
// set aside after a failed resume are left out.
func (c *Controller) resumeCandidates(ctx context.Context, jobID int64) ([]executor.ResumeFrom, error) {
	recs, err := c.cfg.Store.ListCheckpoints(ctx, jobID, false)
	if err != nil {
		return nil, fmt.Errorf("list the job's checkpoints: %w", err)
	}
	recs = slices.DeleteFunc(recs, func(r domain.CheckpointRecord) bool { return r.Suspect != "" })
	best := func(r domain.CheckpointRecord) int {
		if strings.Contains(strings.ToLower(r.Name), "best") {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(recs, func(a, b domain.CheckpointRecord) int {
		return cmp.Or(cmp.Compare(best(a), best(b)), b.At.Compare(a.At), strings.Compare(b.Name, a.Name))
	})
	out := make([]executor.ResumeFrom, 0, len(recs))
	for _, r := range recs {
		out = append(out, executor.ResumeFrom{Name: r.Name, SHA256: r.SHA256})
	}
	return out, nil
}

// resumed records which checkpoint a started attempt was handed, and
// returns words for its start event ("" when none).
func (c *Controller) resumed(ctx context.Context, ev executor.Event) string {
	words, err := store.RecordResume(ctx, c.cfg.Store, ev.JobID, ev.Attempt, ev.Resumed, ev.ResumeNote)
	if err != nil && !errors.Is(err, domain.ErrNotFound) {
		c.log.Warn("record resume", "attempt", ev.Ref.String(), "checkpoint", ev.Resumed, "err", err)
	}
	if ji, err := c.info(ctx, ev.JobID); err == nil {
		words = resumedFromWords(ji.spec, ev.Resumed, words) // another job's checkpoint: resumefrom.go
	}
	return words
}

// failedResume sets aside the checkpoint a failed attempt resumed from
// when it failed right after resuming: before it reported any progress
// and before it completed a checkpoint of its own. Then the checkpoint is
// the likely cause (it does not load), so the next attempt is handed the
// one before it. It returns words for the attempt's end ("" when nothing
// was set aside).
func (c *Controller) failedResume(ctx context.Context, jobID int64, attempt int, reason domain.Reason, exitCode *int, progressed bool) string {
	if progressed {
		return ""
	}
	recs, err := c.cfg.Store.ListCheckpoints(ctx, jobID, false)
	if err != nil {
		return ""
	}
	var from *domain.CheckpointRecord
	for i, r := range recs {
		if r.Attempt == attempt {
			return "" // it saved one of its own: it got past loading
		}
		if r.ResumedBy == attempt {
			from = &recs[i]
		}
	}
	if from == nil {
		return ""
	}
	how := string(reason)
	if exitCode != nil {
		how = fmt.Sprintf("exit code %d", *exitCode)
	}
	why := fmt.Sprintf("attempt %d failed right after resuming from it (%s, before any progress)", attempt, how)
	if from.Suspect == "" {
		if err := c.cfg.Store.MarkCheckpointSuspect(ctx, jobID, from.Name, why); err != nil && !errors.Is(err, domain.ErrNotFound) {
			c.log.Warn("set checkpoint aside", "job", jobID, "checkpoint", from.Name, "err", err)
			return ""
		}
	}
	next := "start afresh"
	if cands, err := c.resumeCandidates(ctx, jobID); err == nil && len(cands) > 0 {
		next = "resume from " + cands[0].Name
	}
	return fmt.Sprintf("checkpoint %s set aside: the attempt failed right after resuming from it; the next attempt will %s", from.Name, next)
}

// reconcileCheckpoints runs when an attempt's outputs are recorded: the
// checkpoints its agent did not report (an executor without one, or an
// attempt lost before its last scan) are registered now, through the
// executor's view of the outputs; registered ones the job removed itself
// are marked gone; the newest keep are kept.
func (c *Controller) reconcileCheckpoints(ctx context.Context, o executor.Outputs, job domain.Job, attempt int) {
	var found []executor.Checkpoint
	if o != nil {
		var err error
		if found, err = o.Checkpoints(ctx); err != nil {
			c.log.Warn("list checkpoints", "job", job.ID, "err", err)
			return
		}
	}
	known, err := c.cfg.Store.ListCheckpoints(ctx, job.ID, false)
	if err != nil {
		c.log.Warn("list checkpoints", "job", job.ID, "err", err)
		return
	}
	now := c.cfg.Clock.Now()
	for _, k := range known {
		if !k.OnLocal() {
			continue // moved to the object store: not expected on disk
		}
		if !slices.ContainsFunc(found, func(f executor.Checkpoint) bool { return f.Name == k.Name && f.Complete }) {
			_ = c.cfg.Store.MarkCheckpointDeleted(ctx, job.ID, k.Name, now, nil)
		}
	}
	for _, f := range found {
		if !f.Complete || slices.ContainsFunc(known, func(k domain.CheckpointRecord) bool { return k.Name == f.Name }) {
			continue
		}
		d, err := o.Digest(ctx, f.Name)
		if err != nil {
			continue // changed meanwhile, or no longer complete
		}
		if _, err := c.cfg.Store.RecordCheckpoint(ctx, d.Record(job.ID, attempt)); err != nil {
			c.log.Warn("record checkpoint", "job", job.ID, "checkpoint", f.Name, "err", err)
		}
	}
	if o != nil {
		c.pruneCheckpoints(ctx, o, job)
	}
}
