package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"trainyard/internal/api/apitypes"
)

// ReportMetrics stores training metrics for one attempt (a job token of
// that attempt, or an admin).
func (c *Client) ReportMetrics(ctx context.Context, jobID int64, attempt int, points []apitypes.MetricsStep) (apitypes.MetricsReportResult, error) {
	var out apitypes.MetricsReportResult
	path := fmt.Sprintf("/api/v1/jobs/%d/attempts/%d/metrics", jobID, attempt)
	err := c.doJSON(ctx, http.MethodPost, path, nil, nil, apitypes.MetricsReport{Points: points}, &out)
	return out, err
}

// Metrics returns a job's metric series: one key, or all when key is "";
// maxPoints bounds each series (0: the server's default).
func (c *Client) Metrics(ctx context.Context, jobID int64, key string, maxPoints int) (apitypes.MetricSeries, error) {
	q := url.Values{}
	if key != "" {
		q.Set("key", key)
	}
	if maxPoints > 0 {
		q.Set("max", strconv.Itoa(maxPoints))
	}
	var out apitypes.MetricSeries
	err := c.doJSON(ctx, http.MethodGet, fmt.Sprintf("/api/v1/jobs/%d/metrics", jobID), q, nil, nil, &out)
	return out, err
}
