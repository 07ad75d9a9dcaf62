package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"trainyard/internal/api/apitypes"
)

// CreateTemplate stores body as the next version of template name (project
// "": the body's project, else "default"). When body equals the latest
// version, that version is returned with Created false.
func (c *Client) CreateTemplate(ctx context.Context, name, project, body string) (apitypes.Template, error) {
	var out apitypes.Template
	err := c.doJSON(ctx, http.MethodPost, "/api/v1/templates", nil, nil,
		apitypes.CreateTemplate{Name: name, Project: project, Body: body}, &out)
	return out, err
}

// ListTemplates returns the latest version of every template of project
// ("" for all), without bodies.
func (c *Client) ListTemplates(ctx context.Context, project string) ([]apitypes.Template, error) {
	q := url.Values{}
	if project != "" {
		q.Set("project", project)
	}
	var list apitypes.TemplateList
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/templates", q, nil, nil, &list)
	return list.Templates, err
}

// GetTemplate returns version of template name (0: the latest). project ""
// finds the one project that has a template of that name.
func (c *Client) GetTemplate(ctx context.Context, project, name string, version int) (apitypes.Template, error) {
	q := url.Values{}
	if project != "" {
		q.Set("project", project)
	}
	if version > 0 {
		q.Set("version", strconv.Itoa(version))
	}
	var out apitypes.Template
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/templates/"+url.PathEscape(name), q, nil, nil, &out)
	return out, err
}
