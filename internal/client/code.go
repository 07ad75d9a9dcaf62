package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"trainyard/internal/api/apitypes"
)

// CodeExists reports whether the server already stores the code package
// with this hash ("sha256:<hex>"), via HEAD /api/v1/code/{hash}.
func (c *Client) CodeExists(ctx context.Context, hash string) (bool, error) {
	resp, err := c.do(ctx, http.MethodHead, codePath(hash), nil, nil, nil, "")
	if IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	return true, nil
}

// UploadCode streams a code package of size bytes from r to PUT
// /api/v1/code/{hash}. The server checks that the bytes hash to hash and
// stores nothing otherwise. Wrap r to observe progress.
func (c *Client) UploadCode(ctx context.Context, hash string, r io.Reader, size int64) (apitypes.CodePackage, error) {
	var out apitypes.CodePackage
	if c.base == "" {
		return out, fmt.Errorf("no server URL set: pass --server or set TRAINYARD_SERVER (e.g. http://127.0.0.1:7070)")
	}
	u := c.base + codePath(hash)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, io.NopCloser(r))
	if err != nil {
		return out, fmt.Errorf("invalid server URL %q: %w; set --server or TRAINYARD_SERVER to e.g. http://127.0.0.1:7070", c.base, err)
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/gzip")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		if isUnreachable(err) {
			return out, &UnreachableError{URL: c.base, Err: err}
		}
		return out, fmt.Errorf("upload code package to %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		return out, decodeError(resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return out, fmt.Errorf("decode response of PUT %s from %s: %w (is this a Trainyard server?)", codePath(hash), c.base, err)
	}
	return out, nil
}

func codePath(hash string) string {
	return "/api/v1/code/" + strings.TrimSpace(hash)
}
