package control

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"time"

	"trainyard/internal/artifacts"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
)

// checkpointsDir is where a job's checkpoints live, under its outputs.
const checkpointsDir = "checkpoints"

// DefaultCheckpointKeep is how many complete checkpoints a job keeps when
// its spec says nothing.
const DefaultCheckpointKeep = 3

// outputs records, off the loop, what an ended attempt left behind: its
// complete checkpoints (keeping the newest checkpoint.keep), the manifest
// of the output directory with the lineage that produced it, and, for a
// job that succeeded, makes its outputs read-only.
func (c *Controller) outputs(ref executor.Ref) {
	c.outputsWG.Add(1)
	go func() {
		defer c.outputsWG.Done()
		c.outputSem <- struct{}{}
		defer func() { <-c.outputSem }()
		parent := c.runCtx
		if parent == nil {
			parent = context.Background()
		}
		ctx, cancel := context.WithTimeout(parent, 10*time.Minute)
		defer cancel()
		if err := c.recordOutputs(ctx, ref); err != nil {
			c.log.Warn("record outputs", "attempt", ref.String(), "err", err)
		}
	}()
}

func (c *Controller) recordOutputs(ctx context.Context, ref executor.Ref) error {
	job, err := c.cfg.Store.GetJob(ctx, ref.JobID)
	if err != nil || job.OutputDir == "" {
		return err
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
	c.registerCheckpoints(ctx, job, ref.Attempt)
	files, err := artifacts.Manifest(job.OutputDir, checkpointsDir)
	if err != nil {
		return err
	}
	lin := domain.Lineage{JobID: job.ID, Attempt: ref.Attempt, Name: job.Name, Project: job.Project, Submitter: job.Submitter,
		SpecHash: job.SpecHash, Inputs: job.Spec.Inputs, Env: job.Spec.Env, StartedAt: att.StartedAt, FinishedAt: att.FinishedAt,
		State: string(att.State)}
	c.lineageExtras(ctx, job, &lin)
	if err := c.cfg.Store.RecordManifest(ctx, domain.Manifest{JobID: job.ID, Attempt: ref.Attempt, At: c.cfg.Clock.Now(), Files: files, Lineage: lin}); err != nil {
		return err
	}
	if job.State == domain.JobSucceeded {
		return artifacts.MakeReadOnly(job.OutputDir)
	}
	return nil
}

// lineageExtras adds what other registries know of the job to its lineage
// (environment digest, code package, re-run origin).
func (c *Controller) lineageExtras(ctx context.Context, job domain.Job, lin *domain.Lineage) {}

// registerCheckpoints records the job's complete checkpoints and removes
// the oldest beyond its keep count.
func (c *Controller) registerCheckpoints(ctx context.Context, job domain.Job, attempt int) {
	dir := filepath.Join(job.OutputDir, checkpointsDir)
	found, err := artifacts.Checkpoints(dir)
	if err != nil {
		c.log.Warn("list checkpoints", "job", job.ID, "err", err)
		return
	}
	now := c.cfg.Clock.Now()
	// Registered checkpoints the job removed itself are gone.
	if known, err := c.cfg.Store.ListCheckpoints(ctx, job.ID, false); err == nil {
		for _, k := range known {
			if !slices.ContainsFunc(found, func(f artifacts.Found) bool { return f.Name == k.Name }) {
				_ = c.cfg.Store.MarkCheckpointDeleted(ctx, job.ID, k.Name, now)
			}
		}
	}
	var complete []artifacts.Found
	for _, f := range found {
		if !f.Complete {
			continue
		}
		complete = append(complete, f)
		if _, err := c.cfg.Store.RecordCheckpoint(ctx, domain.CheckpointRecord{JobID: job.ID, Attempt: attempt, Name: f.Name,
			Path: f.Path, Size: f.Size, Files: f.Files, At: f.ModTime.UTC()}); err != nil {
			c.log.Warn("record checkpoint", "job", job.ID, "checkpoint", f.Name, "err", err)
		}
	}
	keep := job.Spec.Checkpoint.Keep
	if keep <= 0 {
		keep = DefaultCheckpointKeep
	}
	if len(complete) <= keep {
		return
	}
	for _, f := range complete[:len(complete)-keep] {
		if err := os.RemoveAll(f.Path); err != nil {
			c.log.Warn("remove old checkpoint", "job", job.ID, "checkpoint", f.Name, "err", err)
			continue
		}
		if err := c.cfg.Store.MarkCheckpointDeleted(ctx, job.ID, f.Name, now); err != nil {
			c.log.Warn("record checkpoint removal", "job", job.ID, "checkpoint", f.Name, "err", err)
		}
	}
}

// resumeFrom is the newest complete checkpoint in dir, or "".
func resumeFrom(dir string) string {
	found, _ := artifacts.Checkpoints(dir)
	for _, f := range slices.Backward(found) {
		if f.Complete {
			return f.Path
		}
	}
	return ""
}
