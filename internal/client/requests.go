package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"trainyard/internal/api/apitypes"
)

// RequestQuota files a compute request and returns it as stored (pending).
func (c *Client) RequestQuota(ctx context.Context, r apitypes.QuotaRequest) (apitypes.QuotaRequest, error) {
	var out apitypes.QuotaRequest
	err := c.doJSON(ctx, http.MethodPost, "/api/v1/quota-requests", nil, nil, r, &out)
	return out, err
}

// ListRequests returns compute requests newest first; a non-empty project or
// pool filters them.
func (c *Client) ListRequests(ctx context.Context, project, pool string) ([]apitypes.QuotaRequest, error) {
	q := url.Values{}
	if project != "" {
		q.Set("project", project)
	}
	if pool != "" {
		q.Set("pool", pool)
	}
	var list apitypes.QuotaRequestList
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/quota-requests", q, nil, nil, &list)
	return list.Requests, err
}

// DecideRequest approves or denies a pending compute request.
func (c *Client) DecideRequest(ctx context.Context, id int64, approve bool, note string) (apitypes.QuotaRequest, error) {
	verb := "deny"
	if approve {
		verb = "approve"
	}
	var out apitypes.QuotaRequest
	err := c.doJSON(ctx, http.MethodPost, fmt.Sprintf("/api/v1/quota-requests/%d/%s", id, verb), nil, nil, apitypes.Decision{Note: note}, &out)
	return out, err
}
