package postgres

import (
	"time"
)

// Times are stored as BIGINT Unix nanoseconds in UTC, and the zero time as
// NULL, so every time.Time round-trips exactly (years 1678 to 2262), as in
// the SQLite backend.

// timeArg is the column value of t.
func timeArg(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	n := t.UnixNano()
	return &n
}

// normTime is t as it reads back from the database.
func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return time.Unix(0, t.UnixNano()).UTC()
}

func boolArg(b bool) int32 {
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

// rowScanner is a pgx.Row or pgx.Rows.
type rowScanner interface {
	Scan(dest ...any) error
}
