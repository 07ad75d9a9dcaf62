package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"trainyard/internal/authz"
	"trainyard/internal/blob"
	"trainyard/internal/codepkg"
	"trainyard/internal/domain"
)

// Code packages (submit --context, docs/code.md): content-addressed tar.gz
// archives of a source tree, kept in the blob store under
// code/sha256/<hex>.tar.gz. Anyone who may submit jobs in some project may
// upload one; a submit names it by hash and the job records it.

// ErrNoCodeStore reports a server configured without a blob store for code
// packages.
var ErrNoCodeStore = errors.New("this server keeps no code packages (it has no blob store); submit without --context")

// ErrCodeTooLarge reports an upload over the server's size limit; errors of
// type *CodeTooLargeError match it.
var ErrCodeTooLarge = errors.New("code package too large")

// ErrCodeMismatch reports an upload whose content does not hash to the
// hash it was sent under; nothing was stored.
var ErrCodeMismatch = errors.New("code package content does not match its hash")

// CodeTooLargeError is an upload over the size limit.
type CodeTooLargeError struct {
	Size  int64 // declared size; -1 when only the stream showed it
	Limit int64
}

func (e *CodeTooLargeError) Error() string {
	what := "the code package"
	if e.Size >= 0 {
		what += " (" + codepkg.FormatBytes(e.Size) + ")"
	}
	return fmt.Sprintf("%s is larger than this server's limit of %s; leave out what the job does not need with a .trainyardignore file in the context directory",
		what, codepkg.FormatBytes(e.Limit))
}

// Is makes a *CodeTooLargeError match ErrCodeTooLarge.
func (e *CodeTooLargeError) Is(target error) bool { return target == ErrCodeTooLarge }

// CodeInfo describes a stored code package.
type CodeInfo struct {
	SHA256 string // "sha256:<hex>"
	Size   int64  // bytes
}

// maxCode is the largest code package accepted.
func (s *JobService) maxCode() int64 {
	if s.cfg.MaxCodeBytes > 0 {
		return s.cfg.MaxCodeBytes
	}
	return codepkg.DefaultMaxSize
}

// authorizeCode lets through callers who may submit a job in at least one
// project (and admins); others are refused and the denial is audited.
func (s *JobService) authorizeCode(ctx context.Context, p Principal) error {
	for _, pr := range p.Projects {
		if authz.Decide(p, authz.JobSubmit, authz.Resource{Kind: "job", Project: pr.Project}).Allow {
			return nil
		}
	}
	return s.authorize(ctx, p, authz.JobSubmit, authz.Resource{Kind: "code"})
}

// codeKey checks hash and returns its blob key.
func (s *JobService) codeKey(hash string) (string, error) {
	if _, err := codepkg.ParseHash(hash); err != nil {
		return "", domain.FieldErrors{{Path: "hash", Message: err.Error()}}
	}
	if s.cfg.Blobs == nil {
		return "", ErrNoCodeStore
	}
	return codepkg.BlobKey(hash), nil
}

// StatCode reports whether the code package with this hash is stored; a
// missing one is an error matching domain.ErrNotFound.
func (s *JobService) StatCode(ctx context.Context, p Principal, hash string) (CodeInfo, error) {
	if err := s.authorizeCode(ctx, p); err != nil {
		return CodeInfo{}, err
	}
	key, err := s.codeKey(hash)
	if err != nil {
		return CodeInfo{}, err
	}
	info, err := s.cfg.Blobs.Stat(ctx, key)
	if errors.Is(err, blob.ErrNotFound) {
		return CodeInfo{}, domain.Errorf(domain.ErrNotFound, "no code package %s on this server; upload it with PUT", hash)
	}
	if err != nil {
		return CodeInfo{}, fmt.Errorf("look up code package %s: %w", hash, err)
	}
	return CodeInfo{SHA256: hash, Size: info.Size}, nil
}

