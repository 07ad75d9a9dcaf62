package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

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
// violation is store.ErrConflict. Other errors keep their driver text.
func interpretError(action string, err error) error {
	if err == nil {
		return nil
	}
	if se := (stmtError{}); errors.As(err, &se) {
		return err // interpreted where it was queued
	}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", action, err)
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%s: %w", action, store.ErrNotFound)
	case isUniqueViolation(err):
		return fmt.Errorf("%s: %w (%v)", action, store.ErrConflict, err)
	}
	return fmt.Errorf("%s: %w", action, err)
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
