package sqlstore

import (
	"os"
	"strings"
	"testing"
)

// The migration that added usage_hours derives them from the history with
// the statements RebuildUsage runs, so both engines' stores start with the
// hours their attempts would have added.
func TestMigrationRebuildsUsageAsRebuildUsage(t *testing.T) {
	for e, path := range map[Engine]string{SQLite: "../sqlite/migrations/0030_usage_hours.sql",
		Postgres: "../postgres/migrations/0030_usage_hours.sql"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		migration := squash(string(b))
		for _, q := range RebuildUsageSQL(e)[1:] {
			if strings.Contains(q, "usage_at = NULL") {
				continue // a fresh column is NULL already
			}
			if !strings.Contains(migration, squash(q)) {
				t.Errorf("%s lacks the statement\n%s", path, q)
			}
		}
	}
}

func squash(s string) string { return strings.Join(strings.Fields(s), " ") }
