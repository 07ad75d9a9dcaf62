package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"trainyard/internal/api/apitypes"
)

// Whoami returns who the client's token acts as.
func (c *Client) Whoami(ctx context.Context) (apitypes.Whoami, error) {
	var w apitypes.Whoami
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/whoami", nil, nil, nil, &w)
	return w, err
}

// ListUsers returns every user with its roles (admins and auditors).
func (c *Client) ListUsers(ctx context.Context) ([]apitypes.User, error) {
	var l apitypes.UserList
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/users", nil, nil, nil, &l)
	return l.Users, err
}

// CreateUser creates a user without roles (admins).
func (c *Client) CreateUser(ctx context.Context, name string) (apitypes.User, error) {
	var u apitypes.User
	err := c.doJSON(ctx, http.MethodPost, "/api/v1/users", nil, nil, map[string]string{"name": name}, &u)
	return u, err
}

// GrantRole gives user a role, in b.Project for project roles.
func (c *Client) GrantRole(ctx context.Context, user string, b apitypes.RoleBinding) (apitypes.RoleChange, error) {
	var out apitypes.RoleChange
	err := c.doJSON(ctx, http.MethodPost, "/api/v1/users/"+url.PathEscape(user)+"/roles", nil, nil, b, &out)
	return out, err
}

// RevokeRole takes a role away from user.
func (c *Client) RevokeRole(ctx context.Context, user string, b apitypes.RoleBinding) (apitypes.RoleChange, error) {
	q := url.Values{"role": {b.Role}}
	if b.Project != "" {
		q.Set("project", b.Project)
	}
	var out apitypes.RoleChange
	err := c.doJSON(ctx, http.MethodDelete, "/api/v1/users/"+url.PathEscape(user)+"/roles", q, nil, nil, &out)
	return out, err
}

// CreateToken creates a token; the answer's Token field holds the secret,
// shown this once.
func (c *Client) CreateToken(ctx context.Context, req apitypes.TokenRequest) (apitypes.Token, error) {
	var t apitypes.Token
	err := c.doJSON(ctx, http.MethodPost, "/api/v1/tokens", nil, nil, req, &t)
	return t, err
}

// ListTokens lists the caller's tokens, user's (a non-empty user), or every
// user's (all).
func (c *Client) ListTokens(ctx context.Context, user string, all bool) ([]apitypes.Token, error) {
	q := url.Values{}
	if user != "" {
		q.Set("user", user)
	}
	if all {
		q.Set("all", "true")
	}
	var l apitypes.TokenList
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/tokens", q, nil, nil, &l)
	return l.Tokens, err
}

// RevokeToken revokes a token by id; it stops working at once.
func (c *Client) RevokeToken(ctx context.Context, id int64) (apitypes.Token, error) {
	var t apitypes.Token
	err := c.doJSON(ctx, http.MethodDelete, "/api/v1/tokens/"+strconv.FormatInt(id, 10), nil, nil, nil, &t)
	return t, err
}
