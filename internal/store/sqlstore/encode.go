package sqlstore

import (
	"database/sql"
	"time"
)

// Times are stored as integer Unix nanoseconds in UTC, and the zero time as
// NULL, so every time.Time round-trips exactly (years 1678 to 2262), in
// both engines.

// TimeArg is the column value of t.
func TimeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

// TimeOf is the time.Time of a column value written by TimeArg.
func TimeOf(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64).UTC()
}

// NormTime is t as it reads back from the database.
func NormTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return time.Unix(0, t.UnixNano()).UTC()
}

// BoolArg is the column value of b: booleans are INTEGER 0 or 1 in both
// engines.
func BoolArg(b bool) int {
	if b {
		return 1
	}
	return 0
}
