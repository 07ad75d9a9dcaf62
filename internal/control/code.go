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

// CodeLimits bounds what unpacking one attempt's code package may write
// (Config.Code).
type CodeLimits = codepkg.Limits

// prepareCode gives an attempt of a job with a code package (submit
// --context) a fresh copy of it: the package is unpacked from the blob store
// into the attempt's working directory (logs.Layout.WorkDir), which is where
// the process runs unless the spec sets workdir. It returns the variables
// that tell the job where its code is: TRAINYARD_CODE_DIR,
// TRAINYARD_CODE_SHA256 and, when known, TRAINYARD_GIT_COMMIT.
//
// The package is unpacked into a temporary sibling directory that is renamed
// into place once complete, so an existing working directory means an
// earlier launch of this attempt unpacked it already (a server restart
// reattaching to it): it is left alone. A job without a package gets nil.
//
// The unpack itself (about 0.5 s per 10,000 files) is returned as a
// function for the launch goroutine, so it does not hold the control loop.
func (c *Controller) prepareCode(ji *jobInfo, id int64, attempt int) ([]string, func(context.Context) error) {
	code := ji.code
	if code == nil {
		return nil, nil
	}
	dir := c.cfg.Logs.WorkDir(id, attempt)
	env := []string{"TRAINYARD_CODE_DIR=" + dir, "TRAINYARD_CODE_SHA256=" + code.SHA256}
	if code.Commit != "" {
		env = append(env, "TRAINYARD_GIT_COMMIT="+code.Commit)
	}
	return env, func(ctx context.Context) error { return c.unpackCode(ctx, code.SHA256, dir) }
}

// unpackCode unpacks code package sha into dir, unless dir exists.
func (c *Controller) unpackCode(ctx context.Context, sha, dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	fail := func(err error) error {
		return fmt.Errorf("cannot unpack the job's code package %s into %s: %w", sha, dir, err)
	}
	if c.cfg.Blobs == nil {
		return fail(errors.New("this server has no blob store configured; it cannot run jobs submitted with --context"))
	}
	hex, err := codepkg.ParseHash(sha)
	if err != nil {
		return fail(err)
	}
	key := codepkg.BlobKey(sha)
	rc, _, err := c.cfg.Blobs.Get(ctx, key)
	if errors.Is(err, blob.ErrNotFound) {
		return fail(errors.New("the package is missing from the blob store; submit the job again with --context to upload it"))
	}
	if err != nil {
		return fail(err)
	}
	defer rc.Close()
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fail(err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".unpack-")
	if err != nil {
		return fail(err)
	}
	vr := blob.VerifyingReader(key, rc, hex)
	err = codepkg.Unpack(vr, tmp, c.cfg.Code)
	if err == nil {
		// The archive may end before the stream does: read the rest so the
		// hash covers every byte.
		_, err = io.Copy(io.Discard, vr)
	}
	if err == nil {
		err = os.Chmod(tmp, 0o755) // MkdirTemp makes it 0700
	}
	if err == nil {
		err = os.Rename(tmp, dir)
	}
	if err != nil {
		os.RemoveAll(tmp)
		if errors.Is(err, blob.ErrCorrupt) {
			err = fmt.Errorf("the stored package is corrupt (%s); submit the job again with --context", strings.TrimPrefix(err.Error(), "blob "))
		}
		return fail(err)
	}
	return nil
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
