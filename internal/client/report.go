package client

import (
	"context"

	"trainyard/internal/api/apitypes"
)

// ReportOptions selects a review report as CostOptions selects a spend
// report; zero fields take the server's defaults (every visible project,
// the last 7 days, by project or pool).
type ReportOptions = CostOptions

// Report returns the review of a window, by group.
func (c *Client) Report(ctx context.Context, opts ReportOptions) (apitypes.Report, error) {
	var rep apitypes.Report
	err := c.doJSON(ctx, "GET", "/api/v1/report", opts.query(), nil, nil, &rep)
	return rep, err
}
