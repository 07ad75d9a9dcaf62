package client

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"trainyard/internal/api/apitypes"
)

// APIError is a non-2xx answer from the server.
type APIError struct {
	Status  int                   // HTTP status code
	Code    string                // stable machine code: invalid_spec, not_found, ...
	Message string                // what went wrong, from the server
	Fields  []apitypes.FieldError // every invalid field, for invalid_spec / invalid_request
	// RetryAfter is the wait the server asked for (Retry-After) with a
	// 429 or 503; 0 when it named none.
	RetryAfter time.Duration
}

// Error renders the message and then, one per line, every invalid field as
// "  path (line N): message". A rejected token (401) also says how to fix it,
// unless the server's message already does.
func (e *APIError) Error() string {
	var b strings.Builder
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	b.WriteString(msg)
	if e.Status == http.StatusUnauthorized && !strings.Contains(msg, "TRAINYARD_TOKEN") {
		b.WriteString(" — the server rejected the token; set a valid one with --token, TRAINYARD_TOKEN or the token: key of the config file (the server prints its admin token on first start)")
	}
	for _, f := range e.Fields {
		b.WriteString("\n  ")
		b.WriteString(FormatFieldError(f))
	}
	return b.String()
}

// FormatFieldError renders one field error as "path (line N): message", or
// "path: message" when the line is unknown.
func FormatFieldError(f apitypes.FieldError) string {
	path := f.Path
	if path == "" {
		path = "(document)"
	}
	if f.Line > 0 {
		return fmt.Sprintf("%s (line %d): %s", path, f.Line, f.Message)
	}
	return path + ": " + f.Message
}

// IsNotFound reports whether err is an *APIError with status 404.
func IsNotFound(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

// IsInvalid reports whether err is an *APIError that rejects the request's
// input (status 400 or 422).
func IsInvalid(err error) bool {
	var e *APIError
	return errors.As(err, &e) && (e.Status == http.StatusBadRequest || e.Status == http.StatusUnprocessableEntity)
}

// UnreachableError means no connection to the server could be made.
type UnreachableError struct {
	URL string
	Err error
}

// Error says which server could not be reached and how to get one.
func (e *UnreachableError) Error() string {
	return fmt.Sprintf("the Trainyard server at %s is not reachable (%v); start one with `trainyard server`, or point TRAINYARD_SERVER (or --server) at a running one", e.URL, rootCause(e.Err))
}

// Unwrap returns the underlying network error.
func (e *UnreachableError) Unwrap() error { return e.Err }

// SchemeError means the server URL's scheme is not what the server speaks:
// https:// for a server that serves plain HTTP, or http:// for one that
// serves HTTPS.
type SchemeError struct {
	URL string // the server URL as configured
	Err error
}

// Error says which way round the mismatch is and what to change.
func (e *SchemeError) Error() string {
	if rest, ok := strings.CutPrefix(e.URL, "https://"); ok {
		return fmt.Sprintf("the server at %s answered in plain HTTP, not HTTPS; use http://%s (--server or TRAINYARD_SERVER), or enable TLS on the server (trainyard server --tls-cert FILE --tls-key FILE)", e.URL, rest)
	}
	rest := strings.TrimPrefix(e.URL, "http://")
	return fmt.Sprintf("the server at %s serves HTTPS, not plain HTTP; use https://%s (--server or TRAINYARD_SERVER), with --ca-file if its certificate is private", e.URL, rest)
}

// Unwrap returns the transport's error or the server's answer.
func (e *SchemeError) Unwrap() error { return e.Err }

// rootCause strips the *url.Error / *net.OpError wrapping down to the
// system-level reason ("connection refused").
func rootCause(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}
