package router

import (
	"context"
	"errors"

	"trainyard/internal/executor"
)

// CreateOutputs makes a job's output tree through Files when Files can
// (executor.OutputsCreator), as before a job's first attempt that starts
// from a checkpoint copied in from another job.
func (r *Router) CreateOutputs(ctx context.Context, dir string) (executor.Outputs, error) {
	c, ok := r.Files.(executor.OutputsCreator)
	if !ok {
		return nil, errors.New("this server's outputs cannot be created before a job's first attempt")
	}
	return c.CreateOutputs(ctx, dir)
}
