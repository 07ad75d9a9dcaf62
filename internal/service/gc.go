package service

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"trainyard/internal/artifacts"
	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/store"
)

// GCReport is what gc removed, or with DryRun what it would remove.
type GCReport struct {
	DryRun    bool
	Deletions []artifacts.Deletion
	Bytes     int64
	// Failed lists deletions that could not be made (real runs only).
	Failed []string
}

// GC removes what the retention policies (Config.Retention) let go: the
// checkpoints and report files of finished jobs past their age; and
// applies the checkpoint lifecycle policies (Config.Lifecycle) to every
// job: checkpoints moved to the object store, or deleted from every tier.
// With dryRun it changes nothing and returns the same list a real run
// made now would carry out. Every step is audited.
func (s *ArtifactService) GC(ctx context.Context, p Principal, dryRun bool) (GCReport, error) {
	if err := s.authorize(ctx, p, authz.ArtifactGC, authz.Resource{Kind: "artifacts"}); err != nil {
		return GCReport{}, err
	}
	plan, dirs, known, err := s.gcPlan(ctx)
	if err != nil {
		return GCReport{}, err
	}
	life, jobs, lknown, err := s.lifecyclePlan(ctx, nil, true)
	if err != nil {
		return GCReport{}, err
	}
	// Retention first: what it deletes is not moved or deleted again.
	gone := map[string]bool{}
	for _, d := range plan {
		if d.Kind == artifacts.KindCheckpoint {
			gone[ckKey(d.JobID, d.Path)] = true
		}
	}
	life = slices.DeleteFunc(life, func(d artifacts.Deletion) bool { return gone[ckKey(d.JobID, d.Path)] })
	rep := GCReport{DryRun: dryRun}
	if dryRun {
		for _, d := range slices.Concat(plan, life) {
			rep.Deletions = append(rep.Deletions, d)
			rep.Bytes += d.Bytes
		}
		return rep, nil
	}
	for _, d := range plan {
		var err error
		if d.Kind == artifacts.KindCheckpoint {
			err = s.deleteCheckpoint(ctx, p, d, dirs[d.JobID], known[ckKey(d.JobID, d.Path)])
		} else {
			err = s.gcDelete(ctx, p, d, dirs[d.JobID])
		}
		if err != nil {
			rep.Failed = append(rep.Failed, fmt.Sprintf("job %d %s %s: %v", d.JobID, d.Kind, d.Path, err))
			continue
		}
		rep.Deletions = append(rep.Deletions, d)
		rep.Bytes += d.Bytes
	}
	lrep := s.applyPlan(ctx, p, life, jobs, lknown)
	rep.Deletions = append(rep.Deletions, lrep.Deletions...)
	rep.Bytes += lrep.Bytes
	rep.Failed = append(rep.Failed, lrep.Failed...)
	return rep, nil
}

// gcPlan lists what gc removes now, leaving out what is already gone.
func (s *ArtifactService) gcPlan(ctx context.Context) ([]artifacts.Deletion, map[int64]string, map[string]domain.CheckpointRecord, error) {
	if len(s.cfg.Retention) == 0 {
		return nil, nil, nil, nil
	}
	jobs, err := s.st.ListJobs(ctx, store.JobFilter{States: []domain.JobState{domain.JobSucceeded, domain.JobFailed, domain.JobCanceled}, Ascending: true})
	if err != nil {
		return nil, nil, nil, err
	}
	ckpts, err := s.st.ListCheckpoints(ctx, 0, false)
	if err != nil {
		return nil, nil, nil, err
	}
	byJob := map[int64][]domain.CheckpointRecord{}
	known := map[string]domain.CheckpointRecord{}
	for _, c := range ckpts {
		byJob[c.JobID] = append(byJob[c.JobID], c)
		known[ckKey(c.JobID, c.Name)] = c
	}
	dirs := map[int64]string{}
	in := make([]artifacts.FinishedJob, 0, len(jobs))
	for _, j := range jobs {
		if j.OutputDir == "" {
			continue
		}
		fj := artifacts.FinishedJob{ID: j.ID, Project: j.Project, Pool: j.Pool, FinishedAt: j.FinishedAt, Checkpoints: byJob[j.ID]}
		if m, err := s.st.GetManifest(ctx, j.ID, 0); err == nil {
			fj.Outputs = m.Files
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, nil, nil, err
		}
		dirs[j.ID] = j.OutputDir
		in = append(in, fj)
	}
	var out []artifacts.Deletion
	for _, d := range artifacts.Plan(in, s.cfg.Retention, s.cfg.Clock.Now()) {
		// A checkpoint held only in the object store is there by its
		// record; anything else must still be in the job's tree.
		if rec, ok := known[ckKey(d.JobID, d.Path)]; d.Kind == artifacts.KindCheckpoint && ok && !rec.OnLocal() {
			out = append(out, d)
			continue
		}
		if !s.gcTargetExists(ctx, dirs[d.JobID], d) {
			continue // removed before (by hand, or a checkpoint the job dropped)
		}
		out = append(out, d)
	}
	return out, dirs, known, nil
}

// gcTarget is the path of a planned deletion in its job's output
// directory (slash-separated, relative).
func gcTarget(d artifacts.Deletion) string {
	if d.Kind == "checkpoint" {
		return executor.CheckpointsDir + "/" + d.Path
	}
	return d.Path
}

// gcTargetExists reports whether a planned deletion is still in the job's
// output tree: a regular file, or something else there (a directory, a
// link the job left: Open refuses it as not regular, so it is there). A
// path through a link leading out of the tree is not.
func (s *ArtifactService) gcTargetExists(ctx context.Context, outputDir string, d artifacts.Deletion) bool {
	o, err := s.cfg.Files.Outputs(ctx, outputDir)
	if err != nil {
		return false
	}
	defer o.Close()
	f, err := o.Open(ctx, gcTarget(d))
	if err == nil {
		f.Close()
		return true
	}
	return errors.Is(err, executor.ErrNotRegular)
}

// gcDelete removes one planned output file and audits it (checkpoints:
// deleteCheckpoint, lifecycle.go). The
// executor removes it inside the job's output tree: a link the job left
// there is removed, never followed.
func (s *ArtifactService) gcDelete(ctx context.Context, p Principal, d artifacts.Deletion, outputDir string) error {
	o, err := s.cfg.Files.Outputs(ctx, outputDir)
	if err != nil {
		return err
	}
	err = o.Remove(ctx, gcTarget(d))
	o.Close()
	if err != nil {
		return err
	}
	return s.st.AppendAudit(ctx, s.gcAudit(ctx, p, d, s.cfg.Clock.Now()))
}
