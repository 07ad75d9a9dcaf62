package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"trainyard/internal/client"
	"trainyard/internal/domain"
)

// Exit codes: one table for every command, documented in docs/cli.md.
// Scripts tell "try again later" (5) from "fix the request" (2, 3, 4).
const (
	ExitOK          = 0   // success
	ExitFailure     = 1   // a job did not succeed (--wait/--follow), or any other error
	ExitUsage       = 2   // invalid input: bad flags or arguments, an invalid spec (HTTP 400, 422)
	ExitNotFound    = 3   // what was named does not exist (HTTP 404)
	ExitPermission  = 4   // the token is missing, rejected or lacks the right (HTTP 401, 403)
	ExitUnavailable = 5   // the server cannot be reached or is not serving (HTTP 502, 503, 504)
	ExitConflict    = 6   // the request clashes with the current state (HTTP 409)
	ExitInterrupted = 130 // interrupted, as a shell reports SIGINT
)

// ExitCode maps an error returned by a command to the process exit code.
// An error that carries its code (exitError) keeps it; a server's answer is
// mapped by its HTTP status (apiExitCode); the rest is ExitFailure.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if errors.Is(err, context.Canceled) {
		return ExitInterrupted
	}
	var ue *client.UnreachableError
	var se *client.SchemeError // may wrap the server's 400
	if errors.As(err, &ue) || errors.As(err, &se) {
		return ExitUnavailable
	}
	var ae *client.APIError
	if errors.As(err, &ae) {
		return apiExitCode(ae.Status)
	}
	if errors.Is(err, domain.ErrInvalid) {
		return ExitUsage
	}
	return ExitFailure
}

// apiExitCode is the exit code of a server's non-2xx answer.
func apiExitCode(status int) int {
	switch status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusRequestEntityTooLarge:
		return ExitUsage
	case http.StatusNotFound:
		return ExitNotFound
	case http.StatusUnauthorized, http.StatusForbidden:
		return ExitPermission
	case http.StatusConflict:
		return ExitConflict
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return ExitUnavailable
	default:
		return ExitFailure
	}
}

// exitErrorf returns an error with the message and exit code given, for
// what the CLI finds itself (a pool that already exists: ExitConflict).
func exitErrorf(code int, format string, args ...any) error {
	return &exitError{code: code, err: fmt.Errorf(format, args...)}
}
