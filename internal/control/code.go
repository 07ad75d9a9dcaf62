package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"trainyard/internal/blob"
	"trainyard/internal/codepkg"
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

// removeCode removes the unpacked copy of an ended attempt's code package,
// its working directory (logs.Layout.WorkDir): a package may unpack to
// gigabytes, and every attempt gets its own. The attempt's log stays. A job
// without a package keeps its working directory, which holds only what the
// job wrote there.
//
// The removal runs off the loop, through an os.Root at the runs directory:
// a symbolic link the job left, inside the directory or in place of it or
// of its parents, is removed as a link and never followed outside.
func (c *Controller) removeCode(ctx context.Context, ref executor.Ref) {
	ji, err := c.info(ctx, ref.JobID)
	if err != nil || ji.code == nil {
		return
	}
	rel, err := filepath.Rel(c.cfg.Logs.Root, c.cfg.Logs.WorkDir(ref.JobID, ref.Attempt))
	if err != nil {
		c.log.Warn("remove unpacked code package", "attempt", ref.String(), "err", err)
		return
	}
	c.outputsWG.Add(1) // Run waits for it
	go func() {
		defer c.outputsWG.Done()
		root, err := os.OpenRoot(c.cfg.Logs.Root)
		if err == nil {
			err = root.RemoveAll(rel)
			root.Close()
		}
		if err != nil {
			c.log.Warn("remove unpacked code package", "attempt", ref.String(), "dir", rel, "err", err)
		}
	}()
}
