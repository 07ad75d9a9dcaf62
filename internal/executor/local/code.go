package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"trainyard/internal/executor"
)

// codeDirFile, in the attempt directory, names where the attempt's code
// package was unpacked, for Release to remove.
const codeDirFile = "code_dir"

// unpackCode gives the attempt its own copy of the job's code package:
// unpacked into a temporary sibling of c.Dir, renamed into place once
// complete, so an existing c.Dir is an earlier unpack of the same attempt
// (a launch that reattaches) and is left alone. The unpack (about 0.5 s
// per 10,000 files) runs in Launch, off the control loop.
func (e *Executor) unpackCode(ctx context.Context, c *executor.Code) error {
	if _, err := os.Lstat(c.Dir); err == nil {
		return nil
	}
	fail := func(err error) error {
		return fmt.Errorf("cannot unpack the job's code package %s into %s: %w", c.SHA256, c.Dir, err)
	}
	if c.Open == nil {
		return fail(errors.New("no way to read the package was given"))
	}
	if e.cfg.Unpack == nil {
		return fail(errors.New("this executor was given no way to unpack code packages"))
	}
	rc, err := c.Open(ctx)
	if err != nil {
		return fail(err)
	}
	defer rc.Close()
	if err := os.MkdirAll(filepath.Dir(c.Dir), 0o755); err != nil {
		return fail(err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(c.Dir), "."+filepath.Base(c.Dir)+".unpack-")
	if err != nil {
		return fail(err)
	}
	err = e.cfg.Unpack(rc, tmp)
	if err == nil {
		// The archive may end before the stream does: read the rest so
		// the package's hash covers every byte.
		_, err = io.Copy(io.Discard, rc)
	}
	if err == nil {
		err = os.Chmod(tmp, 0o755) // MkdirTemp makes it 0700
	}
	if err == nil {
		err = os.Rename(tmp, c.Dir)
	}
	if err != nil {
		os.RemoveAll(tmp)
		return fail(err)
	}
	return nil
}
