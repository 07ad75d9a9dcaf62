package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"trainyard/internal/api/apitypes"
)

// Compare sets jobs side by side (2 to 20, each readable by the caller):
// their summaries, metric summaries and the spec fields that differ.
func (c *Client) Compare(ctx context.Context, ids []int64) (apitypes.Comparison, error) {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	var out apitypes.Comparison
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/compare", url.Values{"jobs": {strings.Join(s, ",")}}, nil, nil, &out)
	return out, err
}
