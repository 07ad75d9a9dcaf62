package client

import (
	"context"
	"io"
	"net/http"
	"net/url"

	"trainyard/internal/api/apitypes"
)

// secretPath is the path and query of one secret; project "" is global.
func secretPath(name, project string) (string, url.Values) {
	q := url.Values{}
	if project != "" {
		q.Set("project", project)
	}
	return "/api/v1/secrets/" + url.PathEscape(name), q
}

// ListSecrets returns the newest version of each secret, never values:
// every secret when project is "", else the project's and the global ones
// it sees (those it overrides are marked Shadowed).
func (c *Client) ListSecrets(ctx context.Context, project string) ([]apitypes.Secret, error) {
	q := url.Values{}
	if project != "" {
		q.Set("project", project)
	}
	var list apitypes.SecretList
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/secrets", q, nil, nil, &list)
	return list.Secrets, err
}

// SetSecret stores value as the next version of secret name (project ""
// for a global secret) and returns its description.
func (c *Client) SetSecret(ctx context.Context, name, project, value string) (apitypes.Secret, error) {
	path, q := secretPath(name, project)
	var out apitypes.Secret
	err := c.doJSON(ctx, http.MethodPut, path, q, nil, apitypes.SecretValue{Value: value}, &out)
	return out, err
}

// DeleteSecret removes every version of a secret.
func (c *Client) DeleteSecret(ctx context.Context, name, project string) error {
	path, q := secretPath(name, project)
	resp, err := c.do(ctx, http.MethodDelete, path, q, nil, nil, "application/json")
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	return resp.Body.Close()
}

// RotateKey asks the server to re-encrypt every secret under the master key
// in newKeyFile, a path on the server's machine, and to use that key from
// then on.
func (c *Client) RotateKey(ctx context.Context, newKeyFile string) (apitypes.RotateKeyResult, error) {
	var out apitypes.RotateKeyResult
	err := c.doJSON(ctx, http.MethodPost, "/api/v1/secrets/rotate-key", nil, nil,
		apitypes.RotateKeyRequest{NewKeyFile: newKeyFile}, &out)
	return out, err
}
