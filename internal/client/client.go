// Package client is the typed Go client of the Trainyard HTTP API (/api/v1).
// The CLI is built on it; tests and scripts may use it directly.
//
// Every method takes a context and returns the apitypes wire types. A non-2xx
// response becomes an *APIError; a server that cannot be reached becomes an
// *UnreachableError that says how to start or point at one. With WithRetry,
// idempotent calls are repeated while the server answers 503 or refuses
// connections, and a call that never got through becomes a *RetryError.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"trainyard/internal/api/apitypes"
)

// DefaultUserAgent is sent when no WithUserAgent option is given.
const DefaultUserAgent = "trainyard-go-client"

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 1 << 20

// Client calls one Trainyard server. It is safe for concurrent use.
type Client struct {
	base      string // no trailing slash
	token     string
	hc        *http.Client
	userAgent string
	retry     Retry // retry.go; For 0: no retries
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the client send its requests through hc. Give it no
// overall Timeout if you follow logs: a followed stream lasts as long as the
// attempt runs. Use contexts for deadlines instead.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.hc = hc
		}
	}
}

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) Option {
	return func(c *Client) {
		if ua != "" {
			c.userAgent = ua
		}
	}
}

// New returns a client for the server at baseURL (e.g. "http://127.0.0.1:7070";
// a missing scheme means http) that authenticates with token. An empty token
// sends no Authorization header.
func New(baseURL, token string, opts ...Option) *Client {
	base := strings.TrimSpace(baseURL)
	if base != "" && !strings.Contains(base, "://") {
		base = "http://" + base
	}
	c := &Client{
		base:      strings.TrimRight(base, "/"),
		token:     token,
		hc:        http.DefaultClient,
		userAgent: DefaultUserAgent,
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// BaseURL returns the server URL the client talks to, normalised.
func (c *Client) BaseURL() string { return c.base }

// ListOptions filters and pages GET /api/v1/jobs. Zero values mean "no filter"
// and "the server's default page size".
type ListOptions struct {
	States  []string // any of these states
	Project string
	User    string // the submitter
	Pool    string
	Name    string // a piece of the job name, in either case
	Limit   int
	Cursor  string // NextCursor of the previous page
	Sweep   int64  // only the members of this sweep
}

// LogOptions selects what GET /api/v1/jobs/{id}/logs returns.
type LogOptions struct {
	Attempt    int    // 0: the latest attempt
	Follow     bool   // keep streaming until the attempt ends
	Tail       int    // 0: every line; N: only the last N lines
	Timestamps bool   // "<RFC3339Nano> <stream> <text>" instead of the bare text
	Grep       string // only lines whose text matches this regular expression (RE2)
	Since      string // only lines since a duration ago ("10m") or an RFC 3339 time
}

// Submit creates a job. A non-empty idempotencyKey is sent as the
// Idempotency-Key header: repeating a submit with the same key returns the job
// the first one created (with Created set to false).
func (c *Client) Submit(ctx context.Context, req apitypes.SubmitRequest, idempotencyKey string) (apitypes.Job, error) {
	var job apitypes.Job
	h := http.Header{}
	if idempotencyKey != "" {
		h.Set("Idempotency-Key", idempotencyKey)
	}
	err := c.doJSON(ctx, http.MethodPost, "/api/v1/jobs", nil, h, req, &job)
	return job, err
}

// PreviewSubmit runs a submit's checks and reports what it would store and
// where the job would wait, storing nothing (submit --dry-run).
func (c *Client) PreviewSubmit(ctx context.Context, req apitypes.SubmitRequest) (apitypes.SubmitPreview, error) {
	var pv apitypes.SubmitPreview
	err := c.doJSON(ctx, http.MethodPost, "/api/v1/jobs/preview", nil, nil, req, &pv)
	return pv, err
}

// GetJob returns one job with its spec, attempts and transitions.
func (c *Client) GetJob(ctx context.Context, id int64) (apitypes.Job, error) {
	var job apitypes.Job
	err := c.doJSON(ctx, http.MethodGet, jobPath(id, ""), nil, nil, nil, &job)
	return job, err
}

// ListJobs returns one page of jobs, newest first.
func (c *Client) ListJobs(ctx context.Context, opts ListOptions) (apitypes.JobList, error) {
	q := url.Values{}
	if len(opts.States) > 0 {
		q.Set("state", strings.Join(opts.States, ","))
	}
	if opts.Project != "" {
		q.Set("project", opts.Project)
	}
	if opts.User != "" {
		q.Set("user", opts.User)
	}
	if opts.Pool != "" {
		q.Set("pool", opts.Pool)
	}
	if opts.Sweep != 0 {
		q.Set("sweep", strconv.FormatInt(opts.Sweep, 10))
	}
	if opts.Name != "" {
		q.Set("q", opts.Name)
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.Cursor != "" {
		q.Set("cursor", opts.Cursor)
	}
	var list apitypes.JobList
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/jobs", q, nil, nil, &list)
	return list, err
}

// Cancel asks the server to cancel a job. A queued or held job is canceled at
// once; a running one is stopped within its grace period (the returned job has
// CancelRequested set and is not yet terminal).
func (c *Client) Cancel(ctx context.Context, id int64, reason string) (apitypes.Job, error) {
	var job apitypes.Job
	err := c.doJSON(ctx, http.MethodPost, jobPath(id, "/cancel"), nil, nil, apitypes.CancelRequest{Reason: reason}, &job)
	return job, err
}

// Hold keeps a queued job out of scheduling until Release; holding a held
// job changes nothing.
func (c *Client) Hold(ctx context.Context, id int64, reason string) (apitypes.Job, error) {
	var job apitypes.Job
	err := c.doJSON(ctx, http.MethodPost, jobPath(id, "/hold"), nil, nil, apitypes.HoldRequest{Reason: reason}, &job)
	return job, err
}

// Release puts a held job back in the queue; releasing a queued job
// changes nothing.
func (c *Client) Release(ctx context.Context, id int64) (apitypes.Job, error) {
	var job apitypes.Job
	err := c.doJSON(ctx, http.MethodPost, jobPath(id, "/release"), nil, nil, nil, &job)
	return job, err
}

// Logs opens the log of one attempt of a job. The caller must close the
// returned reader. With Follow the stream stays open until the attempt ends or
// ctx is canceled.
func (c *Client) Logs(ctx context.Context, id int64, opts LogOptions) (io.ReadCloser, error) {
	q := url.Values{}
	if opts.Attempt > 0 {
		q.Set("attempt", strconv.Itoa(opts.Attempt))
	}
	if opts.Follow {
		q.Set("follow", "true")
	}
	if opts.Tail > 0 {
		q.Set("tail", strconv.Itoa(opts.Tail))
	}
	if opts.Timestamps {
		q.Set("timestamps", "true")
	}
	if opts.Grep != "" {
		q.Set("grep", opts.Grep)
	}
	if opts.Since != "" {
		q.Set("since", opts.Since)
	}
	resp, err := c.do(ctx, http.MethodGet, jobPath(id, "/logs"), q, nil, nil, "text/plain")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// Why returns a job's current pending or failure reason with its evidence.
func (c *Client) Why(ctx context.Context, id int64) (apitypes.Why, error) {
	var w apitypes.Why
	err := c.doJSON(ctx, http.MethodGet, jobPath(id, "/why"), nil, nil, nil, &w)
	return w, err
}

// Version returns the server's version.
func (c *Client) Version(ctx context.Context) (apitypes.Version, error) {
	var v apitypes.Version
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/version", nil, nil, nil, &v)
	return v, err
}

// Health checks GET /healthz (no authentication). It returns nil when the
// server answers 2xx.
func (c *Client) Health(ctx context.Context) error {
	resp, err := c.do(ctx, http.MethodGet, "/healthz", nil, nil, nil, "")
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	return resp.Body.Close()
}

func jobPath(id int64, suffix string) string {
	return "/api/v1/jobs/" + strconv.FormatInt(id, 10) + suffix
}

// doJSON sends body (when non-nil) as JSON and decodes a 2xx JSON response
// into out.
func (c *Client) doJSON(ctx context.Context, method, path string, q url.Values, h http.Header, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode %s %s request: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	resp, err := c.do(ctx, method, path, q, h, rd, "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode response of %s %s from %s: %w (is this a Trainyard server?)", method, path, c.base, err)
	}
	return nil
}

// do sends a request and returns the response when its status is 2xx; else
// it reads the body into an *APIError. An idempotent call is repeated as
// c.retry says (retry.go).
func (c *Client) do(ctx context.Context, method, path string, q url.Values, h http.Header, body io.Reader, accept string) (*http.Response, error) {
	if c.retry.For <= 0 || c.base == "" || !idempotent(method, path, h) {
		return c.doOnce(ctx, method, path, q, h, body, accept)
	}
	return c.doRetrying(ctx, method, path, func(body io.Reader) (*http.Response, error) {
		return c.doOnce(ctx, method, path, q, h, body, accept)
	}, body)
}

// doOnce sends one request: do without retries.
func (c *Client) doOnce(ctx context.Context, method, path string, q url.Values, h http.Header, body io.Reader, accept string) (*http.Response, error) {
	if c.base == "" {
		return nil, errors.New("no server URL set: pass --server or set TRAINYARD_SERVER (e.g. http://127.0.0.1:7070)")
	}
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("invalid server URL %q: %w; set --server or TRAINYARD_SERVER to e.g. http://127.0.0.1:7070", c.base, err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	req.Header.Set("User-Agent", c.userAgent)
	if c.token != "" && strings.HasPrefix(path, "/api/") {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if isUnreachable(err) {
			return nil, &UnreachableError{URL: c.base, Err: err}
		}
		if strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
			return nil, &SchemeError{URL: c.base, Err: err}
		}
		return nil, fmt.Errorf("%s %s: %w", method, u, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	err = decodeError(resp)
	if e, ok := err.(*APIError); ok && e.Status == http.StatusBadRequest && strings.Contains(e.Message, "HTTP request to an HTTPS server") {
		return nil, &SchemeError{URL: c.base, Err: err}
	}
	return nil, err
}

// isUnreachable reports whether err means no connection could be made at
// all (refused, unknown host, no route), as opposed to a failure mid-request.
func isUnreachable(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

// decodeError turns a non-2xx response into an *APIError. A body that is not
// the JSON error shape (a proxy's HTML page, say) is kept, shortened, as the
// message.
func decodeError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &APIError{Status: resp.StatusCode, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
	var body apitypes.Error
	if err := json.Unmarshal(raw, &body); err == nil && (body.Error.Code != "" || body.Error.Message != "") {
		e.Code = body.Error.Code
		e.Message = body.Error.Message
		e.Fields = body.Error.Fields
		return e
	}
	e.Message = http.StatusText(resp.StatusCode)
	if s := strings.TrimSpace(string(raw)); s != "" {
		const max = 200
		if len(s) > max {
			s = s[:max] + "…"
		}
		e.Message += ": " + s
	}
	return e
}

// Status asks /readyz which replica answered and which one leads. A single
// server (no replicas) answers Status{Leading: true} with only Store empty.
func (c *Client) Status(ctx context.Context) (apitypes.Status, error) {
	resp, err := c.do(ctx, http.MethodGet, "/readyz", nil, nil, nil, "application/json")
	if err != nil {
		return apitypes.Status{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return apitypes.Status{}, err
	}
	var st apitypes.Status
	if json.Unmarshal(b, &st) != nil {
		return apitypes.Status{Leading: true}, nil // a single server answers "ok"
	}
	return st, nil
}
