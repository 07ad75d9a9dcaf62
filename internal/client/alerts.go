package client

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"trainyard/internal/api/apitypes"
)

// AlertOptions filters GET /api/v1/alerts; zero values mean no filter.
type AlertOptions struct {
	State string // firing or resolved
	JobID int64
	Limit int
}

// ListAlerts returns alerts, newest first.
func (c *Client) ListAlerts(ctx context.Context, opts AlertOptions) ([]apitypes.Alert, error) {
	q := url.Values{}
	if opts.State != "" {
		q.Set("state", opts.State)
	}
	if opts.JobID > 0 {
		q.Set("job", strconv.FormatInt(opts.JobID, 10))
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	var out apitypes.AlertList
	if err := c.doJSON(ctx, http.MethodGet, "/api/v1/alerts", q, nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Alerts, nil
}

// TestAlertChannel asks the server to send a test notification to channel;
// the error says why the channel did not accept it.
func (c *Client) TestAlertChannel(ctx context.Context, channel string) error {
	b, err := json.Marshal(apitypes.AlertTest{Channel: channel})
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, http.MethodPost, "/api/v1/alerts/test", nil, nil, bytes.NewReader(b), "application/json")
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	return resp.Body.Close()
}

// AckAlert acknowledges the firing alert id, with an optional reason, and
// returns it as acknowledged.
func (c *Client) AckAlert(ctx context.Context, id int64, reason string) (apitypes.Alert, error) {
	var out apitypes.Alert
	err := c.doJSON(ctx, http.MethodPost, "/api/v1/alerts/"+strconv.FormatInt(id, 10)+"/ack", nil, nil, apitypes.AlertAck{Reason: reason}, &out)
	return out, err
}
