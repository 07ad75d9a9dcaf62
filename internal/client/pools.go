package client

import (
	"context"
	"io"
	"net/http"
	"net/url"

	"trainyard/internal/api/apitypes"
)

// ListPools returns every pool, sorted by name.
func (c *Client) ListPools(ctx context.Context) ([]apitypes.Pool, error) {
	var list apitypes.PoolList
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/pools", nil, nil, nil, &list)
	return list.Pools, err
}

// GetPool returns one pool.
func (c *Client) GetPool(ctx context.Context, name string) (apitypes.Pool, error) {
	var p apitypes.Pool
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/pools/"+url.PathEscape(name), nil, nil, nil, &p)
	return p, err
}

// PutPool creates the pool p.Name or replaces it whole, and returns the pool
// as stored (with its capacity and times).
func (c *Client) PutPool(ctx context.Context, p apitypes.Pool) (apitypes.Pool, error) {
	var out apitypes.Pool
	err := c.doJSON(ctx, http.MethodPut, "/api/v1/pools/"+url.PathEscape(p.Name), nil, nil, p, &out)
	return out, err
}

// ListQuotas returns quotas sorted by project then pool; a non-empty project
// or pool filters them.
func (c *Client) ListQuotas(ctx context.Context, project, pool string) ([]apitypes.Quota, error) {
	q := url.Values{}
	if project != "" {
		q.Set("project", project)
	}
	if pool != "" {
		q.Set("pool", pool)
	}
	var list apitypes.QuotaList
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/quotas", q, nil, nil, &list)
	return list.Quotas, err
}

// PutQuota creates or replaces the quota of q.Project in q.Pool and returns
// it as stored.
func (c *Client) PutQuota(ctx context.Context, q apitypes.Quota) (apitypes.Quota, error) {
	var out apitypes.Quota
	err := c.doJSON(ctx, http.MethodPut, quotaPath(q.Project, q.Pool), nil, nil, q, &out)
	return out, err
}

// DeleteQuota removes the quota of project in pool.
func (c *Client) DeleteQuota(ctx context.Context, project, pool string) error {
	resp, err := c.do(ctx, http.MethodDelete, quotaPath(project, pool), nil, nil, nil, "application/json")
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	return resp.Body.Close()
}

// ListProjects returns every project with stored shares, sorted by name.
func (c *Client) ListProjects(ctx context.Context) ([]apitypes.Project, error) {
	var list apitypes.ProjectList
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/projects", nil, nil, nil, &list)
	return list.Projects, err
}

// SetProject creates the project or sets its shares, and returns it.
func (c *Client) SetProject(ctx context.Context, name string, shares float64) (apitypes.Project, error) {
	var out apitypes.Project
	err := c.doJSON(ctx, http.MethodPut, "/api/v1/projects/"+url.PathEscape(name), nil, nil,
		apitypes.Project{Name: name, Shares: shares}, &out)
	return out, err
}

// Queue returns the waiting jobs of pool (every pool's when pool is ""), in
// scheduling order.
func (c *Client) Queue(ctx context.Context, pool string) ([]apitypes.QueueEntry, error) {
	q := url.Values{}
	if pool != "" {
		q.Set("pool", pool)
	}
	var out apitypes.Queue
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/queue", q, nil, nil, &out)
	return out.Entries, err
}

func quotaPath(project, pool string) string {
	return "/api/v1/quotas/" + url.PathEscape(project) + "/" + url.PathEscape(pool)
}
