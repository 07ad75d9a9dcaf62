package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	sqlitedriver "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"trainyard/internal/store"
)

// interpretError maps driver errors to the store's sentinels and prefixes the
// action that failed: no rows is store.ErrNotFound, a unique or primary-key
// violation is store.ErrConflict, a database locked beyond the busy timeout or
// a disk I/O error is store.ErrUnavailable. Other errors keep their driver
// text.
func interpretError(action string, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, store.ErrUnavailable):
		return fmt.Errorf("%s: %w", action, err)
	case isUnavailable(err):
		return fmt.Errorf("%s: %w (%v)", action, store.ErrUnavailable, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", action, err)
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%s: %w", action, store.ErrNotFound)
	case isUniqueViolation(err):
		return fmt.Errorf("%s: %w (%v)", action, store.ErrConflict, err)
	}
	return fmt.Errorf("%s: %w", action, err)
}

// isUniqueViolation reports whether err is a UNIQUE or PRIMARY KEY constraint
// failure.
func isUniqueViolation(err error) bool {
	var se *sqlitedriver.Error
	if !errors.As(err, &se) {
		return false
	}
	code := se.Code()
	return code == sqlite3.SQLITE_CONSTRAINT_UNIQUE || code == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

// isUnavailable reports whether err means the database file cannot be used
// now: SQLITE_BUSY after the busy timeout (another process holds the write
// lock) or SQLITE_IOERR (the disk failed a read or write), with any of their
// extended codes.
func isUnavailable(err error) bool {
	var se *sqlitedriver.Error
	return errors.As(err, &se) && unavailableCode(se.Code())
}

// unavailableCode reports whether an SQLite result code, primary or
// extended, is SQLITE_BUSY or SQLITE_IOERR.
func unavailableCode(code int) bool {
	switch code & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_IOERR:
		return true
	}
	return false
}
