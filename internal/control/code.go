package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"trainyard/internal/blob"
	"trainyard/internal/codepkg"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
)

// codeFor returns the code package an attempt of a job submitted with
// --context runs: the executor unpacks a fresh copy of it into the
// attempt's working directory (logs.Layout.WorkDir), which is where the
// process runs unless the spec sets workdir, before the attempt starts
// (executor.Launch.Code). It also returns the variables that tell the job
// where its code is: TRAINYARD_CODE_DIR, TRAINYARD_CODE_SHA256 and, when
// known, TRAINYARD_GIT_COMMIT. A job without a package gets nil.
func (c *Controller) codeFor(ji *jobInfo, id int64, attempt int) (*executor.Code, []string) {
	code := ji.code
	if code == nil {
		return nil, nil
	}
	dir := c.cfg.Logs.WorkDir(id, attempt)
	env := []string{"TRAINYARD_CODE_DIR=" + dir, "TRAINYARD_CODE_SHA256=" + code.SHA256}
	if code.Commit != "" {
		env = append(env, "TRAINYARD_GIT_COMMIT="+code.Commit)
	}
	sha := code.SHA256
	return &executor.Code{SHA256: sha, Dir: dir, Open: func(ctx context.Context) (io.ReadCloser, error) { return c.openCode(ctx, sha) }}, env
}

// openCode reads code package sha from the blob store, failing on the
// first bytes that do not match it.
func (c *Controller) openCode(ctx context.Context, sha string) (io.ReadCloser, error) {
	if c.cfg.Blobs == nil {
		return nil, errors.New("this server has no blob store configured; it cannot run jobs submitted with --context")
	}
	hex, err := codepkg.ParseHash(sha)
	if err != nil {
		return nil, err
	}
	key := codepkg.BlobKey(sha)
	rc, _, err := c.cfg.Blobs.Get(ctx, key)
	if errors.Is(err, blob.ErrNotFound) {
		return nil, errors.New("the package is missing from the blob store; submit the job again with --context to upload it")
	}
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{corruptHint{blob.VerifyingReader(key, rc, hex)}, rc}, nil
}

// corruptHint says what to do when the stored package is corrupt.
type corruptHint struct{ r io.Reader }

func (h corruptHint) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if errors.Is(err, blob.ErrCorrupt) {
		err = fmt.Errorf("the stored package is corrupt (%s); submit the job again with --context", strings.TrimPrefix(err.Error(), "blob "))
	}
	return n, err
}

// release hands an ended attempt's workspace back to the executor
// (executor.Release: its unpacked code package, HOME, tmp, cgroups), off
// the loop: the executor may wait for the attempt's supervisor to exit.
// The attempt's log and outcome record stay.
func (c *Controller) release(ref executor.Ref) {
	parent := c.runCtx
	if parent == nil {
		parent = context.Background()
	}
	c.outputsWG.Add(1) // Run waits for it
	go func() {
		defer c.outputsWG.Done()
		ctx, cancel := context.WithTimeout(parent, time.Minute)
		defer cancel()
		if err := c.cfg.Executor.Release(ctx, ref); err != nil && !errors.Is(err, domain.ErrNotFound) && parent.Err() == nil {
			c.log.Warn("release the attempt's workspace", "attempt", ref.String(), "err", err)
		}
	}()
}
