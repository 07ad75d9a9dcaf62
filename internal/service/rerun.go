package service

import (
	"context"
	"errors"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/jobspec"
)

// RerunInput is a re-run request: which changes to make to the original
// job's spec.
type RerunInput struct {
	// Env, when set, replaces the spec's env ("name@version" or "host").
	Env string
	// Set holds "key=value" overrides, applied as submit applies them.
	Set            []string
	IdempotencyKey string
	// Resume starts the new job from the original's latest complete
	// checkpoint (spec resume; resumefrom.go); FromCheckpoint, from the
	// one named (and implies Resume). Without either the new job starts
	// afresh, also when the original itself resumed another job.
	Resume         bool
	FromCheckpoint string
}

// Rerun submits a new job from the config snapshot of job id (the exact
// spec it ran with) with in's changes applied, and links it to the original
// (domain.Job.RerunOf). The caller must be allowed to read the original and
// to submit in its project. The new spec goes through the whole submit path
// (overrides, validation, secrets, admission, audit) and runs from the
// original's code package, if it had one. created is false when
// IdempotencyKey matched an earlier submit by the same principal.
func (s *JobService) Rerun(ctx context.Context, p Principal, id int64, in RerunInput) (job domain.Job, created bool, err error) {
	orig, err := s.st.GetJob(ctx, id)
	if err != nil {
		return domain.Job{}, false, jobErr(id, err)
	}
	if err := s.authorize(ctx, p, authz.JobRead, jobResource(orig)); err != nil {
		return domain.Job{}, false, err
	}
	if err := s.authorize(ctx, p, authz.JobSubmit, authz.Resource{Kind: "job", Project: orig.Project}); err != nil {
		return domain.Job{}, false, err
	}
	doc := orig.SpecJSON
	spec, changed := orig.Spec, false
	if in.Env != "" {
		spec.Env, changed = in.Env, true
	}
	if in.Resume || in.FromCheckpoint != "" || spec.Resume != nil {
		spec.Resume, changed = nil, true
		if in.Resume || in.FromCheckpoint != "" {
			name, err := s.resumePoint(ctx, orig, in.FromCheckpoint) // resumefrom.go
			if err != nil {
				return domain.Job{}, false, err
			}
			spec.Resume = &domain.ResumeFrom{Job: orig.ID, Checkpoint: name}
		}
	}
	if changed {
		doc, _ = jobspec.Canonical(spec)
	}
	job, created, err = s.Submit(ctx, p, SubmitInput{
		Doc: doc, Set: in.Set, IdempotencyKey: in.IdempotencyKey,
		Code:          orig.Code,
		rerunOf:       orig.ID,
		rerunTemplate: orig.Spec.Labels[jobspec.TemplateLabel],
	})
	var fe domain.FieldErrors
	if errors.As(err, &fe) {
		// Lines would point into the stored snapshot, which is no file
		// the caller has: the field paths say where.
		for i := range fe {
			fe[i].Line = 0
		}
	}
	return job, created, err
}
