package service

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"

	"trainyard/internal/authz"
	"trainyard/internal/codepkg"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
)

// Uploads of a job's outputs (PUT /api/v1/jobs/{id}/attempts/{n}/outputs/{path}):
// the in-job agent of a job whose files the server cannot read (a
// cluster's containers) sends each output file and checkpoint file to the
// server, with its attempt's job token, and the server writes it into the
// job's output tree through the executor (executor.Writer), where
// manifests, downloads and checkpoint registration read it.
//
// Every job is hostile: the path is checked here (relative, clean, no
// "..", bounded), and the executor writes below the tree only, following
// no link the job planted and writing through no file where a directory
// must be. A file is written to a temporary name beside it, then moved
// into place in one step: a reader sees the old file or the new one.
//
// Uploads are attempt reports: like metric reports and checkpoint
// registration they are not written to the audit log; a refused one is
// (authorize).

// DefaultMaxUploadBytes bounds one uploaded output file when the server
// names no limit (Config.MaxUploadBytes).
const DefaultMaxUploadBytes int64 = 16 << 30

// Limits of an upload's path: the whole, and each of its components.
const (
	MaxUploadPath     = 4096
	MaxUploadPathPart = 255
)

// uploadTempPrefix starts the temporary name of a file being uploaded:
// hidden and ".tmp…", so no listing of checkpoints takes it for one.
const uploadTempPrefix = ".tmp-upload-"

// ErrUploadTooLarge reports an upload over the server's per-file limit;
// errors of type *UploadTooLargeError match it.
var ErrUploadTooLarge = errors.New("upload too large")

// ErrNoUploads reports a server whose executor's output trees it cannot
// write (they are not an executor.Writer).
var ErrNoUploads = errors.New("this server cannot write job outputs: its executor's output trees are read-only to it")

// UploadTooLargeError is an upload over the per-file limit.
type UploadTooLargeError struct {
	Size  int64 // declared size; -1 when only the stream showed it
	Limit int64
}

func (e *UploadTooLargeError) Error() string {
	what := "the file"
	if e.Size >= 0 {
		what += " (" + codepkg.FormatBytes(e.Size) + ")"
	}
	return fmt.Sprintf("%s is larger than this server's limit of %s per uploaded output file; nothing was written (split it into smaller files)",
		what, codepkg.FormatBytes(e.Limit))
}

// Is makes an *UploadTooLargeError match ErrUploadTooLarge.
func (e *UploadTooLargeError) Is(target error) bool { return target == ErrUploadTooLarge }

// OutputUpload is a file written by PutOutput.
type OutputUpload struct {
	Path   string // as given: slash-separated, below the job's output directory
	Size   int64
	SHA256 string // hex
}

// MaxUploadBytes is the most one uploaded output file may hold.
func (s *ArtifactService) MaxUploadBytes() int64 {
	if s.cfg.MaxUploadBytes > 0 {
		return s.cfg.MaxUploadBytes
	}
	return DefaultMaxUploadBytes
}

// CheckUploadPath checks the path of an uploaded output file: relative and
// clean, slash-separated, no "..", "." or empty components, no NUL, at
// most MaxUploadPath bytes and MaxUploadPathPart per component. The error
// is a field error on "path".
func CheckUploadPath(rel string) error {
	bad := func(format string, args ...any) error {
		var errs domain.FieldErrors
		errs.Add("path", "%q %s", rel, fmt.Sprintf(format, args...))
		return errs.Err()
	}
	switch {
	case rel == "":
		return bad("is empty; give the file's path below TRAINYARD_OUTPUT_DIR, e.g. checkpoints/step-100/model.pt")
	case len(rel) > MaxUploadPath:
		return bad("is %d bytes long; paths are at most %d bytes", len(rel), MaxUploadPath)
	case strings.IndexByte(rel, 0) >= 0:
		return bad("holds a NUL byte; file names cannot")
	case strings.HasPrefix(rel, "/"):
		return bad("is absolute; give the path relative to TRAINYARD_OUTPUT_DIR, without the leading /")
	}
	for part := range strings.SplitSeq(rel, "/") {
		switch {
		case part == "":
			return bad("has an empty component (a doubled or trailing /); write the path clean, e.g. a/b, not a//b or a/")
		case part == "." || part == "..":
			return bad("has a %q component; give the clean path below TRAINYARD_OUTPUT_DIR, without . or ..", part)
		case len(part) > MaxUploadPathPart:
			return bad("has a component of %d bytes; each is at most %d bytes", len(part), MaxUploadPathPart)
		}
	}
	return nil
}

