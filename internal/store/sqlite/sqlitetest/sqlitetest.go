// Package sqlitetest opens SQLite stores for tests.
package sqlitetest

import (
	"context"
	"path/filepath"
	"testing"

	"trainyard/internal/store/sqlite"
)

// Open opens the SQLite store dir/db.sqlite (created when missing),
// closed when the test ends.
func Open(t testing.TB, dir string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
