package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"trainyard/internal/artifacts"
	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// Manifest returns what the job's output directory held when an attempt
// ended (attempt 0: the latest), with its lineage.
func (s *Service) Manifest(ctx context.Context, p Principal, id int64, attempt int) (domain.Manifest, error) {
	job, err := s.readableJob(ctx, p, id)
	if err != nil {
		return domain.Manifest{}, err
	}
	m, err := s.cfg.Store.GetManifest(ctx, job.ID, attempt)
	if errors.Is(err, store.ErrNotFound) {
		if attempt > 0 {
			return m, domain.Errorf(domain.ErrNotFound, "job %d has no manifest for attempt %d; see: trainyard artifacts ls %d", id, attempt, id)
		}
		return m, domain.Errorf(domain.ErrNotFound, "job %d has no recorded outputs yet: its manifest is recorded when an attempt ends (the job is %s)", id, job.State)
	}
	return m, err
}

// Artifact is one output file opened for reading.
type Artifact struct {
	File *os.File
	Info fs.FileInfo
	domain.ArtifactFile
}

// OpenArtifact opens one file of the job's latest manifest. The caller
// closes File.
func (s *Service) OpenArtifact(ctx context.Context, p Principal, id int64, rel string) (Artifact, error) {
	m, err := s.Manifest(ctx, p, id, 0)
	if err != nil {
		return Artifact{}, err
	}
	i, found := slices.BinarySearchFunc(m.Files, rel, func(f domain.ArtifactFile, p string) int { return strings.Compare(f.Path, p) })
	if !found {
		return Artifact{}, domain.Errorf(domain.ErrNotFound, "job %d's outputs have no file %q; see: trainyard artifacts ls %d", id, rel, id)
	}
	job, err := s.cfg.Store.GetJob(ctx, id)
	if err != nil {
		return Artifact{}, jobErr(id, err)
	}
	f, err := os.Open(filepath.Join(job.OutputDir, filepath.FromSlash(path.Clean(rel))))
	if errors.Is(err, fs.ErrNotExist) {
		return Artifact{}, domain.Errorf(domain.ErrNotFound, "output file %q of job %d is listed in its manifest but no longer on disk (removed by gc or by hand)", rel, id)
	}
	if err != nil {
		return Artifact{}, fmt.Errorf("open output %q of job %d: %w", rel, id, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return Artifact{}, err
	}
	return Artifact{File: f, Info: fi, ArtifactFile: m.Files[i]}, nil
}

// Checkpoints returns a job's registered checkpoints, oldest first.
func (s *Service) Checkpoints(ctx context.Context, p Principal, id int64) ([]domain.CheckpointRecord, error) {
	job, err := s.readableJob(ctx, p, id)
	if err != nil {
		return nil, err
	}
	return s.cfg.Store.ListCheckpoints(ctx, job.ID, false)
}

// CheckpointUsage is the space checkpoints take, per job.
type CheckpointUsage struct {
	JobID   int64
	Project string
	Count   int
	Bytes   int64
}

// CheckpointUsage sums the kept checkpoints per job, for the jobs p may
// read (of one project when project is not empty), largest first.
func (s *Service) CheckpointUsage(ctx context.Context, p Principal, project string) ([]CheckpointUsage, error) {
	if err := s.authorize(ctx, p, authz.JobRead, authz.Resource{Kind: "job", Project: project}); err != nil {
		return nil, err
	}
	all, err := s.cfg.Store.ListCheckpoints(ctx, 0, false)
	if err != nil {
		return nil, err
	}
	v := authz.VisibleJobs(p)
	by := map[int64]*CheckpointUsage{}
	var out []CheckpointUsage
	for _, c := range all {
		u := by[c.JobID]
		if u == nil {
			job, err := s.cfg.Store.GetJob(ctx, c.JobID)
			if err != nil || (project != "" && job.Project != project) ||
				(!v.All && job.Submitter != v.Submitter && !slices.Contains(v.Projects, job.Project)) {
				by[c.JobID] = &CheckpointUsage{JobID: -1}
				continue
			}
			u = &CheckpointUsage{JobID: c.JobID, Project: job.Project}
			by[c.JobID] = u
		}
		if u.JobID < 0 {
			continue
		}
		u.Count++
		u.Bytes += c.Size
	}
	for _, u := range by {
		if u.JobID > 0 {
			out = append(out, *u)
		}
	}
	slices.SortFunc(out, func(a, b CheckpointUsage) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(a.JobID, b.JobID))
	})
	return out, nil
}

