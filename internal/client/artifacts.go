package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"trainyard/internal/api/apitypes"
)

// Manifest returns a job's outputs as recorded when an attempt ended
// (attempt 0: the latest), with their lineage.
func (c *Client) Manifest(ctx context.Context, id int64, attempt int) (apitypes.Manifest, error) {
	q := url.Values{}
	if attempt > 0 {
		q.Set("attempt", strconv.Itoa(attempt))
	}
	var out apitypes.Manifest
	err := c.doJSON(ctx, http.MethodGet, fmt.Sprintf("/api/v1/jobs/%d/artifacts", id), q, nil, nil, &out)
	return out, err
}

// OpenArtifact opens one output file from byte offset on (0: the whole
// file). It returns the body, the length to expect and the manifest's
// SHA-256 of the whole file.
func (c *Client) OpenArtifact(ctx context.Context, id int64, path string, offset int64) (io.ReadCloser, int64, string, error) {
	var h http.Header
	if offset > 0 {
		h = http.Header{"Range": {fmt.Sprintf("bytes=%d-", offset)}}
	}
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	resp, err := c.do(ctx, http.MethodGet, fmt.Sprintf("/api/v1/jobs/%d/artifacts/%s", id, strings.Join(segs, "/")), nil, h, nil, "application/octet-stream")
	if err != nil {
		return nil, 0, "", err
	}
	if offset > 0 && resp.StatusCode != http.StatusPartialContent {
		resp.Body.Close()
		return nil, 0, "", fmt.Errorf("the server did not resume %s at byte %d (status %d)", path, offset, resp.StatusCode)
	}
	return resp.Body, resp.ContentLength, resp.Header.Get("X-Trainyard-SHA256"), nil
}

// Checkpoints lists a job's registered checkpoints.
func (c *Client) Checkpoints(ctx context.Context, id int64) (apitypes.CheckpointList, error) {
	var out apitypes.CheckpointList
	err := c.doJSON(ctx, http.MethodGet, fmt.Sprintf("/api/v1/jobs/%d/checkpoints", id), nil, nil, nil, &out)
	return out, err
}

// CheckpointUsage sums checkpoint space per job and project.
func (c *Client) CheckpointUsage(ctx context.Context, project string) (apitypes.CheckpointUsageList, error) {
	q := url.Values{}
	if project != "" {
		q.Set("project", project)
	}
	var out apitypes.CheckpointUsageList
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/checkpoints/usage", q, nil, nil, &out)
	return out, err
}

// GC asks the server to remove what its retention policies let go (with
// dryRun: only to list it).
func (c *Client) GC(ctx context.Context, dryRun bool) (apitypes.GCReport, error) {
	var out apitypes.GCReport
	err := c.doJSON(ctx, http.MethodPost, "/api/v1/gc", nil, nil, apitypes.GCRequest{DryRun: dryRun}, &out)
	return out, err
}

// CheckpointArchive opens a kept checkpoint as a tar stream (paths under
// NAME/); the caller closes it.
func (c *Client) CheckpointArchive(ctx context.Context, id int64, name string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, http.MethodGet, fmt.Sprintf("/api/v1/jobs/%d/checkpoints/%s/archive", id, url.PathEscape(name)), nil, nil, nil, "application/x-tar")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}
