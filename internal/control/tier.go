package control

import (
	"context"
	"errors"

	"trainyard/internal/blob"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/tier"
)

// Checkpoints on two tiers: the job's output tree (local) and the object
// store (Config.Blobs, with CopyCheckpoints). The loop copies each kept
// checkpoint there when its attempt ends and records the copy once it is
// read back intact; lifecycle policies (package service) may then remove
// the local copy. An attempt that resumes from a checkpoint whose local
// copy is gone gets it restored from the object store first, verified
// against its registered digest, into its own checkpoint directory.

// copyToObject copies one kept checkpoint to the object store and records
// the copy once verified.
func (c *Controller) copyToObject(ctx context.Context, o executor.Outputs, r domain.CheckpointRecord) {
	if err := tier.Copy(ctx, c.cfg.Blobs, o, r); err != nil {
		c.log.Warn("copy checkpoint to the object store", "job", r.JobID, "checkpoint", r.Name, "err", err)
		return
	}
	if err := c.cfg.Store.MarkCheckpointCopied(ctx, r.JobID, r.Name, r.SHA256, c.cfg.Clock.Now()); err != nil && !errors.Is(err, domain.ErrNotFound) {
		c.log.Warn("record checkpoint copy", "job", r.JobID, "checkpoint", r.Name, "err", err)
	}
}

// removeObjectCopy removes a checkpoint's object copy, if it has one
// (pruning beyond checkpoint.keep removes it from every tier).
func (c *Controller) removeObjectCopy(ctx context.Context, r domain.CheckpointRecord) error {
	if !r.OnObject() || c.cfg.Blobs == nil {
		return nil
	}
	return tier.Delete(ctx, c.cfg.Blobs, r.JobID, r.Name)
}

// restoreIfUnstarted is restoreForResume for an attempt reattached to
// (after a restart, or adopted from another replica) that never reported
// starting: its launch may never have happened, so it may still need its
// checkpoint. Nil for one that started: it was handed what it resumes
// from already.
func (c *Controller) restoreIfUnstarted(a domain.Attempt) func(context.Context, executor.Launch) {
	if a.State != domain.AttemptStarting {
		return nil
	}
	return c.restoreForResume
}

// restoreForResume runs before a new attempt launches: when the checkpoint
// it will be handed first has no local copy left, it is restored from the
// object store into the job's checkpoint directory. A restore that fails
// (the object store is unreachable, or its copy does not verify) is
// logged and the next candidate tried; the executor then skips what is
// missing and says why in the attempt's log.
func (c *Controller) restoreForResume(ctx context.Context, l executor.Launch) {
	if len(l.Resume) == 0 || l.OutputDir == "" {
		return
	}
	c.importResumeFrom(ctx, l) // another job's checkpoint: resumefrom.go
	recs, err := c.cfg.Store.ListCheckpoints(ctx, l.JobID, false)
	if err != nil {
		c.log.Warn("restore checkpoint", "attempt", l.Ref.String(), "err", err)
		return
	}
	byName := map[string]domain.CheckpointRecord{}
	for _, r := range recs {
		byName[r.Name] = r
	}
	var o executor.Outputs
	for _, cand := range l.Resume {
		r, ok := byName[cand.Name]
		if !ok {
			continue
		}
		if r.OnLocal() {
			break // the executor hands it as it is
		}
		if c.cfg.Blobs == nil {
			c.log.Warn("restore checkpoint: it is only in the object store, and this server has none configured", "job", r.JobID, "checkpoint", r.Name)
			continue
		}
		if o == nil {
			if o, err = c.cfg.Executor.Outputs(ctx, l.OutputDir); err != nil {
				c.log.Warn("restore checkpoint", "attempt", l.Ref.String(), "err", err)
				return
			}
			defer o.Close()
		}
		err := tier.Restore(ctx, c.cfg.Blobs, o, r)
		if err != nil {
			if errors.Is(err, blob.ErrNotFound) {
				err = errors.New("the object store no longer holds it")
			}
			c.log.Warn("restore checkpoint from the object store", "attempt", l.Ref.String(), "checkpoint", r.Name, "err", err)
			continue
		}
		if err := c.cfg.Store.MarkCheckpointRestored(ctx, r.JobID, r.Name); err != nil {
			c.log.Warn("record checkpoint restore", "job", r.JobID, "checkpoint", r.Name, "err", err)
		}
		c.log.Info("restored checkpoint from the object store", "attempt", l.Ref.String(), "checkpoint", r.Name)
		return
	}
}
