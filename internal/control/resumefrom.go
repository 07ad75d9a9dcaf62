package control

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/tier"
)

// A job whose spec names another job's checkpoint to start from (resume:
// rerun --resume) is handed it like one of its own: while the job has no
// checkpoint registered, its launch lists that checkpoint to resume from
// (withResumeFrom), and before the attempt starts the checkpoint is
// copied from the other job's outputs (or restored from the object
// store) into this job's checkpoint directory and registered as this
// job's (importResumeFrom), so that the executor verifies its digest and
// sets TRAINYARD_RESUME_FROM, the attempt's lineage records it, and
// pruning or removal of the other job's checkpoints never reaches it.

// withResumeFrom adds the spec's resume checkpoint to cands while job id
// has no checkpoint registered (removed ones count: it started before).
func (c *Controller) withResumeFrom(ctx context.Context, id int64, spec domain.Spec, cands []executor.ResumeFrom) ([]executor.ResumeFrom, error) {
	r := spec.Resume
	if r == nil {
		return cands, nil
	}
	own, err := c.cfg.Store.ListCheckpoints(ctx, id, true)
	if err != nil {
		return nil, fmt.Errorf("list the job's checkpoints: %w", err)
	}
	if len(own) > 0 {
		return cands, nil
	}
	sha := ""
	if src, err := c.sourceCheckpoint(ctx, r); err == nil {
		sha = src.SHA256
	}
	// Without its record (removed since), the executor finds nothing
	// under the name and says so in the attempt's log.
	return append(cands, executor.ResumeFrom{Name: r.Checkpoint, SHA256: sha}), nil
}

// sourceCheckpoint returns the registered checkpoint r names.
func (c *Controller) sourceCheckpoint(ctx context.Context, r *domain.ResumeFrom) (domain.CheckpointRecord, error) {
	recs, err := c.cfg.Store.ListCheckpoints(ctx, r.Job, false)
	if err != nil {
		return domain.CheckpointRecord{}, fmt.Errorf("list the checkpoints of job %d: %w", r.Job, err)
	}
	for _, rec := range recs {
		if rec.Name == r.Checkpoint {
			return rec, nil
		}
	}
	return domain.CheckpointRecord{}, fmt.Errorf("job %d has no checkpoint %s any more: %w", r.Job, r.Checkpoint, domain.ErrNotFound)
}

// importResumeFrom runs before a launch (restoreForResume): when the
// attempt is to resume first from the spec's resume checkpoint and the
// job has none of its own, it copies that checkpoint into the job's
// checkpoint directory and registers it as the job's (attempt 0: no
// attempt of this job wrote it). A copy that fails is logged; the
// executor then skips the name and the attempt starts afresh.
func (c *Controller) importResumeFrom(ctx context.Context, l executor.Launch) {
	if len(l.Resume) == 0 || l.OutputDir == "" {
		return
	}
	job, err := c.cfg.Store.GetJob(ctx, l.JobID)
	if err != nil || job.Spec.Resume == nil || job.Spec.Resume.Checkpoint != l.Resume[0].Name {
		return
	}
	r := job.Spec.Resume
	if err := c.importCheckpoint(ctx, l, r); err != nil {
		c.log.Warn("copy the checkpoint the job starts from", "attempt", l.Ref.String(), "from_job", r.Job, "checkpoint", r.Checkpoint, "err", err)
		return
	}
	c.log.Info("copied the checkpoint the job starts from", "attempt", l.Ref.String(), "from_job", r.Job, "checkpoint", r.Checkpoint)
}

func (c *Controller) importCheckpoint(ctx context.Context, l executor.Launch, r *domain.ResumeFrom) error {
	own, err := c.cfg.Store.ListCheckpoints(ctx, l.JobID, true)
	if err != nil || len(own) > 0 {
		return err // already copied, or the job has its own
	}
	rec, err := c.sourceCheckpoint(ctx, r)
	if err != nil {
		return err
	}
	var dst executor.Outputs
	if cr, ok := c.cfg.Executor.(executor.OutputsCreator); ok {
		dst, err = cr.CreateOutputs(ctx, l.OutputDir) // the first attempt's launch makes it otherwise
	} else {
		dst, err = c.cfg.Executor.Outputs(ctx, l.OutputDir)
	}
	if err != nil {
		return err
	}
	defer dst.Close()
	switch {
	case rec.OnLocal():
		src, err := c.cfg.Store.GetJob(ctx, r.Job)
		if err != nil {
			return err
		}
		so, err := c.cfg.Executor.Outputs(ctx, src.OutputDir)
		if err != nil {
			return err
		}
		defer so.Close()
		if err := tier.Import(ctx, so, dst, rec); err != nil {
			return err
		}
	case rec.OnObject() && c.cfg.Blobs != nil:
		if err := tier.Restore(ctx, c.cfg.Blobs, dst, rec); err != nil {
			return err
		}
	default:
		return errors.New("its local copy is gone and this server keeps no object copy of it")
	}
	d, err := dst.Digest(ctx, rec.Name)
	if err != nil {
		return err
	}
	_, err = c.cfg.Store.RecordCheckpoint(ctx, d.Record(l.JobID, 0))
	return err
}

// resumedFromWords rewrites the words of an attempt's start that resumed
// from the checkpoint the job's spec starts from, to name the job it
// came from ("; resuming from checkpoint ckpt-3 of job 12").
func resumedFromWords(spec domain.Spec, name, words string) string {
	r := spec.Resume
	if r == nil || name == "" || r.Checkpoint != name {
		return words
	}
	at := "checkpoint " + name
	return strings.Replace(words, at, at+" of job "+strconv.FormatInt(r.Job, 10), 1)
}
