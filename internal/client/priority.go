package client

import (
	"context"
	"net/http"

	"trainyard/internal/api/apitypes"
)

// SetPriority changes a waiting job's priority class (low, normal, high,
// urgent), within what its project may use in its pool.
func (c *Client) SetPriority(ctx context.Context, id int64, priority string) (apitypes.Job, error) {
	var job apitypes.Job
	err := c.doJSON(ctx, http.MethodPost, jobPath(id, "/priority"), nil, nil, apitypes.PriorityRequest{Priority: priority}, &job)
	return job, err
}
