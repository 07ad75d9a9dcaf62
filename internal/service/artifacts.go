package service

import (
	"archive/tar"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"time"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/store"
	"trainyard/internal/tier"
)

// ArtifactService reads jobs' outputs and checkpoints and applies garbage
// collection and retention to finished jobs' files.
type ArtifactService struct {
	*core
	st        ArtifactStore
	lifecycle lifecycleState // the periodic pass's memory: lifecycle.go
	storage   storageState   // the storage accrual's: storage.go
}

// ArtifactStore is what output, checkpoint, gc and retention use cases
// read and write: jobs, their manifests and checkpoint records.
type ArtifactStore interface {
	AppendAudit(ctx context.Context, recs ...domain.AuditRecord) error
	GetJob(ctx context.Context, id int64) (domain.Job, error)
	GetManifest(ctx context.Context, jobID int64, attempt int) (domain.Manifest, error)
	ListAttempts(ctx context.Context, jobID int64) ([]domain.Attempt, error)
	ListCheckpoints(ctx context.Context, jobID int64, withDeleted bool) ([]domain.CheckpointRecord, error)
	ListCheckpointsAt(ctx context.Context, from, to time.Time) ([]domain.CheckpointRecord, error)
	ListCheckpointsHeld(ctx context.Context, since time.Time) ([]domain.CheckpointRecord, error)
	ListJobs(ctx context.Context, f store.JobFilter) ([]domain.Job, error)
	Apply(ctx context.Context, changes []store.Change) ([]error, error)
	MarkCheckpointResumed(ctx context.Context, jobID int64, name string, attempt int) error
	ManifestSizes(ctx context.Context) ([]store.ManifestSize, error)
	LatestStorageDay(ctx context.Context) (time.Time, error)
	RecordStorageDays(ctx context.Context, days []domain.StorageDay) error
	MarkCheckpointCopied(ctx context.Context, jobID int64, name, sha256 string, at time.Time) error
	MarkCheckpointDeleted(ctx context.Context, jobID int64, name string, at time.Time, audit *domain.AuditRecord) error
	MarkCheckpointMoved(ctx context.Context, jobID int64, name string, at time.Time, audit *domain.AuditRecord) error
	RecordCheckpoint(ctx context.Context, c domain.CheckpointRecord) (bool, error)
}

var _ ArtifactStore = store.Store(nil)

// Manifest returns what the job's output directory held when an attempt
// ended (attempt 0: the latest), with its lineage.
func (s *ArtifactService) Manifest(ctx context.Context, p Principal, id int64, attempt int) (domain.Manifest, error) {
	job, err := s.readableJob(ctx, p, id)
	if err != nil {
		return domain.Manifest{}, err
	}
	m, err := s.st.GetManifest(ctx, job.ID, attempt)
	if errors.Is(err, store.ErrNotFound) {
		if attempt > 0 {
			return m, domain.Errorf(domain.ErrNotFound, "job %d has no manifest for attempt %d; see: trainyard artifacts ls %d", id, attempt, id)
		}
		return m, domain.Errorf(domain.ErrNotFound, "job %d has no recorded outputs yet: its manifest is recorded when an attempt ends (the job is %s)", id, job.State)
	}
	return m, err
}

// Artifact is one output file opened for reading: File is the executor's
// (executor.Outputs.Open), with its size and modification time.
type Artifact struct {
	File OutputFile
	domain.ArtifactFile
}

// OutputFile is a file of a job's outputs, open for reading (an alias, so
// that callers name it without the executor package).
type OutputFile = executor.OutputFile

// openOutputs opens the output tree of job through the executor's read
// side (Config.Files); the caller closes it.
func (s *ArtifactService) openOutputs(ctx context.Context, job domain.Job) (executor.Outputs, error) {
	return s.cfg.Files.Outputs(ctx, job.OutputDir)
}

