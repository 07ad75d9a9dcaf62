package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"trainyard/internal/store"
)

// SQLSTATE codes the store acts on.
const (
	codeUniqueViolation = "23505"
	codeInFailedTx      = "25P02"
)

// interpretError maps driver errors to the store's sentinels and prefixes the
// action that failed: no rows is store.ErrNotFound, a unique or primary-key
// violation is store.ErrConflict, a database that cannot be reached or is not
// serving is store.ErrUnavailable (see isUnavailable). Other errors keep
// their driver text.
func interpretError(action string, err error) error {
	if err == nil {
		return nil
	}
	if se := (stmtError{}); errors.As(err, &se) {
		return err // interpreted where it was queued
	}
	switch {
	case errors.Is(err, store.ErrUnavailable):
		return fmt.Errorf("%s: %w", action, err)
	case isUnavailable(err):
		return fmt.Errorf("%s: %w (%v)", action, store.ErrUnavailable, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", action, err)
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%s: %w", action, store.ErrNotFound)
	case isUniqueViolation(err):
		return fmt.Errorf("%s: %w (%v)", action, store.ErrConflict, err)
	}
	return fmt.Errorf("%s: %w", action, err)
}

// SQLSTATEs of a server that is going away or not serving yet.
const (
	codeTooManyConnections = "53300" // too_many_connections
	codeAdminShutdown      = "57P01" // admin_shutdown: terminating connection due to administrator command
	codeCrashShutdown      = "57P02" // crash_shutdown
	codeCannotConnectNow   = "57P03" // cannot_connect_now: the database system is starting up / shutting down
)

// isUnavailable reports whether err means the database could not be reached
// or stopped serving: a failed connect (refused, timed out, the server
// starting up or shutting down), a connection lost mid-call (reset, closed,
// end of stream, a network timeout), a server terminating the connection
// (SQLSTATE class 08, 57P01–57P03) or refusing more clients (53300). The
// caller's own cancellation is not an outage, nor is its deadline, unless it
// ran out while connecting (a pool that cannot get a connection).
func isUnavailable(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case codeTooManyConnections, codeAdminShutdown, codeCrashShutdown, codeCannotConnectNow:
			return true
		}
		return strings.HasPrefix(pe.Code, "08") // connection_exception
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true // dial, read or write on the connection failed
	}
	return errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// isUniqueViolation reports whether err is a UNIQUE or PRIMARY KEY
// constraint failure.
func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == codeUniqueViolation
}

// violatedConstraint returns the name of the unique constraint or index err
// violated ("" for any other error).
func violatedConstraint(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == codeUniqueViolation {
		return pe.ConstraintName
	}
	return ""
}

// hasParam reports whether the connection string sets key (URL query or
// key=value form).
func hasParam(dsn, key string) bool {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		return u.Query().Has(key)
	}
	for _, f := range strings.Fields(dsn) {
		if k, _, ok := strings.Cut(f, "="); ok && k == key {
			return true
		}
	}
	return false
}

// redact returns err's text with the connection string's password, if any,
// masked.
func redact(err error, dsn string) string {
	msg := err.Error()
	var pw string
	if u, perr := url.Parse(dsn); perr == nil && u.User != nil {
		pw, _ = u.User.Password()
	} else {
		for _, f := range strings.Fields(dsn) {
			if v, ok := strings.CutPrefix(f, "password="); ok {
				pw = strings.Trim(v, "'")
			}
		}
	}
	if pw != "" {
		msg = strings.ReplaceAll(msg, pw, "xxxxx")
	}
	return msg
}
