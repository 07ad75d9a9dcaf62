package sqlstore

import (
	"fmt"
	"strings"
	"testing"

	"trainyard/internal/store"
)

func TestQ(t *testing.T) {
	for _, c := range []struct{ in, sqlite, postgres string }{
		{`SELECT a FROM t WHERE b = ? AND c = ?`, `SELECT a FROM t WHERE b = ? AND c = ?`, `SELECT a FROM t WHERE b = $1 AND c = $2`},
		{`SELECT '?', "a?" FROM t WHERE b = ?`, `SELECT '?', "a?" FROM t WHERE b = ?`, `SELECT '?', "a?" FROM t WHERE b = $1`},
		{`SELECT a FROM t ORDER BY a{C}, b`, `SELECT a FROM t ORDER BY a, b`, `SELECT a FROM t ORDER BY a COLLATE "C", b`},
		{`SELECT a FROM t WHERE id = ?{FOR UPDATE}`, `SELECT a FROM t WHERE id = ?`, `SELECT a FROM t WHERE id = $1 FOR UPDATE`},
		{`SELECT 'it''s' WHERE x = ?`, `SELECT 'it''s' WHERE x = ?`, `SELECT 'it''s' WHERE x = $1`},
		{`UPDATE jobs SET {REV}, a = ? WHERE id = ?`, `UPDATE jobs SET rev = ?, a = ? WHERE id = ?`,
			`UPDATE jobs SET changed_xid = pg_current_xact_id(), a = $1 WHERE id = $2`},
	} {
		q := Q(c.in)
		if got := q.SQL(SQLite); got != c.sqlite {
			t.Errorf("Q(%q) for SQLite = %q, want %q", c.in, got, c.sqlite)
		}
		if got := q.SQL(Postgres); got != c.postgres {
			t.Errorf("Q(%q) for PostgreSQL = %q, want %q", c.in, got, c.postgres)
		}
		if got, want := q.Revised(), strings.Contains(c.in, "{REV}"); got != want {
			t.Errorf("Q(%q).Revised() = %v, want %v", c.in, got, want)
		}
	}
}

// The revision is SQLite's first argument, so no placeholder may come
// before its marker.
func TestQRevisionFirst(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Q accepted {REV} after a placeholder")
		}
	}()
	Q(`UPDATE jobs SET a = ?, {REV} WHERE id = ?`)
}

// TestListAuditQuery checks that each engine gets the text its backend wrote
// before the read was shared: a target prefix compares bytes on PostgreSQL.
func TestListAuditQuery(t *testing.T) {
	q, args := listAuditQuery(store.AuditFilter{Actor: "user:a", Target: "job/", AfterSeq: 7, Limit: 10})
	const cols = `SELECT ` + auditColumns + ` FROM audit WHERE `
	if got, want := q.SQL(SQLite), cols+`actor = ? AND target >= ? AND target < ? AND seq > ? ORDER BY seq LIMIT ?`; got != want {
		t.Errorf("SQLite text = %q, want %q", got, want)
	}
	if got, want := q.SQL(Postgres), cols+`actor = $1 AND target COLLATE "C" >= $2 AND target COLLATE "C" < $3 AND seq > $4 ORDER BY seq LIMIT $5`; got != want {
		t.Errorf("PostgreSQL text = %q, want %q", got, want)
	}
	if want := []any{"user:a", "job/", "job0", int64(7), 10}; fmt.Sprint(args) != fmt.Sprint(want) {
		t.Errorf("args = %v, want %v", args, want)
	}
}
