package client

import (
	"context"
	"net/url"

	"trainyard/internal/api/apitypes"
)

// ReportOptions selects a review report; zero fields take the server's
// defaults (every visible project, the last 7 days, by project).
type ReportOptions struct {
	Project string
	Since   string // a duration back from now ("7d") or a time, as the server reads it
	By      string // project or pool
}

// Report returns the review of a window, by group.
func (c *Client) Report(ctx context.Context, opts ReportOptions) (apitypes.Report, error) {
	q := url.Values{}
	for k, v := range map[string]string{"project": opts.Project, "since": opts.Since, "by": opts.By} {
		if v != "" {
			q.Set(k, v)
		}
	}
	var rep apitypes.Report
	err := c.doJSON(ctx, "GET", "/api/v1/report", q, nil, nil, &rep)
	return rep, err
}
