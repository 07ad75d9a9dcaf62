package service

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"sync"
	"time"

	"trainyard/internal/artifacts"
	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/tier"
)

// Checkpoint lifecycle (Config.Lifecycle): the newest keep_local
// checkpoints of a job stay in its output tree, older ones move to the
// object store, and each is deleted from every tier delete_after it
// completed. gc applies the policies to every job; the server's periodic
// pass (RunLifecycle) applies them to what changed since its last pass.

// lifecycleActor is who the periodic pass acts as, in audit records.
var lifecycleActor = Principal{Subject: "system:lifecycle", Role: domain.RoleAdmin}

// lifecycleSlack is how far before the last pass the periodic pass looks
// for newly registered checkpoints: a checkpoint's time is when the job
// completed it, which comes a little before the server registers it.
const lifecycleSlack = time.Hour

// lifecycleFull is how often the periodic pass looks at every job anyway,
// for checkpoints registered long after they completed (an attempt's
// leftovers found when it ended).
const lifecycleFull = 24 * time.Hour

// lifecycleState is what the periodic pass remembers between passes.
type lifecycleState struct {
	mu             sync.Mutex
	last, lastFull time.Time
}

// lifecyclePlan plans the policies for the jobs of recs (kept checkpoints;
// nil: every job's), reading each such job's kept checkpoints whole.
func (s *ArtifactService) lifecyclePlan(ctx context.Context, recs []domain.CheckpointRecord, all bool) ([]artifacts.Deletion, map[int64]domain.Job, map[string]domain.CheckpointRecord, error) {
	if len(s.cfg.Lifecycle) == 0 {
		return nil, nil, nil, nil
	}
	if all {
		var err error
		if recs, err = s.st.ListCheckpoints(ctx, 0, false); err != nil {
			return nil, nil, nil, err
		}
	}
	byJob := map[int64][]domain.CheckpointRecord{}
	var ids []int64
	for _, c := range recs {
		if _, ok := byJob[c.JobID]; !ok {
			ids = append(ids, c.JobID)
			byJob[c.JobID] = nil
		}
		if all {
			byJob[c.JobID] = append(byJob[c.JobID], c)
		}
	}
	slices.Sort(ids)
	jobs := map[int64]domain.Job{}
	known := map[string]domain.CheckpointRecord{}
	in := make([]artifacts.LifecycleJob, 0, len(ids))
	for _, id := range ids {
		job, err := s.st.GetJob(ctx, id)
		if err != nil {
			return nil, nil, nil, err
		}
		cks := byJob[id]
		if !all {
			if cks, err = s.st.ListCheckpoints(ctx, id, false); err != nil {
				return nil, nil, nil, err
			}
		}
		lj := artifacts.LifecycleJob{ID: id, Project: job.Project, Pool: job.Pool, Checkpoints: cks}
		for _, c := range cks {
			known[ckKey(id, c.Name)] = c
			if job.State.Active() && c.ResumedBy == job.Attempts {
				lj.InUse = c.Name
			}
		}
		jobs[id] = job
		in = append(in, lj)
	}
	return artifacts.PlanLifecycle(in, s.cfg.Lifecycle, s.cfg.Clock.Now()), jobs, known, nil
}

func ckKey(job int64, name string) string { return strconv.FormatInt(job, 10) + "/" + name }

// LifecyclePass applies the lifecycle policies to what changed since the
// last pass: jobs with checkpoints registered since (less
// lifecycleSlack), and checkpoints whose delete_after ran out since. The
// first pass, and one every lifecycleFull, looks at every job. Its cost
// follows what changed, not how many checkpoints are kept.
func (s *ArtifactService) LifecyclePass(ctx context.Context) (GCReport, error) {
	if len(s.cfg.Lifecycle) == 0 {
		return GCReport{}, nil
	}
	s.lifecycle.mu.Lock()
	defer s.lifecycle.mu.Unlock()
	now := s.cfg.Clock.Now()
	last := s.lifecycle.last
	full := last.IsZero() || now.Sub(s.lifecycle.lastFull) >= lifecycleFull
	var recs []domain.CheckpointRecord
	if !full {
		// Registered since the last pass; the far end leaves room for
		// times a job set ahead of the clock.
		fresh, err := s.st.ListCheckpointsAt(ctx, last.Add(-lifecycleSlack), now.Add(100*365*24*time.Hour))
		if err != nil {
			return GCReport{}, err
		}
		recs = append(recs, fresh...)
		for _, d := range artifacts.DeleteAfters(s.cfg.Lifecycle) {
			due, err := s.st.ListCheckpointsAt(ctx, last.Add(-d), now.Add(-d))
			if err != nil {
				return GCReport{}, err
			}
			recs = append(recs, due...)
		}
	}
	plan, jobs, known, err := s.lifecyclePlan(ctx, recs, full)
	if err != nil {
		return GCReport{}, err
	}
	rep := s.applyPlan(ctx, lifecycleActor, plan, jobs, known)
	s.lifecycle.last = now
	if full {
		s.lifecycle.lastFull = now
	}
	if len(rep.Failed) > 0 {
		// What failed is planned again by a full pass within the hour.
		s.lifecycle.lastFull = now.Add(time.Hour - lifecycleFull)
	}
	return rep, nil
}

