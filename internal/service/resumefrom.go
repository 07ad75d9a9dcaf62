package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
)

// A job may start from another job's checkpoint (spec resume,
// domain.ResumeFrom): rerun --resume fills it with the original's latest
// complete checkpoint, and a spec may name one itself. The control loop
// copies it into the new job's checkpoint directory before its first
// attempt, which then resumes from it as from one of its own.

// resumePoint returns the checkpoint of orig a re-run resumes from: name,
// when given, which must be one of orig's registered checkpoints; else
// the one an attempt of orig would resume from next (the most recently
// completed, a best-so-far copy last, none set aside after a failed
// resume). An original with none is a conflict that says how to look.
func (s *JobService) resumePoint(ctx context.Context, orig domain.Job, name string) (string, error) {
	recs, err := s.st.ListCheckpoints(ctx, orig.ID, false)
	if err != nil {
		return "", fmt.Errorf("list the checkpoints of job %d: %w", orig.ID, err)
	}
	if name != "" {
		if !slices.ContainsFunc(recs, func(r domain.CheckpointRecord) bool { return r.Name == name }) {
			return "", domain.FieldErrors{{Path: "from_checkpoint", Message: fmt.Sprintf("%q is not a checkpoint of job %d (%s); see them with: trainyard checkpoints ls %d",
				name, orig.ID, checkpointNames(recs), orig.ID)}}
		}
		return name, nil
	}
	recs = slices.DeleteFunc(recs, func(r domain.CheckpointRecord) bool { return r.Suspect != "" })
	if len(recs) == 0 {
		return "", domain.Errorf(domain.ErrConflict, "job %d has no complete checkpoint to resume from; see what it saved with: trainyard checkpoints ls %d, or re-run it without --resume to start from the beginning",
			orig.ID, orig.ID)
	}
	best := func(r domain.CheckpointRecord) int {
		if strings.Contains(strings.ToLower(r.Name), "best") {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(recs, func(a, b domain.CheckpointRecord) int {
		return cmp.Or(cmp.Compare(best(a), best(b)), b.At.Compare(a.At), strings.Compare(b.Name, a.Name))
	})
	return recs[0].Name, nil
}

// checkResumeFrom checks a spec's resume at submit: the job it names
// exists, the caller may read it, it is of the spec's project (whose
// jobs may read each other's files), and the checkpoint is one of its
// registered, undeleted checkpoints.
func (s *JobService) checkResumeFrom(ctx context.Context, p Principal, spec domain.Spec) error {
	r := spec.Resume
	if r == nil {
		return nil
	}
	src, err := s.st.GetJob(ctx, r.Job)
	if errors.Is(err, domain.ErrNotFound) {
		return domain.FieldErrors{{Path: "resume.job", Message: fmt.Sprintf("job %d does not exist; name the job whose checkpoint to start from (list jobs with: trainyard ls)", r.Job)}}
	}
	if err != nil {
		return fmt.Errorf("read job %d, which the spec resumes from: %w", r.Job, err)
	}
	if err := s.authorize(ctx, p, authz.JobRead, jobResource(src)); err != nil {
		return err
	}
	if src.Project != spec.Project {
		return domain.FieldErrors{{Path: "resume.job", Message: fmt.Sprintf("job %d is in project %s, not %s: a job starts only from a checkpoint of its own project's jobs", r.Job, src.Project, spec.Project)}}
	}
	recs, err := s.st.ListCheckpoints(ctx, src.ID, false)
	if err != nil {
		return fmt.Errorf("list the checkpoints of job %d: %w", src.ID, err)
	}
	if !slices.ContainsFunc(recs, func(c domain.CheckpointRecord) bool { return c.Name == r.Checkpoint }) {
		return domain.FieldErrors{{Path: "resume.checkpoint", Message: fmt.Sprintf("%q is not a checkpoint of job %d (%s); see them with: trainyard checkpoints ls %d",
			r.Checkpoint, src.ID, checkpointNames(recs), src.ID)}}
	}
	return nil
}

// checkpointNames says which checkpoints recs holds, for an error.
func checkpointNames(recs []domain.CheckpointRecord) string {
	if len(recs) == 0 {
		return "it has none"
	}
	names := make([]string, 0, len(recs))
	for _, c := range recs {
		names = append(names, c.Name)
	}
	return "it has " + strings.Join(names, ", ")
}
