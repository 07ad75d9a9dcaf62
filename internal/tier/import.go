package tier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
)

// Import copies checkpoint c of one job, read from src (that job's
// outputs), into dst (another job's outputs, which must be an
// executor.Restorer) as CheckpointsDir/<c.Name>, the way Restore brings
// one back from the object store: into a hidden staging path first, then
// moved into place, made complete and digested in place. Nothing already
// at the name is replaced: a copy there with c's digest is kept (nil),
// anything else is an error. A copy that does not verify is removed.
func Import(ctx context.Context, src, dst executor.Outputs, c domain.CheckpointRecord) error {
	w, ok := dst.(executor.Restorer)
	if !ok {
		return errors.New("this executor's outputs cannot be written by the server")
	}
	rel := executor.CheckpointsDir + "/" + c.Name
	if got, err := dst.Digest(ctx, c.Name); err == nil && (c.SHA256 == "" || got.SHA256 == c.SHA256) {
		return nil
	}
	if _, err := dst.Open(ctx, rel); err == nil || errors.Is(err, executor.ErrNotRegular) {
		return fmt.Errorf("import checkpoint %s of job %d: something else is in its place in the checkpoint directory", c.Name, c.JobID)
	}
	stage := stagingName(c.Name)
	if err := dst.Remove(ctx, stage); err != nil {
		return err
	}
	single := false
	err := src.Walk(ctx, rel, func(f executor.OutputFile) error {
		to := stage
		if f.Path == rel {
			single = true
		} else {
			to = stage + strings.TrimPrefix(f.Path, rel)
		}
		out, err := w.CreateFile(ctx, to)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, f); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err == nil {
		err = w.Rename(ctx, stage, rel)
	}
	if err != nil {
		_ = dst.Remove(ctx, stage)
		return fmt.Errorf("import checkpoint %s of job %d: %w", c.Name, c.JobID, err)
	}
	if single {
		// A file made complete by its marker beside it, which is no
		// data: mark the copy complete the same way.
		if err := dst.MarkComplete(ctx, c.Name); err != nil {
			return err
		}
	}
	got, err := dst.Digest(ctx, c.Name)
	if err == nil && c.SHA256 != "" && got.SHA256 != c.SHA256 {
		err = fmt.Errorf("checkpoint %s of job %d copied with sha256 %s, want %s: %w", c.Name, c.JobID, got.SHA256, c.SHA256, ErrMismatch)
	}
	if err != nil {
		_ = dst.Remove(ctx, rel)
		_ = dst.Remove(ctx, rel+domain.CheckpointMarker)
		return err
	}
	return nil
}