// OpenArtifact opens one file of the job's latest manifest. The caller
// closes File.
func (s *ArtifactService) OpenArtifact(ctx context.Context, p Principal, id int64, rel string) (Artifact, error) {
	m, err := s.Manifest(ctx, p, id, 0)
	if err != nil {
		return Artifact{}, err
	}
	i, found := slices.BinarySearchFunc(m.Files, rel, func(f domain.ArtifactFile, p string) int { return strings.Compare(f.Path, p) })
	if !found {
		return Artifact{}, domain.Errorf(domain.ErrNotFound, "job %d's outputs have no file %q; see: trainyard artifacts ls %d", id, rel, id)
	}
	job, err := s.st.GetJob(ctx, id)
	if err != nil {
		return Artifact{}, jobErr(id, err)
	}
	o, err := s.openOutputs(ctx, job)
	if errors.Is(err, fs.ErrNotExist) {
		return Artifact{}, domain.Errorf(domain.ErrNotFound, "the output directory of job %d is no longer on disk (removed by hand)", id)
	}
	if err != nil {
		return Artifact{}, fmt.Errorf("open the outputs of job %d: %w", id, err)
	}
	defer o.Close() // the file stays open
	f, err := o.Open(ctx, m.Files[i].Path)
	if errors.Is(err, fs.ErrNotExist) {
		return Artifact{}, domain.Errorf(domain.ErrNotFound, "output file %q of job %d is listed in its manifest but no longer on disk (removed by gc or by hand)", rel, id)
	}
	if errors.Is(err, executor.ErrNotRegular) {
		return Artifact{}, domain.Errorf(domain.ErrNotFound, "output file %q of job %d is listed in its manifest but is no longer a regular file; only regular files are served", rel, id)
	}
	if err != nil {
		return Artifact{}, fmt.Errorf("open output %q of job %d: %w", rel, id, err)
	}
	return Artifact{File: f, ArtifactFile: m.Files[i]}, nil
}

// Checkpoints returns a job's registered checkpoints, oldest first: for
// whoever may read the job, and for the job token of its latest attempt
// while that attempt is starting or running (checkpointReader).
func (s *ArtifactService) Checkpoints(ctx context.Context, p Principal, id int64) ([]domain.CheckpointRecord, error) {
	job, err := s.checkpointReader(ctx, p, id)
	if err != nil {
		return nil, err
	}
	return s.st.ListCheckpoints(ctx, job.ID, false)
}

// CheckpointUsage is the space checkpoints take, per job.
type CheckpointUsage struct {
	JobID   int64
	Project string
	Count   int
	Bytes   int64
	// LocalBytes and ObjectBytes are per tier: one held on both counts
	// on both.
	LocalBytes, ObjectBytes int64
}