// PutOutput writes the file rel (slash-separated, relative) of the job's
// outputs with the bytes of body, for the attempt's agent: only that
// attempt's job token (authz.AttemptReport) may, and only while the
// attempt is the job's latest and has not ended. size is the body's
// declared length, or -1 when unknown. The directories above rel that are
// missing are made; a file at rel is replaced in one step; a link or a
// non-directory on the way, or anything but a regular file at rel, is a
// field error on "path", and nothing is written. A body over
// MaxUploadBytes is refused with an error matching ErrUploadTooLarge; on
// any error the temporary file is removed.
func (s *ArtifactService) PutOutput(ctx context.Context, p Principal, id int64, attempt int, rel string, body io.Reader, size int64) (OutputUpload, error) {
	job, err := s.st.GetJob(ctx, id)
	if err != nil {
		return OutputUpload{}, jobErr(id, err)
	}
	r := authz.Resource{Kind: "attempt", ID: domain.AttemptRef(id, attempt), Project: job.Project, Owner: job.Submitter}
	if err := s.authorize(ctx, p, authz.AttemptReport, r); err != nil {
		return OutputUpload{}, err
	}
	if err := CheckUploadPath(rel); err != nil {
		return OutputUpload{}, err
	}
	limit := s.MaxUploadBytes()
	if size > limit {
		return OutputUpload{}, &UploadTooLargeError{Size: size, Limit: limit}
	}
	if _, err := s.attemptActive(ctx, job, attempt, "writes the job's outputs"); err != nil {
		return OutputUpload{}, err
	}
	o, err := s.openOutputs(ctx, job)
	if errors.Is(err, fs.ErrNotExist) {
		// A job that runs where the server cannot see has no tree here
		// until its first upload.
		c, ok := s.cfg.Files.(executor.OutputsCreator)
		if !ok || job.OutputDir == "" {
			return OutputUpload{}, ErrNoUploads
		}
		o, err = c.CreateOutputs(ctx, job.OutputDir)
	}
	if err != nil {
		return OutputUpload{}, fmt.Errorf("open the outputs of job %d: %w", id, err)
	}
	defer o.Close()
	w, ok := o.(executor.Writer)
	if !ok {
		return OutputUpload{}, ErrNoUploads
	}

	tmp := path.Join(path.Dir(rel), uploadTempPrefix+randomHex(8))
	f, err := w.CreateFile(ctx, tmp)
	if err != nil {
		return OutputUpload{}, s.uploadErr(id, rel, err)
	}
	// Removed on any error, even once the request is gone.
	written := false
	defer func() {
		if !written {
			if err := o.Remove(context.WithoutCancel(ctx), tmp); err != nil {
				s.cfg.Logger.Warn("remove a failed upload's temporary file", "job", id, "attempt", attempt, "path", tmp, "err", err)
			}
		}
	}()
	in := &uploadReader{r: body, left: limit, limit: limit, h: sha256.New()}
	n, err := io.Copy(f, in)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	switch {
	case in.err != nil && errors.Is(in.err, ErrUploadTooLarge):
		return OutputUpload{}, in.err
	case in.err != nil:
		return OutputUpload{}, domain.FieldErrors{{Path: "body", Message: fmt.Sprintf("could not be read after %d bytes (%v); nothing was written, send the file again", n, in.err)}}
	case err != nil:
		return OutputUpload{}, fmt.Errorf("write output %q of job %d: %w", rel, id, err)
	case size >= 0 && n != size:
		return OutputUpload{}, domain.FieldErrors{{Path: "body", Message: fmt.Sprintf("is %d bytes, not the %d the request declared; nothing was written", n, size)}}
	}
	// The attempt may have ended while the file came in: its outputs are
	// then recorded (and a succeeded job's sealed) without it.
	if _, err := s.attemptActive(ctx, job, attempt, "writes the job's outputs"); err != nil {
		return OutputUpload{}, err
	}
	if err := w.Replace(ctx, tmp, rel); err != nil {
		return OutputUpload{}, s.uploadErr(id, rel, err)
	}
	written = true
	return OutputUpload{Path: rel, Size: n, SHA256: hex.EncodeToString(in.h.Sum(nil))}, nil
}

