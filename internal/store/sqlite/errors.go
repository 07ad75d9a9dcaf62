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
// violation is store.ErrConflict. Other errors keep their driver text.
func interpretError(action string, err error) error {
	if err == nil {
		return nil
	}
	switch {
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
