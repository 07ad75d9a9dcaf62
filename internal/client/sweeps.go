package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"trainyard/internal/api/apitypes"
)

// SubmitSweep stores a sweep or job array and its member jobs. A repeat
// with the same idempotencyKey returns the first sweep (Created false).
func (c *Client) SubmitSweep(ctx context.Context, req apitypes.SweepRequest, idempotencyKey string) (apitypes.Sweep, error) {
	var sw apitypes.Sweep
	h := http.Header{}
	if idempotencyKey != "" {
		h.Set("Idempotency-Key", idempotencyKey)
	}
	err := c.doJSON(ctx, http.MethodPost, "/api/v1/sweeps", nil, h, req, &sw)
	return sw, err
}

// ListSweeps returns sweeps, newest first.
func (c *Client) ListSweeps(ctx context.Context, project string, limit int) (apitypes.SweepList, error) {
	q := url.Values{}
	if project != "" {
		q.Set("project", project)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out apitypes.SweepList
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/sweeps", q, nil, nil, &out)
	return out, err
}

// GetSweep returns one sweep with its members counted and its best member.
func (c *Client) GetSweep(ctx context.Context, id int64) (apitypes.Sweep, error) {
	var sw apitypes.Sweep
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/sweeps/"+strconv.FormatInt(id, 10), nil, nil, nil, &sw)
	return sw, err
}

// CancelSweep cancels every member of the sweep that has not ended.
func (c *Client) CancelSweep(ctx context.Context, id int64, reason string) (apitypes.Sweep, error) {
	var sw apitypes.Sweep
	err := c.doJSON(ctx, http.MethodPost, "/api/v1/sweeps/"+strconv.FormatInt(id, 10)+"/cancel", nil, nil,
		apitypes.CancelRequest{Reason: reason}, &sw)
	return sw, err
}