// RunLifecycle runs LifecyclePass once now and again on every tick until
// ctx ends. Failures are logged and planned again; done, if set, is
// called after each pass (tests wait on it).
func (s *ArtifactService) RunLifecycle(ctx context.Context, ticks <-chan time.Time, done func(GCReport)) {
	if len(s.cfg.Lifecycle) == 0 {
		return
	}
	for {
		rep, err := s.LifecyclePass(ctx)
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("checkpoint lifecycle: the pass failed; retrying at the next pass", "err", err)
		}
		for _, f := range rep.Failed {
			s.cfg.Logger.Warn("checkpoint lifecycle: a step failed; it is tried again within the hour", "step", f)
		}
		if n := len(rep.Deletions); n > 0 {
			s.cfg.Logger.Info("checkpoint lifecycle: moved or deleted checkpoints", "steps", n, "bytes", rep.Bytes)
		}
		if done != nil {
			done(rep)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
	}
}

// applyPlan carries out lifecycle steps.
func (s *ArtifactService) applyPlan(ctx context.Context, p Principal, plan []artifacts.Deletion, jobs map[int64]domain.Job, known map[string]domain.CheckpointRecord) GCReport {
	var rep GCReport
	for _, d := range plan {
		rec := known[ckKey(d.JobID, d.Path)]
		var err error
		if d.Kind == artifacts.KindMove {
			err = s.moveCheckpoint(ctx, p, d, jobs[d.JobID], rec)
		} else {
			err = s.deleteCheckpoint(ctx, p, d, jobs[d.JobID].OutputDir, rec)
		}
		if err != nil {
			rep.Failed = append(rep.Failed, fmt.Sprintf("job %d %s %s: %v", d.JobID, d.Kind, d.Path, err))
			continue
		}
		rep.Deletions = append(rep.Deletions, d)
		rep.Bytes += d.Bytes
	}
	return rep
}

// moveCheckpoint copies the checkpoint to the object store (unless a
// verified copy is there), checks the copy against its digest, and only
// then removes its local copy and records the move, audited.
func (s *ArtifactService) moveCheckpoint(ctx context.Context, p Principal, d artifacts.Deletion, job domain.Job, rec domain.CheckpointRecord) error {
	if s.cfg.Blobs == nil {
		return errors.New("this server has no object store to move checkpoints to; set object_store in its config")
	}
	o, err := s.cfg.Files.Outputs(ctx, job.OutputDir)
	if err != nil {
		return err
	}
	defer o.Close()
	if rec.OnObject() {
		err = tier.Verify(ctx, s.cfg.Blobs, rec)
	}
	if !rec.OnObject() || err != nil {
		// No copy yet, or the one there no longer verifies: copy it now,
		// from the local copy checked against its registered digest.
		if got, derr := o.Digest(ctx, rec.Name); derr != nil {
			return fmt.Errorf("read the local copy: %w", derr)
		} else if rec.SHA256 != "" && got.SHA256 != rec.SHA256 {
			return fmt.Errorf("the local copy changed since it was registered (sha256 %s, registered %s); it is not moved", got.SHA256, rec.SHA256)
		}
		if err := tier.Copy(ctx, s.cfg.Blobs, o, rec); err != nil {
			return err
		}
		if err := s.st.MarkCheckpointCopied(ctx, rec.JobID, rec.Name, rec.SHA256, s.cfg.Clock.Now()); err != nil {
			return err
		}
	}
	rel := executor.CheckpointsDir + "/" + rec.Name
	if err := o.Remove(ctx, rel); err != nil {
		return err
	}
	if err := o.Remove(ctx, rel+domain.CheckpointMarker); err != nil {
		return err
	}
	now := s.cfg.Clock.Now()
	audit := s.gcAudit(ctx, p, d, now)
	return s.st.MarkCheckpointMoved(ctx, rec.JobID, rec.Name, now, &audit)
}

// deleteCheckpoint removes a checkpoint from every tier that holds it and
// records its removal, audited. The executor removes the local copy inside
// the job's output tree: a link the job left there is removed, never
// followed.
func (s *ArtifactService) deleteCheckpoint(ctx context.Context, p Principal, d artifacts.Deletion, outputDir string, rec domain.CheckpointRecord) error {
	if rec.OnObject() {
		if s.cfg.Blobs == nil {
			return errors.New("it has a copy in the object store, and this server has none configured")
		}
		if err := tier.Delete(ctx, s.cfg.Blobs, d.JobID, d.Path); err != nil {
			return err
		}
	}
	if rec.OnLocal() {
		o, err := s.cfg.Files.Outputs(ctx, outputDir)
		if err == nil {
			err = o.Remove(ctx, executor.CheckpointsDir+"/"+d.Path)
			if err == nil {
				err = o.Remove(ctx, executor.CheckpointsDir+"/"+d.Path+domain.CheckpointMarker) // a file checkpoint's marker beside it
			}
			o.Close()
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	now := s.cfg.Clock.Now()
	audit := s.gcAudit(ctx, p, d, now)
	return s.st.MarkCheckpointDeleted(ctx, d.JobID, d.Path, now, &audit)
}

// gcAudit is the audit record of one gc or lifecycle step.
func (s *ArtifactService) gcAudit(ctx context.Context, p Principal, d artifacts.Deletion, at time.Time) domain.AuditRecord {
	kind := d.Kind
	if kind == artifacts.KindMove {
		kind = artifacts.KindCheckpoint
	}
	detail := d.Reason
	if d.Kind == artifacts.KindMove {
		detail = "moved to the object store: " + d.Reason
	}
	return domain.AuditRecord{At: at, Actor: p.Actor(), Action: string(authz.ArtifactGC),
		Target: "job/" + strconv.FormatInt(d.JobID, 10) + "/" + kind + "s/" + d.Path,
		Before: summary(map[string]any{"bytes": d.Bytes}), Result: domain.AuditOK, Detail: detail, Client: ClientFrom(ctx)}
}
