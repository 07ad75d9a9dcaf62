package sqlstore

import "testing"

func TestQ(t *testing.T) {
	for _, c := range []struct{ in, sqlite, postgres string }{
		{`SELECT a FROM t WHERE b = ? AND c = ?`, `SELECT a FROM t WHERE b = ? AND c = ?`, `SELECT a FROM t WHERE b = $1 AND c = $2`},
		{`SELECT '?', "a?" FROM t WHERE b = ?`, `SELECT '?', "a?" FROM t WHERE b = ?`, `SELECT '?', "a?" FROM t WHERE b = $1`},
		{`SELECT a FROM t ORDER BY a{C}, b`, `SELECT a FROM t ORDER BY a, b`, `SELECT a FROM t ORDER BY a COLLATE "C", b`},
		{`SELECT a FROM t WHERE id = ?{FOR UPDATE}`, `SELECT a FROM t WHERE id = ?`, `SELECT a FROM t WHERE id = $1 FOR UPDATE`},
		{`SELECT 'it''s' WHERE x = ?`, `SELECT 'it''s' WHERE x = ?`, `SELECT 'it''s' WHERE x = $1`},
	} {
		q := Q(c.in)
		if got := q.SQL(SQLite); got != c.sqlite {
			t.Errorf("Q(%q) for SQLite = %q, want %q", c.in, got, c.sqlite)
		}
		if got := q.SQL(Postgres); got != c.postgres {
			t.Errorf("Q(%q) for PostgreSQL = %q, want %q", c.in, got, c.postgres)
		}
	}
}