// PutCode stores the code package read from body under hash. size is the
// body's length, or -1 when unknown. A package already stored is not read
// again (created is false). Content that does not hash to hash is refused
// with an error matching ErrCodeMismatch, a body over the server's limit
// with one matching ErrCodeTooLarge; in both cases nothing is stored.
func (s *JobService) PutCode(ctx context.Context, p Principal, hash string, body io.Reader, size int64) (info CodeInfo, created bool, err error) {
	if err := s.authorizeCode(ctx, p); err != nil {
		return CodeInfo{}, false, err
	}
	key, err := s.codeKey(hash)
	if err != nil {
		return CodeInfo{}, false, err
	}
	limit := s.maxCode()
	if size > limit {
		return CodeInfo{}, false, &CodeTooLargeError{Size: size, Limit: limit}
	}
	if st, err := s.cfg.Blobs.Stat(ctx, key); err == nil {
		return CodeInfo{SHA256: hash, Size: st.Size}, false, nil
	} else if !errors.Is(err, blob.ErrNotFound) {
		return CodeInfo{}, false, fmt.Errorf("look up code package %s: %w", hash, err)
	}
	want := strings.TrimPrefix(hash, codepkg.HashPrefix)
	lr := &capReader{r: body, left: limit}
	st, err := s.cfg.Blobs.Put(ctx, key, blob.VerifyingReader(key, lr, want), size)
	var corrupt *blob.CorruptError
	switch {
	case lr.over:
		return CodeInfo{}, false, &CodeTooLargeError{Size: -1, Limit: limit}
	case errors.As(err, &corrupt):
		return CodeInfo{}, false, fmt.Errorf("%w: the uploaded bytes hash to sha256:%s, not %s; nothing was stored (build the package again and upload what you hashed)",
			ErrCodeMismatch, corrupt.Got, hash)
	case errors.Is(err, blob.ErrSizeMismatch):
		return CodeInfo{}, false, domain.FieldErrors{{Path: "body", Message: fmt.Sprintf("is not the %d bytes the request declared; nothing was stored", size)}}
	case err != nil:
		return CodeInfo{}, false, fmt.Errorf("store code package %s: %w", hash, err)
	}
	s.appendAudit(ctx, domain.AuditRecord{
		At: s.cfg.Clock.Now(), Actor: p.Actor(), Action: string(authz.JobSubmit), Target: "code/" + hash,
		After: summary(map[string]any{"size": st.Size}), Result: domain.AuditOK, Client: ClientFrom(ctx),
	})
	return CodeInfo{SHA256: hash, Size: st.Size}, true, nil
}

// capReader fails once more than left bytes come through.
type capReader struct {
	r    io.Reader
	left int64
	over bool
}

func (c *capReader) Read(p []byte) (int, error) {
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	if int64(n) > c.left {
		c.over = true
		return 0, ErrCodeTooLarge
	}
	c.left -= int64(n)
	return n, err
}

// checkCode validates a submit's code reference: a well-formed hash of a
// package stored on this server and a commit that looks like one.
func (s *JobService) checkCode(ctx context.Context, c *domain.CodeRef) error {
	if c == nil {
		return nil
	}
	var errs domain.FieldErrors
	if _, err := codepkg.ParseHash(c.SHA256); err != nil {
		errs.Add("code.sha256", "%v", err)
	}
	if n := len(c.Commit); c.Commit != "" && ((n != 40 && n != 64) || strings.Trim(c.Commit, "0123456789abcdef") != "") {
		errs.Add("code.commit", "%q is not a git commit id (40 or 64 lowercase hex digits)", c.Commit)
	}
	if err := errs.Err(); err != nil {
		return err
	}
	if s.cfg.Blobs == nil {
		return domain.FieldErrors{{Path: "code", Message: ErrNoCodeStore.Error()}}
	}
	_, err := s.cfg.Blobs.Stat(ctx, codepkg.BlobKey(c.SHA256))
	if errors.Is(err, blob.ErrNotFound) {
		return domain.FieldErrors{{Path: "code.sha256", Message: fmt.Sprintf("no code package %s on this server; upload it first (trainyard submit --context does)", c.SHA256)}}
	}
	if err != nil {
		return fmt.Errorf("look up code package %s: %w", c.SHA256, err)
	}
	return nil
}
