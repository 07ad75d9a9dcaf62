package sqlite

import (
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