// CheckpointUsage sums the kept checkpoints per job, for the jobs p may
// read (of one project when project is not empty), largest first.
func (s *ArtifactService) CheckpointUsage(ctx context.Context, p Principal, project string) ([]CheckpointUsage, error) {
	if err := s.authorize(ctx, p, authz.JobRead, authz.Resource{Kind: "job", Project: project}); err != nil {
		return nil, err
	}
	all, err := s.st.ListCheckpoints(ctx, 0, false)
	if err != nil {
		return nil, err
	}
	v := authz.VisibleJobs(p)
	by := map[int64]*CheckpointUsage{}
	var out []CheckpointUsage
	for _, c := range all {
		u := by[c.JobID]
		if u == nil {
			job, err := s.st.GetJob(ctx, c.JobID)
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
		if c.OnLocal() {
			u.LocalBytes += c.Size
		}
		if c.OnObject() {
			u.ObjectBytes += c.Size
		}
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

// CompleteCheckpoint marks a checkpoint the attempt wrote as complete
// (a directory gets its marker inside, a single file its NAME.complete
// beside it) and registers it with its digest; the job token of the
// attempt calls it (the SDK's checkpoint_done).
func (s *ArtifactService) CompleteCheckpoint(ctx context.Context, p Principal, id int64, attempt int, name string) (domain.CheckpointRecord, error) {
	job, err := s.st.GetJob(ctx, id)
	if err != nil {
		return domain.CheckpointRecord{}, jobErr(id, err)
	}
	r := authz.Resource{Kind: "attempt", ID: domain.AttemptRef(id, attempt), Project: job.Project, Owner: job.Submitter}
	if err := s.authorize(ctx, p, authz.AttemptReport, r); err != nil {
		return domain.CheckpointRecord{}, err
	}
	if !domain.IsCheckpointName(name) {
		var errs domain.FieldErrors
		errs.Add("name", "%q is not a checkpoint name: give the name of a directory or a regular file directly under TRAINYARD_CHECKPOINT_DIR (no slashes, not hidden, not ending in .tmp or %s)", name, domain.CheckpointMarker)
		return domain.CheckpointRecord{}, errs.Err()
	}
	// The output tree is read and changed through the executor only;
	// everything in it is the job's: the checkpoint, its marker, anything
	// could be a link, which the executor never follows.
	o, err := s.openOutputs(ctx, job)
	if err != nil {
		return domain.CheckpointRecord{}, domain.Errorf(domain.ErrNotFound, "job %d has no output directory on disk; write the checkpoint under TRAINYARD_CHECKPOINT_DIR, then mark it complete", id)
	}
	defer o.Close()
	missing := domain.Errorf(domain.ErrNotFound, "no checkpoint %q under TRAINYARD_CHECKPOINT_DIR of job %d (a directory or a regular file, not a link); write it first, then mark it complete", name, id)
	// The listing holds directories and regular files only: a link or a
	// special file in the name's place is no checkpoint.
	found, err := o.Checkpoints(ctx)
	if err != nil {
		return domain.CheckpointRecord{}, fmt.Errorf("list the checkpoints of job %d: %w", id, err)
	}
	i := slices.IndexFunc(found, func(c executor.Checkpoint) bool { return c.Name == name })
	if i < 0 {
		return domain.CheckpointRecord{}, missing
	}
	if err := o.MarkComplete(ctx, name); errors.Is(err, fs.ErrNotExist) {
		return domain.CheckpointRecord{}, missing // removed meanwhile
	} else if err != nil {
		var errs domain.FieldErrors
		errs.Add("name", "checkpoint %q of job %d cannot be marked complete: %v", name, id, err)
		return domain.CheckpointRecord{}, errs.Err()
	}
	c, err := o.Digest(ctx, name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return domain.CheckpointRecord{}, missing
	case errors.Is(err, executor.ErrIncomplete):
		// Its marker went away (or was replaced) right after it was written.
		var errs domain.FieldErrors
		errs.Add("name", "checkpoint %q of job %d is not complete after marking it (it changed meanwhile): %v; write it again, then mark it complete", name, id, err)
		return domain.CheckpointRecord{}, errs.Err()
	case err != nil:
		return domain.CheckpointRecord{}, fmt.Errorf("digest checkpoint %q of job %d: %w", name, id, err)
	}
	rec := c.Record(id, attempt)
	rec.At = s.cfg.Clock.Now().UTC() // registered now, by this call
	if _, err := s.st.RecordCheckpoint(ctx, rec); err != nil {
		return rec, err
	}
	return rec, nil
}

// readableJob returns the job when p may read it.
func (s *ArtifactService) readableJob(ctx context.Context, p Principal, id int64) (domain.Job, error) {
	job, err := s.st.GetJob(ctx, id)
	if err != nil {
		return domain.Job{}, jobErr(id, err)
	}
	if err := s.authorize(ctx, p, authz.JobRead, jobResource(job)); err != nil {
		return domain.Job{}, err
	}
	return job, nil
}

// Checkpoint is one kept checkpoint opened for reading, from whichever
// tier holds it. The caller closes it.
type Checkpoint struct {
	Name string
	Tier string // where it is read from: domain.TierLocal or domain.TierObject
	// Walk calls fn with each regular file of the checkpoint, in order of
	// path: rel is below the checkpoint directory's parent ("NAME/sub/f",
	// or "NAME" for a one-file checkpoint). Read from the object store, a
	// copy that turns out not to be the registered checkpoint ends in an
	// error matching tier.ErrMismatch after its last file.
	Walk  func(ctx context.Context, fn func(rel string, size int64, modTime time.Time, r io.Reader) error) error
	Close func() error
}

// WriteTar writes the checkpoint's regular files to w as a tar archive,
// as downloads serve it: links and special files the job left in the
// checkpoint are not part of it. An error after the first byte leaves w
// holding a broken archive; the caller cuts the stream.
func (c Checkpoint) WriteTar(ctx context.Context, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := c.Walk(ctx, func(rel string, size int64, modTime time.Time, f io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: 0o644, Size: size, ModTime: modTime, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := io.Copy(tw, io.LimitReader(f, size))
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// OpenCheckpoint opens a kept checkpoint of the job, for download: its
// local copy when it is there, else its object copy. Whoever may read the
// job may, and so may the job token of its latest attempt while that
// attempt is starting or running (checkpointReader): its in-job agent
// fetches the checkpoint the attempt resumes from.
func (s *ArtifactService) OpenCheckpoint(ctx context.Context, p Principal, id int64, name string) (Checkpoint, error) {
	job, err := s.checkpointReader(ctx, p, id)
	if err != nil {
		return Checkpoint{}, err
	}
	cs, err := s.st.ListCheckpoints(ctx, job.ID, false)
	if err != nil {
		return Checkpoint{}, err
	}
	i := slices.IndexFunc(cs, func(c domain.CheckpointRecord) bool { return c.Name == name })
	if i < 0 {
		return Checkpoint{}, domain.Errorf(domain.ErrNotFound, "job %d has no kept checkpoint %q; see: trainyard checkpoints ls %d", id, name, id)
	}
	rec := cs[i]
	if rec.OnLocal() {
		if c, ok := s.openLocalCheckpoint(ctx, job, name); ok {
			return c, nil
		}
	}
	if rec.OnObject() && s.cfg.Blobs != nil {
		return s.openObjectCheckpoint(rec), nil
	}
	return Checkpoint{}, domain.Errorf(domain.ErrNotFound, "checkpoint %q of job %d is registered but no longer on disk", name, id)
}

// openLocalCheckpoint opens the checkpoint in the job's output tree.
func (s *ArtifactService) openLocalCheckpoint(ctx context.Context, job domain.Job, name string) (Checkpoint, bool) {
	o, err := s.openOutputs(ctx, job)
	if err != nil {
		return Checkpoint{}, false
	}
	// Still a directory or a regular file (the listing holds nothing
	// else: a link put in its place is not it).
	found, err := o.Checkpoints(ctx)
	if err != nil || !slices.ContainsFunc(found, func(c executor.Checkpoint) bool { return c.Name == name }) {
		o.Close()
		return Checkpoint{}, false
	}
	rel := executor.CheckpointsDir + "/" + name
	return Checkpoint{Name: name, Tier: domain.TierLocal, Close: o.Close,
		Walk: func(ctx context.Context, fn func(string, int64, time.Time, io.Reader) error) error {
			return o.Walk(ctx, rel, func(f executor.OutputFile) error {
				return fn(strings.TrimPrefix(f.Path, executor.CheckpointsDir+"/"), f.Size, f.ModTime, f)
			})
		}}, true
}

// openObjectCheckpoint reads the checkpoint's object copy, verified
// against its registered size and digest as it is read (tier.Walk).
func (s *ArtifactService) openObjectCheckpoint(rec domain.CheckpointRecord) Checkpoint {
	return Checkpoint{Name: rec.Name, Tier: domain.TierObject, Close: func() error { return nil },
		Walk: func(ctx context.Context, fn func(string, int64, time.Time, io.Reader) error) error {
			return tier.Walk(ctx, s.cfg.Blobs, rec, func(o tier.Object, one bool, r io.Reader) error {
				rel := rec.Name + "/" + o.Rel
				if one {
					rel = rec.Name
				}
				return fn(rel, o.Size, rec.At, r)
			})
		}}
}
