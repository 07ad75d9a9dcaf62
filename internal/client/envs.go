package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"trainyard/internal/api/apitypes"
)

// RegisterEnv stores def as the next version of its environment. When a
// stored version has the same definition, that version is returned with
// Created false.
func (c *Client) RegisterEnv(ctx context.Context, def apitypes.RegisterEnv) (apitypes.Env, error) {
	var out apitypes.Env
	err := c.doJSON(ctx, http.MethodPost, "/api/v1/envs", nil, nil, def, &out)
	return out, err
}

// ListEnvs returns every version of environment name ("" for every
// environment), ordered by name then version.
func (c *Client) ListEnvs(ctx context.Context, name string) ([]apitypes.Env, error) {
	path := "/api/v1/envs"
	if name != "" {
		path += "/" + url.PathEscape(name)
	}
	var list apitypes.EnvList
	err := c.doJSON(ctx, http.MethodGet, path, nil, nil, nil, &list)
	return list.Envs, err
}

// GetEnv returns version (from 1) of environment name.
func (c *Client) GetEnv(ctx context.Context, name string, version int) (apitypes.Env, error) {
	var out apitypes.Env
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/envs/"+url.PathEscape(name)+"/"+strconv.Itoa(version), nil, nil, nil, &out)
	return out, err
}

// DeprecateEnv marks version of environment name deprecated (0: every
// version) and returns the versions concerned.
func (c *Client) DeprecateEnv(ctx context.Context, name string, version int, reason string) ([]apitypes.Env, error) {
	v := "all"
	if version > 0 {
		v = strconv.Itoa(version)
	}
	var list apitypes.EnvList
	err := c.doJSON(ctx, http.MethodPost, "/api/v1/envs/"+url.PathEscape(name)+"/"+v+"/deprecate", nil, nil,
		apitypes.DeprecateEnv{Reason: reason}, &list)
	return list.Envs, err
}
