package client

import (
	"context"
	"net/url"

	"trainyard/internal/api/apitypes"
)

// CostOptions selects a spend report; zero fields take the server's
// defaults (every visible project, the last 30 days, by project).
type CostOptions struct {
	Project string
	Since   string // a duration back from now ("30d") or a time, as the server reads it
	By      string // project, pool, user, job or day (a review: project or pool)
}

// Cost returns what attempts cost over a window, by group.
func (c *Client) Cost(ctx context.Context, opts CostOptions) (apitypes.CostReport, error) {
	var rep apitypes.CostReport
	err := c.doJSON(ctx, "GET", "/api/v1/cost", opts.query(), nil, nil, &rep)
	return rep, err
}

// query is opts as a report's query parameters, the empty ones left out.
func (opts CostOptions) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"project": opts.Project, "since": opts.Since, "by": opts.By} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}
