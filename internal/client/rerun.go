package client

import (
	"context"
	"net/http"

	"trainyard/internal/api/apitypes"
)

// Rerun submits a new job from the config snapshot of job id, with req's
// changes applied; the new job's RerunOf names id. A non-empty
// idempotencyKey is sent as the Idempotency-Key header, as in Submit.
func (c *Client) Rerun(ctx context.Context, id int64, req apitypes.RerunRequest, idempotencyKey string) (apitypes.Job, error) {
	var job apitypes.Job
	h := http.Header{}
	if idempotencyKey != "" {
		h.Set("Idempotency-Key", idempotencyKey)
	}
	err := c.doJSON(ctx, http.MethodPost, jobPath(id, "/rerun"), nil, h, req, &job)
	return job, err
}
