package client

import (
	"context"
	"io"
	"net/http"
	"net/url"

	"trainyard/internal/api/apitypes"
)

// notifyQuery names another user's default ("": the caller's).
func notifyQuery(user string) url.Values {
	q := url.Values{}
	if user != "" {
		q.Set("user", user)
	}
	return q
}

// GetNotify returns a user's default job-end notification ("": the
// caller's); an *APIError with status 404 when there is none.
func (c *Client) GetNotify(ctx context.Context, user string) (apitypes.NotifyPref, error) {
	var out apitypes.NotifyPref
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/notify", notifyQuery(user), nil, nil, &out)
	return out, err
}

// PutNotify sets or replaces a user's default job-end notification ("":
// the caller's) and returns it as stored.
func (c *Client) PutNotify(ctx context.Context, user string, p apitypes.NotifyPref) (apitypes.NotifyPref, error) {
	var out apitypes.NotifyPref
	err := c.doJSON(ctx, http.MethodPut, "/api/v1/notify", notifyQuery(user), nil, p, &out)
	return out, err
}

// DeleteNotify clears a user's default job-end notification ("": the
// caller's).
func (c *Client) DeleteNotify(ctx context.Context, user string) error {
	resp, err := c.do(ctx, http.MethodDelete, "/api/v1/notify", notifyQuery(user), nil, nil, "application/json")
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	return resp.Body.Close()
}