// CompleteCheckpoint marks a checkpoint directory the attempt wrote as
// complete (writing its marker file) and registers it; the job token of
// the attempt calls it (the SDK's checkpoint_done).
func (s *Service) CompleteCheckpoint(ctx context.Context, p Principal, id int64, attempt int, name string) (domain.CheckpointRecord, error) {
	job, err := s.cfg.Store.GetJob(ctx, id)
	if err != nil {
		return domain.CheckpointRecord{}, jobErr(id, err)
	}
	r := authz.Resource{Kind: "attempt", ID: domain.AttemptRef(id, attempt), Project: job.Project, Owner: job.Submitter}
	if err := s.authorize(ctx, p, authz.AttemptReport, r); err != nil {
		return domain.CheckpointRecord{}, err
	}
	if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".tmp") {
		var errs domain.FieldErrors
		errs.Add("name", "%q is not a checkpoint name: give the name of a directory directly under TRAINYARD_CHECKPOINT_DIR (no slashes, not hidden, not ending in .tmp)", name)
		return domain.CheckpointRecord{}, errs.Err()
	}
	dir := filepath.Join(job.OutputDir, "checkpoints", name)
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return domain.CheckpointRecord{}, domain.Errorf(domain.ErrNotFound, "no checkpoint directory %q under TRAINYARD_CHECKPOINT_DIR of job %d; write it first, then mark it complete", name, id)
	}
	if err := os.WriteFile(filepath.Join(dir, domain.CheckpointMarker), nil, 0o644); err != nil {
		return domain.CheckpointRecord{}, fmt.Errorf("mark checkpoint %q of job %d complete: %w", name, id, err)
	}
	found, err := artifacts.Checkpoints(filepath.Dir(dir))
	if err != nil {
		return domain.CheckpointRecord{}, err
	}
	rec := domain.CheckpointRecord{JobID: id, Attempt: attempt, Name: name, Path: dir, At: s.cfg.Clock.Now().UTC()}
	for _, f := range found {
		if f.Name == name {
			rec.Size, rec.Files = f.Size, f.Files
		}
	}
	if _, err := s.cfg.Store.RecordCheckpoint(ctx, rec); err != nil {
		return rec, err
	}
	return rec, nil
}

// readableJob returns the job when p may read it.
func (s *Service) readableJob(ctx context.Context, p Principal, id int64) (domain.Job, error) {
	job, err := s.cfg.Store.GetJob(ctx, id)
	if err != nil {
		return domain.Job{}, jobErr(id, err)
	}
	if err := s.authorize(ctx, p, authz.JobRead, jobResource(job)); err != nil {
		return domain.Job{}, err
	}
	return job, nil
}

// CheckpointPath returns the path on this machine of a kept checkpoint of
// the job (a directory or a single file), for download.
func (s *Service) CheckpointPath(ctx context.Context, p Principal, id int64, name string) (string, error) {
	cs, err := s.Checkpoints(ctx, p, id)
	if err != nil {
		return "", err
	}
	for _, c := range cs {
		if c.Name == name {
			if _, err := os.Stat(c.Path); err != nil {
				return "", domain.Errorf(domain.ErrNotFound, "checkpoint %q of job %d is registered but no longer on disk", name, id)
			}
			return c.Path, nil
		}
	}
	return "", domain.Errorf(domain.ErrNotFound, "job %d has no kept checkpoint %q; see: trainyard checkpoints ls %d", id, name, id)
}
