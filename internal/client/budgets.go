package client

import (
	"context"
	"io"
	"net/http"
	"net/url"

	"trainyard/internal/api/apitypes"
)

// ListBudgets returns budgets with their spend, sorted by project; a
// non-empty project filters them.
func (c *Client) ListBudgets(ctx context.Context, project string) ([]apitypes.Budget, error) {
	q := url.Values{}
	if project != "" {
		q.Set("project", project)
	}
	var list apitypes.BudgetList
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/budgets", q, nil, nil, &list)
	return list.Budgets, err
}

// PutBudget creates or replaces the budget of b.Project and returns it
// with its spend.
func (c *Client) PutBudget(ctx context.Context, b apitypes.Budget) (apitypes.Budget, error) {
	var out apitypes.Budget
	err := c.doJSON(ctx, http.MethodPut, "/api/v1/budgets/"+url.PathEscape(b.Project), nil, nil, b, &out)
	return out, err
}

// DeleteBudget removes the budget of project.
func (c *Client) DeleteBudget(ctx context.Context, project string) error {
	resp, err := c.do(ctx, http.MethodDelete, "/api/v1/budgets/"+url.PathEscape(project), nil, nil, nil, "application/json")
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	return resp.Body.Close()
}
