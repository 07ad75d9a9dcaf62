package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"syscall"
	"time"
)

// DefaultRetryFor is how long the CLI keeps retrying one call.
const DefaultRetryFor = 30 * time.Second

// DefaultRefusedFor is how long a refused connection is retried: long
// enough for a server to restart, short enough that a command against a
// server that is not running says so at once.
const DefaultRefusedFor = 5 * time.Second

// Retry says how a Client repeats a call the server could not serve for
// now: a 503 answer (the store is unavailable, the server is not ready) or
// a refused connection (the server is restarting). Only idempotent calls
// are repeated: GET and HEAD, and calls that carry an Idempotency-Key (a
// submit or rerun with a key returns the job the first one created). The
// probes /healthz and /readyz are never repeated: they report the state.
type Retry struct {
	// For bounds the time spent on one call, from its first try; 0 turns
	// retries off. The last wait is cut to what is left, then the call is
	// tried once more.
	For time.Duration
	// RefusedFor bounds, within For, how long refused connections are
	// retried (default DefaultRefusedFor).
	RefusedFor time.Duration
	// Base is the first wait (default 500ms); each later one doubles, up
	// to Max (default 8s). A Retry-After the server sends is waited at
	// least, within For.
	Base, Max time.Duration
	// Notify, when set, is called before each wait.
	Notify func(RetryNotice)
}

// RetryNotice tells what failed and how long the client waits.
type RetryNotice struct {
	Cause string        // e.g. "store unavailable (503)", "server not reachable (connection refused)"
	Wait  time.Duration // before the next try
	Try   int           // the try that failed, from 1
}

// String renders the notice as one line for a person, e.g.
// "store unavailable (503); retrying in 2s…".
func (n RetryNotice) String() string {
	d := n.Wait.Round(100 * time.Millisecond)
	if d == 0 {
		d = n.Wait.Round(time.Millisecond)
	}
	return fmt.Sprintf("%s; retrying in %s…", n.Cause, d)
}

// WithRetry makes the client repeat idempotent calls as r says. Without it
// (or with r.For 0) every call is tried once.
func WithRetry(r Retry) Option {
	return func(c *Client) {
		if r.Base <= 0 {
			r.Base = 500 * time.Millisecond
		}
		if r.Max <= 0 {
			r.Max = 8 * time.Second
		}
		if r.RefusedFor <= 0 {
			r.RefusedFor = DefaultRefusedFor
		}
		c.retry = r
	}
}

// WithoutRetry returns a copy of c that tries every call once, for probes
// that report the state rather than wait it out.
func (c *Client) WithoutRetry() *Client {
	cp := *c
	cp.retry = Retry{}
	return &cp
}

// RetryError is a call that still failed when its retry time ran out. It
// unwraps to the last failure (an *APIError or *UnreachableError).
type RetryError struct {
	Tries int           // how many times the call was sent
	Took  time.Duration // from the first try to giving up
	Err   error         // the last failure
}

// Error says how long the client tried, then the last failure, which says
// what to do.
func (e *RetryError) Error() string {
	took := e.Took.Round(time.Second)
	if e.Took < time.Second {
		took = e.Took.Round(10 * time.Millisecond)
	}
	return fmt.Sprintf("still unavailable after retrying for %s (%d tries): %v", took, e.Tries, e.Err)
}

// Unwrap returns the last failure.
func (e *RetryError) Unwrap() error { return e.Err }

// idempotent reports whether a call may be sent again: GET or HEAD, or a
// call with an Idempotency-Key; never a probe.
func idempotent(method, path string, h http.Header) bool {
	if path == "/healthz" || path == "/readyz" {
		return false
	}
	return method == http.MethodGet || method == http.MethodHead || h.Get("Idempotency-Key") != ""
}

// retryCause says whether err is worth another try, why, and how long the
// server asked to wait.
func retryCause(err error) (cause string, after time.Duration, ok bool) {
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable {
		if ae.Code == "store_unavailable" {
			return "store unavailable (503)", ae.RetryAfter, true
		}
		return "server unavailable (503)", ae.RetryAfter, true
	}
	var ue *UnreachableError
	if errors.As(err, &ue) && errors.Is(ue.Err, syscall.ECONNREFUSED) {
		return "server not reachable (connection refused)", 0, true
	}
	return "", 0, false
}

// refused reports whether err is a refused connection.
func refused(err error) bool {
	var ue *UnreachableError
	return errors.As(err, &ue) && errors.Is(ue.Err, syscall.ECONNREFUSED)
}

// doRetrying is do with c.retry for an idempotent call: it buffers the body
// so every try sends it whole.
func (c *Client) doRetrying(ctx context.Context, method, path string, try func(body io.Reader) (*http.Response, error), body io.Reader) (*http.Response, error) {
	var buf []byte
	if body != nil {
		var err error
		if buf, err = io.ReadAll(body); err != nil {
			return nil, fmt.Errorf("read the %s %s request body: %w", method, path, err)
		}
	}
	start := time.Now()
	deadline := start.Add(c.retry.For)
	wait := c.retry.Base
	for n := 1; ; n++ {
		var rd io.Reader
		if buf != nil {
			rd = bytes.NewReader(buf)
		}
		resp, err := try(rd)
		cause, after, ok := retryCause(err)
		if !ok {
			return resp, err
		}
		left := time.Until(deadline)
		if refused(err) {
			left = min(left, time.Until(start.Add(c.retry.RefusedFor)))
		}
		if left <= 0 {
			return nil, &RetryError{Tries: n, Took: time.Since(start), Err: err}
		}
		d := min(max(wait, after), left)
		wait = min(2*wait, c.retry.Max)
		if c.retry.Notify != nil {
			c.retry.Notify(RetryNotice{Cause: cause, Wait: d, Try: n})
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// parseRetryAfter reads a Retry-After header: seconds or an HTTP date (0
// when absent or unreadable).
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