// attemptActive checks that attempt is job's latest and has not ended,
// and returns it. doing says what only such an attempt does, for the
// errors ("writes the job's outputs").
func (s *ArtifactService) attemptActive(ctx context.Context, job domain.Job, attempt int, doing string) (domain.Attempt, error) {
	atts, err := s.st.ListAttempts(ctx, job.ID)
	if err != nil {
		return domain.Attempt{}, err
	}
	i := slices.IndexFunc(atts, func(a domain.Attempt) bool { return a.Number == attempt })
	if i < 0 {
		return domain.Attempt{}, domain.Errorf(domain.ErrNotFound, "job %d has no attempt %d (it has %d); see: trainyard show %d", job.ID, attempt, len(atts), job.ID)
	}
	if latest := atts[len(atts)-1].Number; attempt != latest {
		return domain.Attempt{}, domain.Errorf(domain.ErrConflict, "attempt %d of job %d is not its latest (attempt %d is); only the latest attempt %s", attempt, job.ID, latest, doing)
	}
	if st := atts[i].State; st.Terminal() {
		return domain.Attempt{}, domain.Errorf(domain.ErrConflict, "attempt %d of job %d has ended (%s); an attempt %s only while it is starting or running", attempt, job.ID, st, doing)
	}
	return atts[i], nil
}

// uploadErr maps the executor's refusal to write rel to a field error on
// "path", or wraps another failure.
func (s *ArtifactService) uploadErr(id int64, rel string, err error) error {
	var errs domain.FieldErrors
	switch {
	case errors.Is(err, executor.ErrNotDir):
		errs.Add("path", "%q cannot be written: %v; the server writes through no link and into no file, so upload it to a path whose directories are directories", rel, err)
	case errors.Is(err, executor.ErrNotRegular):
		errs.Add("path", "%q cannot be written: %v; only a regular file is replaced, so upload it to another path", rel, err)
	case errors.Is(err, fs.ErrPermission):
		return domain.Errorf(domain.ErrConflict, "output %q of job %d cannot be written: %v (are its outputs sealed read-only?)", rel, id, err)
	default:
		return fmt.Errorf("write output %q of job %d: %w", rel, id, err)
	}
	return errs.Err()
}

// uploadReader passes on at most left bytes of r, hashing them, and keeps
// the first error of r (a reader's error, not the writer's) in err.
type uploadReader struct {
	r           io.Reader
	left, limit int64
	h           hash.Hash
	err         error
}

func (u *uploadReader) Read(p []byte) (int, error) {
	if u.err != nil {
		return 0, u.err
	}
	if int64(len(p)) > u.left+1 {
		p = p[:u.left+1]
	}
	n, err := u.r.Read(p)
	if int64(n) > u.left {
		u.err = &UploadTooLargeError{Size: -1, Limit: u.limit}
		return 0, u.err
	}
	u.left -= int64(n)
	u.h.Write(p[:n])
	if err != nil && err != io.EOF {
		u.err = err
	}
	return n, err
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
