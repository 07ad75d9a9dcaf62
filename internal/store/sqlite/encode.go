package sqlite

import (
	"database/sql"
	"time"
)

// Times are stored as integer Unix nanoseconds in UTC, and the zero time as
// NULL, so every time.Time round-trips exactly (years 1678 to 2262).

// timeArg is the column value of t.
func timeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

// timeOf is the time.Time of a column value written by timeArg.
func timeOf(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64).UTC()
}

// normTime is t as it reads back from the database.
func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return time.Unix(0, t.UnixNano()).UTC()
}

// nullString stores the empty string as NULL (for UNIQUE columns where empty
// means "none").
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func boolArg(b bool) int {
	if b {
		return 1
	}
	return 0
}

func exitCodeArg(code *int) any {
	if code == nil {
		return nil
	}
	return int64(*code)
}

func exitCodeOf(n sql.NullInt64) *int {
	if !n.Valid {
		return nil
	}
	c := int(n.Int64)
	return &c
}
